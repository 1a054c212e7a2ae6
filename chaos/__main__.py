"""``python -m chaos``: the same CLI as the ``chaos`` console script."""

from chaos.cli import main

if __name__ == "__main__":
    main()
