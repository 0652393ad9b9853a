"""Model endpoints: the OpenAI gateway and its wire formats, shared call limits, and the
offline scripted model (a product feature: the demo and the default model run on it).
"""

from ._brain import ScriptedBrain, is_summary_request, scripted_usage
from ._limits import LimitedGateway
from ._openai_gateway import PURPOSE_HEADER, make_gateway
from ._openai_wire import SUMMARY_PREFIX
from ._scripted import Brain, ScriptedModel

__all__ = [
    "Brain",
    "LimitedGateway",
    "PURPOSE_HEADER",
    "SUMMARY_PREFIX",
    "ScriptedBrain",
    "ScriptedModel",
    "is_summary_request",
    "make_gateway",
    "scripted_usage",
]
