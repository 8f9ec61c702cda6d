"""The package version, in a module of its own so that a worker importing a reader does not import the rest."""

__version__ = "0.2.0"
