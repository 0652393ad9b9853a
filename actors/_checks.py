"""The sampler's checks of a whole response before anything of it is written, and the records
they leave: usage that cannot be true (said once per session).

The decisions are pure (``_responses``); this helper writes what they decide through the
session's ``Journal``, so it knows neither the sampler nor anyone's private state. (Whether a
turn is in a compaction loop is the compactor's call, on committed rounds.)
"""

from __future__ import annotations

from stowage.core import ErrorRecord, ModelRequest, ModelResponse

from ._journal import SessionPart
from ._responses import VettedUsage, vet_usage

__all__ = ["ResponseChecks"]


class ResponseChecks(SessionPart):
    """Usage vetting of one session."""

    #: implausible usage is said once per live session, not once per round
    _usage_said = False

    async def usage(
        self, response: ModelResponse, request: ModelRequest, *, input_chars: int | None = None
    ) -> VettedUsage:
        """The usage to record for ``response`` (``input_chars``: the characters of
        ``request``'s input, when known); implausible usage is set aside, so the estimate
        stands, and said once per session (a log line and an ``error`` record)."""
        vetted = vet_usage(response, request, input_chars=input_chars)
        if vetted.reason is None or self._usage_said:
            return vetted
        self._usage_said = True
        self._log.warning("usage_implausible", reason=vetted.reason)
        note = f"{vetted.reason}; treated as missing, the estimate is used (said once per session)"
        seq = self.journal.state.last_seq + 1
        await self.journal.write([ErrorRecord(seq=seq, kind="usage_implausible", message=note)])
        return vetted
