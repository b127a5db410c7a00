from epochfs.common.service import serve

from .app import create_app
from .config import GatewaySettings


def main() -> None:
    serve(create_app, GatewaySettings())


if __name__ == "__main__":
    main()
