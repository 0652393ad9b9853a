"""What the sampler checks in a complete response before any of it is written: an answer
larger than ``max_answer_chars``, usage that cannot be true, and tool calls the output limit
cut off.

Pure functions: the sampler writes what they decide. A reported usage that cannot describe
the request (zero, or far below what its characters allow) is kept for audit only, and the
estimate stands, as for a provider that reports none. A call whose arguments the output
limit cut off (the response's ``finish_reason`` is ``length`` and they are not JSON) is
never run: it gets an error output naming the cause, so the model can ask again for less.
An answer past the cap is refused whole, like any other response that cannot be used: the
OpenAI gateway already stops reading at the cap, and this check holds for every gateway.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, replace

from stowage.core import (
    AssistantMessage,
    FunctionCall,
    FunctionCallOutput,
    ModelRequest,
    ModelResponse,
    Usage,
)
from stowage.policy import answer_chars, implausible_usage, oversized_answer, request_chars

__all__ = [
    "VettedUsage",
    "answer_too_large",
    "cut_call_outputs",
    "merge_outputs",
    "unique_call_ids",
    "vet_usage",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class VettedUsage:
    """The usage to record (None: treat as missing), the report set aside, and why."""

    usage: Usage | None
    rejected: Usage | None = None
    reason: str | None = None


def answer_too_large(response: ModelResponse, max_chars: int) -> str | None:
    """Why ``response`` is refused as larger than ``max_chars`` (``max_answer_chars``: its assistant
    text plus its call arguments), or None when it is within the cap."""
    return oversized_answer(answer_chars(response), max_chars)


def vet_usage(
    response: ModelResponse, request: ModelRequest, *, input_chars: int | None = None
) -> VettedUsage:
    """``response``'s usage if it can describe ``request`` (``input_chars``: its input items'
    characters, when known); else none, with the report and the reason kept."""
    usage = response.usage
    if usage is None:
        return VettedUsage(usage=None)
    reason = implausible_usage(usage, chars=request_chars(request, input_chars=input_chars))
    if reason is None:
        return VettedUsage(usage=usage)
    return VettedUsage(usage=None, rejected=usage, reason=reason)


def _is_json(arguments: str) -> bool:
    if not arguments.strip():
        return True  # some models send "" for a call without arguments
    try:
        json.loads(arguments)
    except ValueError:
        return False
    return True


def cut_call_outputs(
    response: ModelResponse, *, max_output_tokens: int | None
) -> dict[str, FunctionCallOutput]:
    """Error outputs, by call id."""
    if not response.truncated:
        return {}
    limit = f" ({max_output_tokens} tokens)" if max_output_tokens is not None else ""
    outputs: dict[str, FunctionCallOutput] = {}
    for call in response.calls:
        if _is_json(call.arguments):
            continue
        outputs[call.call_id] = FunctionCallOutput(
            call_id=call.call_id,
            output=(
                f"error: not run: the response was cut off by the output limit{limit} "
                f"(finish_reason 'length') before the arguments of this {call.name} call were "
                f"complete ({len(call.arguments)} characters arrived, not valid JSON). Ask for "
                "less in one call, or split the work."
            ),
            is_error=True,
        )
    return outputs


def merge_outputs(
    calls: tuple[FunctionCall, ...],
    refused: dict[str, FunctionCallOutput],
    ran: tuple[FunctionCallOutput, ...],
) -> tuple[FunctionCallOutput, ...]:
    """One output per call, in call order."""
    run = iter(ran)
    return tuple(refused.get(call.call_id) or next(run) for call in calls)


def unique_call_ids(response: ModelResponse, taken: Iterable[str], *, salt: str) -> ModelResponse:
    """``response`` with every call id unique in the session (``taken``: the ids its history
    holds; some servers number calls from 0 on every response), so outputs can never be
    matched to the wrong call."""
    seen = set(taken)
    items: list[AssistantMessage | FunctionCall] = []
    changed = False
    for n, item in enumerate(response.items):
        if isinstance(item, FunctionCall) and (not item.call_id or item.call_id in seen):
            fresh = f"{item.call_id or 'call'}-{salt}-{n}"
            while fresh in seen:  # a model may have sent that very id too
                fresh += "x"
            item = replace(item, call_id=fresh)
            changed = True
        if isinstance(item, FunctionCall):
            seen.add(item.call_id)
        items.append(item)
    return replace(response, items=tuple(items)) if changed else response
