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

#: the names each module defines, imported when first looked up (see ``stowage._lazy``)
_EXPORTS = {
    "stowage.model": "Brain ScriptedBrain ScriptedModel is_summary_request scripted_usage",
    "._fake_messages": "BreakpointCache",
    "._fake_server": "FakeOpenAIServer",
    "._fault_spec": "Fault FaultWhen",
    "._wire_check": "call_ids orphan_calls orphan_outputs",
}
if not TYPE_CHECKING:  # the checkers see the imports: a name not exported is an error
    __getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
