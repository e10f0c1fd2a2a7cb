"""The CLI's commands, one module per group; ``ui/cli.py`` assembles them into the typer app."""
