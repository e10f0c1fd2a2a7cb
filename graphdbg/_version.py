"""The package's version, in a module of its own so that no module needs the facade for it."""

__version__ = "0.1.0"
