"""The sampler's checks of a whole response before anything of it is written, and the records
they leave: usage that cannot be true (said once per session), and the loop guard.

The decisions are pure (``_responses``, ``_loop_guard``); this helper writes what they decide
through the session's ``Journal`` and reads the budget figures from ``Pressure``'s public
members, so it knows neither the sampler nor anyone's private state.
"""

from __future__ import annotations

from collections.abc import Iterable

import structlog
from stowage.core import (
    CompactionLoop,
    ErrorRecord,
    FunctionCall,
    FunctionCallOutput,
    ModelRequest,
    ModelResponse,
)

from ._context import SessionContext
from ._journal import Journal
from ._loop_guard import LoopGuard, loop_message
from ._pressure import Pressure
from ._responses import VettedUsage, vet_usage

__all__ = ["ResponseChecks"]

_log = structlog.get_logger("stowage.sampler")


class ResponseChecks:
    """Usage vetting and the loop guard of one session."""

    def __init__(
        self,
        ctx: SessionContext,
        journal: Journal,
        pressure: Pressure,
        log: structlog.typing.FilteringBoundLogger | None = None,
    ) -> None:
        self.journal = journal
        self.pressure = pressure
        self.guard = LoopGuard(limit=ctx.settings.compaction_loop_repeats)
        # implausible usage is said once per live session, not once per round
        self._usage_said = False
        # the sampler's own logger when it builds this (one bound logger per live session)
        self._log = log if log is not None else _log.bind(session=ctx.session_id, actor="sampler")

    def turn_started(self) -> None:
        """A new turn: the guard forgets the last one's calls."""
        self.guard.turn_started()

    def written(self, calls: Iterable[FunctionCall], outputs: Iterable[FunctionCallOutput]) -> None:
        """A round's calls and outputs are durable."""
        self.guard.written(calls, outputs)

    async def stop_a_loop(self, turn: int, response: ModelResponse) -> None:
        """Stop the turn, before anything of ``response`` is written, when it re-issues once
        too often a call whose output this turn's compactions absorbed.

        Raises ``CompactionLoop`` (after an ``error`` record with the same message).
        """
        reissue = self.guard.check(response.calls, self.journal.state)
        if reissue is None:
            return
        budget = self.pressure.budget
        message = loop_message(
            reissue,
            turn=turn,
            compactions=self.pressure.turn_compactions,
            context_window=budget.context_window if budget else None,
            usable=budget.usable if budget else None,
            tool_tokens=self.pressure.tool_tokens,
            chars_per_token=self.pressure.ratio(),
        )
        self._log.error(
            "compaction_loop",
            turn=turn,
            call=reissue.name,
            repeats=reissue.repeats,
            output_chars=reissue.output_chars,
        )
        seq = self.journal.state.last_seq + 1
        await self.journal.write([ErrorRecord(seq=seq, kind="compaction_loop", message=message)])
        raise CompactionLoop(message)

    async def usage(self, response: ModelResponse, request: ModelRequest) -> VettedUsage:
        """The usage to record for ``response``; implausible usage is set aside, so the
        estimate stands, and said once per session (a log line and an ``error`` record)."""
        vetted = vet_usage(response, request)
        if vetted.reason is None or self._usage_said:
            return vetted
        self._usage_said = True
        self._log.warning("usage_implausible", reason=vetted.reason)
        note = f"{vetted.reason}; treated as missing, the estimate is used (said once per session)"
        seq = self.journal.state.last_seq + 1
        await self.journal.write([ErrorRecord(seq=seq, kind="usage_implausible", message=note)])
        return vetted
