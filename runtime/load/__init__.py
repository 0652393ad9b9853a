"""The load engine behind ``stowage load``: many sessions against one endpoint, with a report."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stowage._lazy import lazy_exports

if TYPE_CHECKING:
    from ._engine import add_load_arguments, main_load
    from ._faults import FAULT_NAMES, parse_fault_rates

__all__ = ["FAULT_NAMES", "parse_fault_rates", "add_load_arguments", "main_load"]

#: where each name is defined, imported when first looked up (see ``stowage._lazy``)
_EXPORTS = {
    "add_load_arguments": "._engine",
    "main_load": "._engine",
    "FAULT_NAMES": "._faults",
    "parse_fault_rates": "._faults",
}
if not TYPE_CHECKING:  # the checkers see the imports: a name not exported is an error
    __getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
