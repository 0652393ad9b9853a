"""The fault spec of ``stowage load --faults`` and the fake server: ``"429:0.05,slow:0.01"``."""

from __future__ import annotations

__all__ = ["FAULT_NAMES", "parse_fault_rates"]

# Names accepted by ``parse_fault_rates``: a status code or "slow".
FAULT_NAMES = ("429", "500", "502", "503", "slow")


def parse_fault_rates(spec: str) -> dict[str, float]:
    """``{"429": 0.05, "slow": 0.01}`` from ``"429:0.05,slow:0.01"`` (empty spec: no faults).

    Raises ``ValueError`` naming the bad part: an unknown fault, a rate outside [0, 1], or
    rates adding up to more than 1.
    """
    rates: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, sep, value = part.partition(":")
        if not sep or name not in FAULT_NAMES:
            raise ValueError(f"fault {part!r}: expected NAME:RATE with NAME in {FAULT_NAMES}")
        try:
            rate = float(value)
        except ValueError:
            raise ValueError(f"fault {part!r}: rate {value!r} is not a number") from None
        if not 0 <= rate <= 1:
            raise ValueError(f"fault {part!r}: rate must be between 0 and 1")
        rates[name] = rate
    if sum(rates.values()) > 1:
        raise ValueError(f"fault rates {spec!r} add up to more than 1")
    return rates
