"""A summary request is built to fit its window, whatever history holds: its oldest rounds
dropped first, then its largest texts clipped to their head and tail (the log keeps them
whole). An endpoint that answers with 850,000 characters and reports 10 output tokens must
not make the next summary request 230,000 tokens long."""

from __future__ import annotations

from pathlib import Path

import anyio
from stowage import AssistantMessage, ModelRequest, ModelResponse, Runtime, Settings, UserMessage
from stowage.core import Usage, estimate_tokens
from stowage.model._brain import is_summary_request
from stowage.model._scripted import ScriptedModel
from stowage.policy import clip_to_fit

HUGE = "0123456789abcdefghijklmnopqrstuvwxyz " * 23_000  # ~850,000 characters


def test_clip_to_fit_cuts_the_largest_texts_to_their_head_and_tail() -> None:
    items = [UserMessage(text="hi"), AssistantMessage(text=HUGE), UserMessage(text="summarize")]
    fitted = clip_to_fit(items, budget_tokens=2_000, chars_per_token=4.0)
    assert estimate_tokens(fitted) <= 2_000
    answer = fitted[1]
    assert isinstance(answer, AssistantMessage)
    assert answer.text.startswith(HUGE[:100]) and answer.text.endswith(HUGE[-100:])
    assert "characters cut here to fit the summary request" in answer.text
    # the instructions (the last item) are never cut; what fits is left as it is
    assert fitted[-1] == items[-1] and fitted[0] == items[0]
    assert clip_to_fit(items[:1] + items[2:], 2_000, 4.0) == items[:1] + items[2:]


def lying(request: ModelRequest) -> ModelResponse:
    """The first answer is 850,000 characters with 10 output tokens reported; the rest short."""
    if is_summary_request(request):
        text = "summary: a huge answer was given"
    elif sum(isinstance(i, UserMessage) for i in request.input) == 1:
        text = HUGE
    else:
        text = "ok"
    chars = sum(len(getattr(i, "text", "")) for i in request.input)
    usage = Usage(input_tokens=chars // 4, output_tokens=10, total_tokens=chars // 4 + 10)
    return ModelResponse(items=(AssistantMessage(text=text),), usage=usage)


async def test_the_summary_request_after_a_huge_answer_fits_the_window(tmp_path: Path) -> None:
    model = ScriptedModel(brain=lying)
    settings = Settings(store=tmp_path, model="m", context_window=32_000, tools="none")
    with anyio.fail_after(30):
        async with Runtime(settings, gateway=model) as rt:
            session = await rt.create("s1")
            await session.send("say a lot")
            await session.send("and now?")
            compacted = session.state.compactions
    summaries = [r for r in model.requests if is_summary_request(r)]
    assert summaries, "the huge answer was not compacted"
    window, reserve = 32_000, 8_000
    for request in summaries:
        assert estimate_tokens(request.input) <= window - reserve
        assert request.max_output_tokens == reserve
    rounds = [r for r in model.requests if not is_summary_request(r)]
    assert estimate_tokens(rounds[-1].input) < window - reserve
    assert compacted >= 1
