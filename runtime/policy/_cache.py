"""The provider's prompt cache, pure: how much of a request a prefix cache serves, and figures.

Providers cache the longest unchanged prefix of a request, in whole blocks (OpenAI: 128
tokens past the first 1024), and bill the cached part at a fraction of the price. Every change
before the end of the previous request (a stub, a summary) is a *prefix break*: the next
request pays full price for everything after it.

``PrefixCache`` simulates such a cache (the fake server and the benchmarks use it);
``CacheFigures`` sums what providers reported per round (``Usage.cached_tokens``) into the
figures ``stowage show`` and ``stowage load`` print.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from stowage.core import ModelRequest, Record, RoundCommittedRecord, Settings, Usage, item_chars

__all__ = [
    "CACHE_BLOCK_TOKENS", "CacheFigures", "CacheHit", "PrefixCache", "cache_figures",
    "cache_key_for", "session_cache_figures",
]  # fmt: skip

#: tokens per cache block, as OpenAI counts them
CACHE_BLOCK_TOKENS = 128


def cache_key_for(settings: Settings, session_id: str) -> str | None:
    """The ``prompt_cache_key`` a session's requests carry: derived from ``session_id`` when
    the setting is "session" (a digest: the id itself is not sent), none when it is empty,
    else the setting as is. Raises nothing."""
    configured = settings.prompt_cache_key
    if not configured:
        return None
    if configured == "session":
        return "stowage-" + hashlib.sha256(session_id.encode()).hexdigest()[:24]
    return configured


@dataclass(frozen=True, slots=True)
class CacheHit:
    """One request through ``PrefixCache``: tokens it carried, tokens the cache served, tokens
    it shares with the previous request of its key, and whether it broke that one's prefix."""

    input_tokens: int
    cached_tokens: int
    prefix_tokens: int
    broke: bool


def _parts(request: ModelRequest, chars_per_token: float) -> list[tuple[str, float]]:
    """The request as a sequence of (fingerprint, tokens): the tool specs, then each item."""
    parts: list[tuple[str, float]] = []
    if request.tools:
        specs = json.dumps(
            [[t.name, t.description, t.parameters] for t in request.tools], sort_keys=True
        )
        parts.append(("tools:" + hashlib.sha1(specs.encode()).hexdigest(), len(specs) / 4))
    for item in request.input:
        digest = hashlib.sha1(repr(item).encode()).hexdigest()
        parts.append((digest, item_chars(item) / chars_per_token))
    return parts


@dataclass(kw_only=True)
class PrefixCache:
    """A provider's prefix cache: per key, the requests it saw last (``depth`` of them).

    A request is served from the longest common prefix (whole tool specs and items) with any
    of its key's remembered requests, rounded down to whole ``block`` tokens and served only
    from ``minimum`` tokens on. Tokens are estimated at ``chars_per_token``, as the project's
    own estimator does. Per key it counts requests, input, cached tokens and prefix breaks
    (a request that changed something before the end of the previous request of its key and
    purpose; summary requests are not counted: each one reads a new transcript). Raises
    nothing.
    """

    block: int = CACHE_BLOCK_TOKENS
    minimum: int = 0
    depth: int = 4
    chars_per_token: float = 4.0
    _seen: dict[str, list[list[tuple[str, float]]]] = field(default_factory=dict)
    _last: dict[tuple[str, str], list[tuple[str, float]]] = field(default_factory=dict)
    figures: OrderedDict[str, dict[str, int]] = field(default_factory=OrderedDict)

    @staticmethod
    def key_for(request: ModelRequest, cache_key: str | None = None) -> str:
        """``cache_key`` when given, else the request's own, else a digest of the first two
        items (system and first user message: one session's requests share them)."""
        if cache_key or request.cache_key:
            return cache_key or request.cache_key or ""
        head = repr(request.input[:2]).encode()
        return "prefix:" + hashlib.sha1(head).hexdigest()[:16]

    def serve(
        self,
        request: ModelRequest,
        *,
        cache_key: str | None = None,
        input_tokens: int | None = None,
    ) -> CacheHit:
        """Serve ``request``: the tokens cached (at most ``input_tokens``, the count the
        provider reports, when given) and whether it broke the prefix; remembers it."""
        key = self.key_for(request, cache_key)
        parts = _parts(request, self.chars_per_token)
        total = input_tokens if input_tokens is not None else round(sum(t for _, t in parts))
        best = 0.0
        for seen in self._seen.get(key, []):
            best = max(best, _common(seen, parts))
        cached = int(best) // self.block * self.block
        if cached < self.minimum:
            cached = 0
        cached = max(0, min(cached, total))
        previous = self._last.get((key, request.purpose))
        broke = False
        prefix = 0.0
        if previous is not None and request.purpose == "round":
            prefix = _common(previous, parts)
            broke = _common_count(previous, parts) < len(previous)
        self._last[(key, request.purpose)] = parts
        remembered = self._seen.setdefault(key, [])
        remembered.insert(0, parts)
        del remembered[self.depth :]
        counts = self.figures.setdefault(
            key, {"requests": 0, "input_tokens": 0, "cached_tokens": 0, "prefix_breaks": 0}
        )
        counts["requests"] += 1
        counts["input_tokens"] += total
        counts["cached_tokens"] += cached
        counts["prefix_breaks"] += broke
        return CacheHit(
            input_tokens=total, cached_tokens=cached, prefix_tokens=int(prefix), broke=broke
        )


