"""The version of stowage, read from the installed distribution's metadata.

The name of the distribution's ``.dist-info`` folder carries its version
(``stowage_runtime-0.1.0.dist-info``), so the folders on ``sys.path`` are looked at first: that
costs a directory listing, where ``importlib.metadata`` costs an import of email, zipfile and
csv (most of what ``stowage --version`` would take). A tree that has no such folder (an
egg-info install) asks ``importlib.metadata``.
"""

import os
import sys

__all__ = ["DISTRIBUTION", "__version__"]

#: the name on PyPI; the import name and the command are ``stowage``
DISTRIBUTION = "stowage-runtime"


def _from_dist_info() -> str | None:
    """The version in the name of the first ``stowage_runtime-VERSION.dist-info`` on the path."""
    prefix = DISTRIBUTION.replace("-", "_") + "-"
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:  # a zip file, a folder that is gone
            continue
        for name in names:
            if name.startswith(prefix) and name.endswith(".dist-info"):
                return name[len(prefix) : -len(".dist-info")]
    return None


def _from_metadata() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:  # pragma: no cover - running from a tree never installed
        return "0.0.0+unknown"


__version__ = _from_dist_info() or _from_metadata()
