"""The endpoint fault matrix: every way a provider or a proxy fails, on both wire APIs,
streamed and not, through the real Runtime and the real openai client.

Each fault ends one of three ways, and nothing of a failed response is ever written:
- retried, then the turn succeeds with exactly the records a clean turn has;
- the turn fails with the right error class, naming the endpoint (credentials redacted) and
  the HTTP status, with only the user's input and the turn's start logged, and the session
  goes on;
- the response is used, and what cannot run gets an error output naming the cause.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from stowage import (
    FunctionCall,
    FunctionCallOutput,
    IncompleteResponse,
    ModelAuthError,
    ModelConnectionError,
    ModelError,
    ModelResponseError,
    RoundCommitted,
    TurnResult,
)
from stowage.core import ItemRecord, ModelRetrying, Record, RoundCommittedRecord
from stowage.testing import Fault

Wire = tuple[str, bool]


def shape(records: list[Record]) -> list[str]:
    """The kinds of ``records``, items by their type: what a turn wrote, ids aside."""
    return [
        type(r.item).__name__ if isinstance(r, ItemRecord) else type(r).__name__ for r in records
    ]


@dataclass(frozen=True)
class Retried:
    """A fault the turn rides out: it is retried (at least ``wait`` seconds later)."""

    fault: Fault
    wait: float = 0.0


RETRIED = {
    "no_finish": Retried(Fault.answer("no_finish")),
    "empty_choices": Retried(Fault.answer("empty_choices")),
    "cut_stream": Retried(Fault.answer("cut_stream")),
    "invalid_json": Retried(Fault.garbage()),
    "keepalives_only": Retried(Fault.keepalive()),
    "dripping": Retried(Fault.drip(0.4)),
    "500_once": Retried(Fault.server_error(500)),
    "429_without_retry_after": Retried(Fault.rate_limit(None)),
    "429_retry_after": Retried(Fault.rate_limit(0.3), wait=0.3),
    "429_llm_provider_retry_after": Retried(
        Fault.rate_limit(None, headers={"llm_provider-retry-after": "0.3"}), wait=0.3
    ),
    "429_ratelimit_reset_requests": Retried(
        Fault.rate_limit(
            None,
            headers={"x-ratelimit-reset-requests": "300ms", "x-ratelimit-remaining-requests": "0"},
        ),
        wait=0.3,
    ),
    # six minutes asked for, max_retry_wait (0.5 s here) taken
    "429_ratelimit_reset_tokens_capped": Retried(
        Fault.rate_limit(0.1, headers={"x-ratelimit-reset-tokens": "6m0s"}), wait=0.5
    ),
}


@pytest.mark.parametrize("case", sorted(RETRIED))
async def test_a_transient_fault_is_retried_and_the_turn_writes_what_a_clean_one_does(
    tmp_path: Path, wire: Wire, fault_run: Any, case: str
) -> None:
    retried = RETRIED[case]
    with anyio.fail_after(20):
        async with fault_run(tmp_path, *wire) as run:
            clean = await run.turn()
            assert isinstance(clean, TurnResult), clean
            mark = run.last_seq
            run.server.inject(retried.fault, when="round")
            sent = len(run.server.requests)
            started = anyio.current_time()
            result = await run.turn()
            took = anyio.current_time() - started
            assert isinstance(result, TurnResult), result
            assert result.text == clean.text
            # the faulted request, its retry, and the answer round
            assert len(run.server.requests) - sent == 3
            first_turn = [r for r in run.written if 1 < r.seq <= mark]
            assert shape(run.since(mark)) == shape(first_turn)
            assert took >= retried.wait
            assert took < retried.wait + 6  # bounded: never the minutes a server may ask for
            # the wait was announced before it began (the command line's status line shows it)
            (waiting,) = [e for e in run.events if isinstance(e, ModelRetrying)]
            assert waiting.purpose == "round" and waiting.delay >= retried.wait
            assert waiting.rate_limited == (retried.fault.status == 429)


@dataclass(frozen=True)
class Fails:
    """A fault that fails the turn with ``error`` after ``attempts`` requests; ``status`` is
    what the message says of the HTTP status (streamed, whole)."""

    fault: Fault
    error: type[ModelError]
    status: tuple[str, str]
    attempts: int


FAILS = {
    "401": Fails(Fault.auth(), ModelAuthError, ("HTTP 401", "HTTP 401"), 1),
    "404": Fails(Fault.not_found(), ModelResponseError, ("HTTP 404", "HTTP 404"), 1),
    "500_forever": Fails(
        Fault.server_error(500), ModelConnectionError, ("HTTP 500", "HTTP 500"), 2
    ),
    "keepalives_forever": Fails(
        Fault.keepalive(), ModelConnectionError, ("HTTP 200", "no HTTP status"), 2
    ),
    "no_finish_forever": Fails(
        Fault.answer("no_finish"), IncompleteResponse, ("HTTP 200", "HTTP 200"), 2
    ),
}


@pytest.mark.parametrize("case", sorted(FAILS))
async def test_a_fault_that_persists_fails_the_turn_naming_the_endpoint_and_nothing_is_written(
    tmp_path: Path, wire: Wire, fault_run: Any, secret: str, case: str
) -> None:
    fails = FAILS[case]
    stream = wire[1]
    with anyio.fail_after(20):
        async with fault_run(tmp_path, *wire) as run:
            mark = run.last_seq
            run.server.inject(fails.fault, when="any", times=1000)
            started = anyio.current_time()
            error = await run.turn()
            assert anyio.current_time() - started < 8  # bounded, whatever the endpoint does
            assert type(error) is fails.error, error
            message = str(error)
            assert f"POST http://REDACTED@127.0.0.1:{run.server.port}/v1/" in message
            assert fails.status[0 if stream else 1] in message
            assert secret not in message
            assert len(run.server.requests) == fails.attempts
            # only the user's words and the turn's start: nothing of any response
            assert shape(run.since(mark)) == ["UserMessage", "TurnRecord"]
            run.server.clear_faults()
            assert isinstance(await run.turn(), TurnResult)  # the session goes on


def outputs_of(run_written: list[Record]) -> list[FunctionCallOutput]:
    return [
        r.item
        for r in run_written
        if isinstance(r, ItemRecord) and isinstance(r.item, FunctionCallOutput)
    ]


ANSWERED_WITH_AN_ERROR_OUTPUT = {
    "truncated_call": (Fault.answer("truncated"), "cut off by the output limit"),
    "arguments_not_json": (Fault.answer("bad_arguments"), "not valid JSON"),
    "unknown_tool": (Fault.answer("unknown_tool"), "unknown tool 'no_such_tool'"),
}


@pytest.mark.parametrize("case", sorted(ANSWERED_WITH_AN_ERROR_OUTPUT))
async def test_a_call_that_cannot_run_gets_an_error_output_naming_the_cause(
    tmp_path: Path, wire: Wire, fault_run: Any, case: str
) -> None:
    fault, cause = ANSWERED_WITH_AN_ERROR_OUTPUT[case]
    with anyio.fail_after(20):
        async with fault_run(tmp_path, *wire) as run:
            mark = run.last_seq
            run.server.inject(fault, when="round")
            result = await run.turn()
            assert isinstance(result, TurnResult), result
            first = outputs_of(run.since(mark))[0]
            assert first.is_error and cause in first.output
            committed = [r for r in run.since(mark) if isinstance(r, RoundCommittedRecord)]
            truncated = case == "truncated_call"
            assert committed[0].truncated is truncated
            rounds = [e for e in run.events if isinstance(e, RoundCommitted)]
            assert rounds[-2].truncated is truncated and not rounds[-1].truncated
            assert len(run.server.requests) == 2  # nothing retried: the answer was whole


def inject_after_the_call_round(run: Any, fault: Fault) -> None:
    """Inject ``fault`` for the request after the next round with calls commits."""
    armed = [True]

    def arm(event: object) -> None:
        if armed[0] and isinstance(event, RoundCommitted) and event.calls:
            armed[0] = False
            run.server.inject(fault, when="round")

    run.runtime.subscribe(arm)


async def test_an_answer_cut_off_by_the_output_limit_is_recorded_and_shown_as_truncated(
    tmp_path: Path, wire: Wire, fault_run: Any
) -> None:
    with anyio.fail_after(20):
        async with fault_run(tmp_path, *wire) as run:
            clean = await run.turn()
            assert isinstance(clean, TurnResult) and clean.stopped == "answered"
            mark = run.last_seq
            inject_after_the_call_round(run, Fault.answer("truncated"))
            result = await run.turn()
            assert isinstance(result, TurnResult), result
            assert result.stopped == "truncated"
            assert result.text and clean.text.startswith(result.text) and result.text != clean.text
            committed = [r for r in run.since(mark) if isinstance(r, RoundCommittedRecord)]
            assert [r.truncated for r in committed] == [False, True]
            assert [e.truncated for e in run.events if isinstance(e, RoundCommitted)][-1]


async def test_duplicate_call_ids_in_one_response_are_made_unique(
    tmp_path: Path, wire: Wire, fault_run: Any
) -> None:
    with anyio.fail_after(20):
        async with fault_run(tmp_path, *wire) as run:
            mark = run.last_seq
            run.server.inject(Fault.answer("duplicate_ids"), when="round")
            result = await run.turn()
            assert isinstance(result, TurnResult), result
            written = run.since(mark)
            calls = [
                r.item
                for r in written
                if isinstance(r, ItemRecord) and isinstance(r.item, FunctionCall)
            ]
            assert len(calls) == 2 and len({c.call_id for c in calls}) == 2
            assert {o.call_id for o in outputs_of(written)} == {c.call_id for c in calls}
            assert not any(o.is_error for o in outputs_of(written))
            # every request the endpoint saw carried each call with its own output
            assert run.server.stats["orphan_requests"] == 0
