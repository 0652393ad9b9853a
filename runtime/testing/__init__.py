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

    from ._fake_messages import BreakpointCache
    from ._fake_server import FakeOpenAIServer
    from ._fault_spec import Fault, FaultWhen
    from ._wire_check import call_ids, orphan_calls, orphan_outputs

__all__ = [
    "Brain",
    "BreakpointCache",
    "FakeOpenAIServer",
    "Fault",
    "FaultWhen",
    "ScriptedBrain",
    "ScriptedModel",
    "call_ids",
    "is_summary_request",
    "orphan_calls",
    "orphan_outputs",
    "scripted_usage",
]

#: where each name is defined, imported when first looked up (see ``stowage._lazy``)
_EXPORTS = {
    "Brain": "stowage.model",
    "ScriptedBrain": "stowage.model",
    "ScriptedModel": "stowage.model",
    "is_summary_request": "stowage.model",
    "scripted_usage": "stowage.model",
    "BreakpointCache": "._fake_messages",
    "FakeOpenAIServer": "._fake_server",
    "Fault": "._fault_spec",
    "FaultWhen": "._fault_spec",
    "call_ids": "._wire_check",
    "orphan_calls": "._wire_check",
    "orphan_outputs": "._wire_check",
}
if not TYPE_CHECKING:  # the checkers see the imports: a name not exported is an error
    __getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
