"""A model zoo: in-process gateways that behave like real models where naive compaction breaks,
and a harness that checks the compaction promises against them (the project's own tests and
``scripts/simulate_compaction.py``; not shipped).

- ``members``: what each member is and answers, from the request alone; the zoo's token rule
  and the workspace files the members read (``write_zoo_file``).
- ``model``: ``ZooModel``, the gateway that plays any member, enforces a real window and
  records every request.
- ``checks``: what a violation is, and the pure checks over requests.
- ``harness``: ``ZooHarness``, one ``Runtime`` driven through the public API only, checked
  after every step.
"""

from __future__ import annotations

from .checks import (
    FINE_STOPS,
    VIOLATION_KINDS,
    Violation,
    ViolationKind,
    ZooFigures,
    breaks_prefix,
    irreducible_tokens,
    request_orphan_calls,
    request_orphan_outputs,
)
from .harness import ZooHarness, zoo_settings, zoo_tools
from .members import (
    CHARS_PER_TOKEN,
    USAGE_MODES,
    ZOO_MEMBERS,
    UsageMode,
    ZooBehaviour,
    ZooFile,
    request_tokens,
    write_zoo_file,
    zoo_behaviour,
)
from .model import ZooModel, ZooRequest, zoo_member

__all__ = [
    "CHARS_PER_TOKEN",
    "FINE_STOPS",
    "USAGE_MODES",
    "VIOLATION_KINDS",
    "ZOO_MEMBERS",
    "UsageMode",
    "Violation",
    "ViolationKind",
    "ZooBehaviour",
    "ZooFigures",
    "ZooFile",
    "ZooHarness",
    "ZooModel",
    "ZooRequest",
    "breaks_prefix",
    "irreducible_tokens",
    "request_orphan_calls",
    "request_orphan_outputs",
    "request_tokens",
    "write_zoo_file",
    "zoo_behaviour",
    "zoo_member",
    "zoo_settings",
    "zoo_tools",
]
