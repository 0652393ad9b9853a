"""The version of stowage, read from the installed distribution's metadata."""

from importlib.metadata import PackageNotFoundError, version

__all__ = ["DISTRIBUTION", "__version__"]

#: the name on PyPI; the import name and the command are ``stowage``
DISTRIBUTION = "stowage-runtime"

try:
    __version__ = version(DISTRIBUTION)
except PackageNotFoundError:  # pragma: no cover - running from a tree that was never installed
    __version__ = "0.0.0+unknown"
