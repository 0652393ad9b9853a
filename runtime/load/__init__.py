"""The load engine behind ``stowage load``: many sessions against one endpoint, with a report."""

from ._engine import add_load_arguments, main_load
from ._faults import FAULT_NAMES, parse_fault_rates

__all__ = [
    "FAULT_NAMES",
    "parse_fault_rates",
    "add_load_arguments",
    "main_load",
]
