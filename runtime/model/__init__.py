"""Model endpoints: the OpenAI gateway and its wire formats, the Anthropic (Claude) gateway and its
Messages wire, and the offline scripted model (a product feature: the demo and the default model run
on it)."""

from ._brain import ScriptedBrain, is_summary_request, scripted_usage
from ._discovery import (
    WINDOW_FIELDS,
    discover_context_window,
    discover_model_info,
    probe_endpoint,
    window_from_model_info,
)
from ._factory import make_gateway
from ._openai_wire import (
    COMPACTION_ITEM_TYPE,
    PURPOSE_HEADER,
    SUMMARY_PREFIX,
    chat_messages,
    responses_input,
)
from ._scripted import Brain, ScriptedModel

__all__ = [
    "COMPACTION_ITEM_TYPE",
    "Brain",
    "PURPOSE_HEADER",
    "SUMMARY_PREFIX",
    "WINDOW_FIELDS",
    "ScriptedBrain",
    "ScriptedModel",
    "chat_messages",
    "discover_context_window",
    "discover_model_info",
    "is_summary_request",
    "make_gateway",
    "probe_endpoint",
    "responses_input",
    "scripted_usage",
    "window_from_model_info",
]