def _common_count(a: Sequence[tuple[str, float]], b: Sequence[tuple[str, float]]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x[0] != y[0]:
            break
        n += 1
    return n


def _common(a: Sequence[tuple[str, float]], b: Sequence[tuple[str, float]]) -> float:
    return sum(t for _, t in a[: _common_count(a, b)])


@dataclass(frozen=True, slots=True, kw_only=True)
class CacheFigures:
    """What the provider's prompt cache did over a session's round requests.

    ``reuse`` is the share of input tokens served from the cache; a *break* is a request
    whose cached prefix stopped short of the whole previous request (in whole blocks);
    ``uncached_tokens`` (input not served from the cache) is the cost proxy.
    """

    requests: int = 0
    input_tokens: int = 0
    cached_tokens: int = 0
    breaks: int = 0
    reported: bool = False

    @property
    def uncached_tokens(self) -> int:
        return self.input_tokens - self.cached_tokens

    @property
    def reuse(self) -> float:
        return self.cached_tokens / self.input_tokens if self.input_tokens else 0.0

    def line(self) -> str:
        """One line for people: ``prompt cache: 81% reused, 3 breaks, 12034 uncached ...``."""
        if not self.requests:
            return "prompt cache: no requests with usage"
        if not self.reported:
            return (
                f"prompt cache: the provider reported no cached tokens "
                f"({self.input_tokens} input tokens over {self.requests} requests)"
            )
        return (
            f"prompt cache: {self.reuse:.0%} of {self.input_tokens} input tokens cached, "
            f"{self.uncached_tokens} uncached, {self.breaks} prefix breaks over "
            f"{self.requests} requests"
        )

    def __add__(self, other: CacheFigures) -> CacheFigures:
        return CacheFigures(
            requests=self.requests + other.requests,
            input_tokens=self.input_tokens + other.input_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
            breaks=self.breaks + other.breaks,
            reported=self.reported or other.reported,
        )


def cache_figures(
    usages: Iterable[Usage | None], *, block: int = CACHE_BLOCK_TOKENS
) -> CacheFigures:
    """Figures over consecutive round usages (None: not reported, skipped). A request breaks
    the prefix when its cached tokens fall short of the previous request's input rounded down
    to whole ``block`` tokens (a provider that reports no cached tokens at all counts none).
    Raises nothing."""
    requests = input_tokens = cached = breaks = 0
    reported = False
    previous: int | None = None
    for usage in usages:
        if usage is None:
            continue
        requests += 1
        input_tokens += usage.input_tokens
        cached += usage.cached_tokens
        reported = reported or usage.cached_tokens > 0
        if previous is not None and usage.cached_tokens < previous // block * block:
            breaks += 1
        previous = usage.input_tokens
    return CacheFigures(
        requests=requests,
        input_tokens=input_tokens,
        cached_tokens=cached,
        breaks=breaks if reported else 0,
        reported=reported,
    )


def session_cache_figures(
    records: Iterable[Record], *, block: int = CACHE_BLOCK_TOKENS
) -> CacheFigures:
    """``cache_figures`` over a session's ``round_committed`` records. Raises nothing."""
    return cache_figures(
        (r.usage for r in records if isinstance(r, RoundCommittedRecord)), block=block
    )
