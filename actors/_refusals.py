"""What a provider's refusal of a request as too long teaches a session.

A refusal is written as a boundary of its own (an ``error`` record, with a
``settings_changed`` record when it states a window the session did not know), so the
compaction machine hears it like any other event and counts it with the same guard and cap.
What it says holds from then on: the window it stated, when smaller than the one assumed,
guards every later request of the session (with the output reserve that window allows);
what fits and the chars per token of its own count hold for the rest of the turn.
"""

from __future__ import annotations

import structlog
from stowage.core import (
    ConfigError,
    ContextLengthExceeded,
    ErrorRecord,
    ModelRequest,
    Record,
    SettingsChanged,
    SettingsChangedRecord,
    item_chars,
)
from stowage.policy import Accounting, Refusal, ratio_from_stated

from ._context import SessionContext
from ._journal import Journal, SessionPart

__all__ = ["Refusals"]


class Refusals(SessionPart):
    """One session's refusals: the figures they taught, and the records that keep them."""

    __slots__ = ("_window_known", "fit", "ratio")

    def __init__(
        self, ctx: SessionContext, journal: Journal, log: structlog.typing.FilteringBoundLogger
    ) -> None:
        super().__init__(ctx, journal, log)
        #: after a refusal in this turn: what a request may carry, and the provider's ratio
        self.fit: int | None = None
        self.ratio: float | None = None
        # a window was learned from a refusal (written once a session run)
        self._window_known = False

    @property
    def accounting(self) -> Accounting:
        return self.journal.accounting

    def turn_started(self) -> None:
        """What a refusal said of what fits holds for its own turn."""
        self.fit = self.ratio = None

    async def refused(self, error: ContextLengthExceeded, request: ModelRequest) -> None:
        """The provider refused ``request`` as too long: write it as a boundary the machine hears
        and take the window it stated; the caller then asks ``before_request`` again, which waits
        for the machine's way out."""
        if not self.ctx.settings.auto_compact:
            raise error
        chars = sum(item_chars(item) for item in request.input)
        tool_tokens = self.accounting.tool_tokens
        stated = ratio_from_stated(chars, error.tokens, tool_tokens) if error.tokens else None
        seq = self.journal.state.last_seq + 1
        learned = self._learned_window(error, seq + 1)
        if error.limit is not None:
            self._take_window(error.limit)
        fit = self._fit(error)
        stated_count = f"{error.tokens} tokens" if error.tokens else "no count"
        window = f"a window of {error.limit}" if error.limit else "no window"
        ratio = f"give {stated:.3f} chars per token" if stated else "(no count to calibrate on)"
        limit = fit if fit is not None else "what compaction leaves"
        figures = (
            f"the provider stated {stated_count} and {window}; {chars} characters of input "
            f"{ratio};"
            f" a request may carry at most {limit} tokens of history from now on"
        )
        self._log.warning(
            "context_length_exceeded",
            error=str(error),
            stated_tokens=error.tokens,
            stated_limit=error.limit,
            fit=fit,
        )
        records: list[Record] = [
            ErrorRecord(seq=seq, kind="context_length_exceeded", message=f"{error}; {figures}")
        ]
        if learned is not None:
            records.append(learned)
            self._window_learned(learned)
        fits = [f for f in (self.fit, fit) if f is not None]
        self.fit = min(fits) if fits else None
        self.ratio = stated or self.ratio
        counted = None if error.tokens is None else max(1, error.tokens - self.accounting.schemas)
        refusal = Refusal(fit=fit, ratio=stated, window=error.limit, tokens=counted)
        await self.journal.write(records, boundary="refused", refusal=refusal)

    def _fit(self, error: ContextLengthExceeded) -> int | None:
        """Tokens of history a request may carry after the provider refused one."""
        acc = self.accounting
        hard = acc.marks.hard
        if error.limit is not None:
            reserve = acc.output_reserve or 0
            return max(1, int((error.limit - reserve - acc.schemas) * hard))
        if error.tokens is not None:
            return max(1, int((error.tokens - acc.schemas) * acc.marks.target))
        return None

    def _learned_window(
        self, error: ContextLengthExceeded, seq: int
    ) -> SettingsChangedRecord | None:
        """The window the provider stated, as a ``settings_changed`` record."""
        if error.limit is None or error.limit <= 0 or self._window_known:
            return None
        if self.accounting.budget is not None:
            return None
        self._window_known = True
        return SettingsChangedRecord(
            seq=seq, changes={"context_window": [None, error.limit]}, source="provider"
        )

    def _window_learned(self, record: SettingsChangedRecord) -> None:
        """Say so, guard every later request of this session with it, and tell the runtime."""
        window = record.changes["context_window"][1]
        self._log.warning(
            "context_window_learned",
            window=window,
            source="the provider's refusal",
            fix="set --context-window N, or context_window in the model's profile, to start "
            "with it",
        )
        self.ctx.publish(
            SettingsChanged(
                session_id=self.ctx.session_id, changes=record.changes, source=record.source
            )
        )
        if self.ctx.window_learned is not None:
            self.ctx.window_learned(window)

    def _take_window(self, window: int) -> None:
        """Guard this session's requests with ``window`` (``Accounting.with_window``)."""
        try:
            self.journal.accounting = self.accounting.with_window(window)
        except ConfigError as exc:  # a window that holds nothing: the refusal's fit guards
            self._log.warning("context_window_unusable", window=window, error=str(exc))
