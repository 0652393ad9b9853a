"""Test doubles shipped for users: an offline scripted model and a fake OpenAI server."""

from stowage.model import Brain, ScriptedBrain, ScriptedModel, is_summary_request, scripted_usage

from ._fake_server import FakeOpenAIServer, Fault, FaultWhen
from ._wire_check import call_ids, orphan_calls

__all__ = [
    "Brain",
    "FakeOpenAIServer",
    "Fault",
    "FaultWhen",
    "ScriptedBrain",
    "ScriptedModel",
    "call_ids",
    "is_summary_request",
    "orphan_calls",
    "scripted_usage",
]
