from epochfs.common.service import serve

from .app import create_app
from .config import NameNodeSettings


def main() -> None:
    serve(create_app, NameNodeSettings())


if __name__ == "__main__":
    main()
