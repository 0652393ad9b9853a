"""Test doubles shipped for users: an offline scripted model and a fake OpenAI server."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stowage._lazy import lazy_exports

if TYPE_CHECKING:
    from stowage.model import (
        Brain,
        ScriptedBrain,
        ScriptedModel,
        is_summary_request,
        scripted_usage,
    )

    from ._fake_server import FakeOpenAIServer, Fault, FaultWhen
    from ._pairing import request_orphan_calls, request_orphan_outputs
    from ._wire_check import call_ids, orphan_calls, orphan_outputs
    from ._zoo import (
        USAGE_MODES,
        VIOLATION_KINDS,
        ZOO_MEMBERS,
        UsageMode,
        Violation,
        ViolationKind,
        ZooBehaviour,
        ZooFigures,
        ZooFile,
        ZooHarness,
        ZooModel,
        ZooRequest,
        breaks_prefix,
        irreducible_tokens,
        request_tokens,
        write_zoo_file,
        zoo_behaviour,
        zoo_member,
        zoo_settings,
        zoo_tools,
    )

__all__ = [
    "Brain",
    "FakeOpenAIServer",
    "Fault",
    "FaultWhen",
    "ScriptedBrain",
    "ScriptedModel",
    "USAGE_MODES",
    "UsageMode",
    "VIOLATION_KINDS",
    "Violation",
    "ViolationKind",
    "ZOO_MEMBERS",
    "ZooFigures",
    "ZooFile",
    "ZooHarness",
    "ZooBehaviour",
    "ZooModel",
    "ZooRequest",
    "breaks_prefix",
    "call_ids",
    "irreducible_tokens",
    "is_summary_request",
    "orphan_calls",
    "orphan_outputs",
    "request_orphan_calls",
    "request_orphan_outputs",
    "request_tokens",
    "scripted_usage",
    "write_zoo_file",
    "zoo_behaviour",
    "zoo_member",
    "zoo_settings",
    "zoo_tools",
]

#: where each name is defined, imported when first looked up (see ``stowage._lazy``)
_EXPORTS = {
    "Brain": "stowage.model",
    "ScriptedBrain": "stowage.model",
    "ScriptedModel": "stowage.model",
    "is_summary_request": "stowage.model",
    "scripted_usage": "stowage.model",
    "FakeOpenAIServer": "._fake_server",
    "Fault": "._fake_server",
    "FaultWhen": "._fake_server",
    "request_orphan_calls": "._pairing",
    "request_orphan_outputs": "._pairing",
    "call_ids": "._wire_check",
    "orphan_calls": "._wire_check",
    "orphan_outputs": "._wire_check",
    "USAGE_MODES": "._zoo",
    "VIOLATION_KINDS": "._zoo",
    "ZOO_MEMBERS": "._zoo",
    "UsageMode": "._zoo",
    "Violation": "._zoo",
    "ViolationKind": "._zoo",
    "ZooBehaviour": "._zoo",
    "ZooFigures": "._zoo",
    "ZooFile": "._zoo",
    "ZooHarness": "._zoo",
    "ZooModel": "._zoo",
    "ZooRequest": "._zoo",
    "breaks_prefix": "._zoo",
    "irreducible_tokens": "._zoo",
    "request_tokens": "._zoo",
    "write_zoo_file": "._zoo",
    "zoo_behaviour": "._zoo",
    "zoo_member": "._zoo",
    "zoo_settings": "._zoo",
    "zoo_tools": "._zoo",
}
if not TYPE_CHECKING:  # the checkers see the imports: a name not exported is an error
    __getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
