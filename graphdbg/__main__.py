"""``python -m graphdbg`` and the ``graphdbg`` console script: the graphdbg command line.

``ls PATH`` with its own options only is answered without importing typer and click
(``ui/ls_command.py``); every other command line, and any error, is the CLI's (``ui/cli.py``).
"""

import sys

from graphdbg.ui.ls_command import plain_ls, run_ls


def main() -> None:
    args = plain_ls(sys.argv[1:])
    if args is None:
        from graphdbg.ui.cli import main as cli  # lazy: typer and the commands, for every other command line

        cli()
        return
    try:
        code = run_ls(**args)
    except (Exception, KeyboardInterrupt) as e:
        from graphdbg.ui.cli import exit_for  # lazy: as above, for the one line of an error

        exit_for(e)
    sys.exit(code)


if __name__ == "__main__":
    main()
