"""The package version (a leaf: views read it without importing the package)."""

__version__ = "0.1.0"
