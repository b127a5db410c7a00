from epochfs.common.service import serve

from .app import create_app
from .config import DataNodeSettings


def main() -> None:
    serve(create_app, DataNodeSettings())


if __name__ == "__main__":
    main()
