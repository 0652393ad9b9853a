"""Lazy exports for the package ``__init__`` modules: a name is imported from its submodule when
it is first looked up, so ``import stowage`` (and the ``stowage`` command) loads only what is used.

Each package keeps the eager imports under ``if TYPE_CHECKING:`` for the type checkers, and a
table of the same names for the interpreter::

    __getattr__, __dir__ = lazy_exports(__name__, globals(), {"Runtime": "._runtime"})
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, namespace: MutableMapping[str, Any], table: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of ``package``."""

    def __getattr__(name: str) -> Any:
        try:
            module_name = table[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        if module_name.startswith("."):
            module_name = package + module_name
        # the import statement's own path (not importlib.import_module): ``python -X importtime``
        # then shows each module a look-up loads, with its own time
        module = __import__(module_name, fromlist=("__name__",))
        value = getattr(module, name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *table})

    return __getattr__, __dir__
