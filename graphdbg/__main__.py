"""``python -m graphdbg``: the graphdbg command line."""

from graphdbg.ui.cli import main

if __name__ == "__main__":
    main()
