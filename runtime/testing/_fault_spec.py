"""What the fake server can be told to do wrong: ``Fault``, one injected failure, built in process
(its class methods), from the JSON of ``POST /_fake/faults`` (``from_json``) or from a name of the
load engine's fault spec (``random_fault``); and the error body an error fault answers with, as
OpenAI (or LiteLLM in front of it) writes it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from ._fake_faults import MUTATIONS, WIRE_FAULTS

__all__ = ["Fault", "FaultKind", "FaultWhen", "error_body", "random_fault"]

FaultWhen: TypeAlias = Literal["round", "summary", "any"]
FaultKind: TypeAlias = Literal[
    "rate_limit",
    "server_error",
    "context_length",
    "litellm_context",
    "auth",
    "not_found",
    "delay",
    "garbage",
    "keepalive",
    "drip",
    "zero_usage",
    "invented_usage",
    "truncated",
    "bad_arguments",
    "duplicate_ids",
    "unknown_tool",
    "no_finish",
    "empty_choices",
    "cut_stream",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Fault:
    """One injected failure; build it with the class methods."""

    kind: FaultKind
    status: int = 200
    retry_after: float | None = None
    delay: float = 0.0
    #: extra response headers (a proxy's ``llm_provider-retry-after``, ``x-ratelimit-*``)
    headers: tuple[tuple[str, str], ...] = ()
    #: the input tokens and the window a context error states (None: not stated)
    tokens: int | None = None
    limit: int | None = None
    #: seconds between the pieces of a keep-alive or dripping answer
    interval: float = 0.05

    @classmethod
    def rate_limit(
        cls, retry_after: float | None = 1.0, *, headers: Mapping[str, str] | None = None
    ) -> Fault:
        """A 429 with a ``Retry-After`` header of ``retry_after`` seconds (None: without one)
        and ``headers`` (``llm_provider-retry-after``, ``x-ratelimit-reset-requests``, ...)."""
        extra = tuple((headers or {}).items())
        return cls(kind="rate_limit", status=429, retry_after=retry_after, headers=extra)

    @classmethod
    def server_error(cls, status: int = 500) -> Fault:
        """A 5xx answer (500 or 503, say)."""
        return cls(kind="server_error", status=status)

    @classmethod
    def context_length(cls, tokens: int | None = 9000, limit: int | None = 8192) -> Fault:
        """A 400 with OpenAI's ``context_length_exceeded`` error body, stating ``limit`` as
        the window and ``tokens`` as what the messages came to (either left out when None)."""
        return cls(kind="context_length", status=400, tokens=tokens, limit=limit)

    @classmethod
    def litellm_context(cls, tokens: int = 7180, limit: int | None = None) -> Fault:
        """A 400 as LiteLLM wraps a context overflow: ``code: "400"``, ``param: null``, a
        ``ContextWindowExceededError`` message ending with the count (and ``limit`` if set)."""
        return cls(kind="litellm_context", status=400, tokens=tokens, limit=limit)

    @classmethod
    def auth(cls) -> Fault:
        """A 401 invalid API key."""
        return cls(kind="auth", status=401)

    @classmethod
    def not_found(cls) -> Fault:
        """A 404: the model does not exist (or the URL is wrong)."""
        return cls(kind="not_found", status=404)

    @classmethod
    def slow(cls, delay: float) -> Fault:
        """A normal answer after ``delay`` seconds."""
        return cls(kind="delay", delay=delay)

    @classmethod
    def garbage(cls) -> Fault:
        """A 200 whose body is not JSON (nor valid SSE data)."""
        return cls(kind="garbage")

    @classmethod
    def keepalive(cls, interval: float = 0.05) -> Fault:
        """A 200 that never answers: SSE comments (whitespace, unstreamed) every
        ``interval`` seconds until the client gives up."""
        return cls(kind="keepalive", interval=interval)

    @classmethod
    def drip(cls, interval: float = 0.2) -> Fault:
        """A normal answer sent one event (or, unstreamed, a few bytes) every ``interval``."""
        return cls(kind="drip", interval=interval)

    @classmethod
    def answer(cls, kind: str) -> Fault:
        """A 200 whose answer has the fault ``kind``: ``zero_usage``, ``invented_usage``,
        ``truncated`` (the output limit cut the last call's arguments or the text:
        ``finish_reason: "length"``), ``bad_arguments`` (not JSON), ``duplicate_ids``,
        ``unknown_tool``, ``no_finish``, ``empty_choices``, ``cut_stream`` (the stream, or
        the body, ends half way). Raises ``ValueError`` on another kind."""
        if kind not in MUTATIONS | WIRE_FAULTS:
            raise ValueError(f"unknown answer fault {kind!r}")
        return cls(kind=kind)  # type: ignore[arg-type]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Fault:
        """A fault from ``{"fault": kind, ...}``; raises ``ValueError`` on an unknown kind."""
        kind = data.get("fault")
        if kind == "rate_limit":
            after = data.get("retry_after", 1.0)
            return cls.rate_limit(
                None if after is None else float(after), headers=data.get("headers")
            )
        if kind == "server_error":
            return cls.server_error(int(data.get("status", 500)))
        if kind == "delay":
            return cls.slow(float(data.get("delay", 1.0)))
        if kind in ("keepalive", "drip"):
            builder = cls.keepalive if kind == "keepalive" else cls.drip
            return builder(float(data.get("interval", 0.05)))
        if kind in MUTATIONS | WIRE_FAULTS:
            return cls.answer(str(kind))
        builders: dict[Any, Callable[[], Fault]] = {
            "context_length": cls.context_length,
            "litellm_context": cls.litellm_context,
            "auth": cls.auth,
            "not_found": cls.not_found,
            "garbage": cls.garbage,
        }
        if kind not in builders:
            raise ValueError(f"unknown fault {kind!r}")
        return builders[kind]()


def random_fault(name: str, *, slow_delay: float, retry_after: float) -> Fault:
    """The fault a name of the load engine's spec stands for: ``429``, ``slow`` or a status."""
    if name == "429":
        return Fault.rate_limit(retry_after)
    if name == "slow":
        return Fault.slow(slow_delay)
    return Fault.server_error(int(name))


_ERRORS: dict[FaultKind, tuple[str, str, str | None]] = {
    "rate_limit": ("Rate limit reached for requests", "requests", "rate_limit_exceeded"),
    "server_error": (
        "The server had an error while processing your request.",
        "server_error",
        None,
    ),
    "auth": ("Incorrect API key provided.", "invalid_request_error", "invalid_api_key"),
    "not_found": (
        "The model does not exist or you do not have access to it.",
        "invalid_request_error",
        "model_not_found",
    ),
}


def error_body(fault: Fault) -> dict[str, Any]:
    """The JSON error body of an error fault, as OpenAI (or LiteLLM) writes it."""
    if fault.kind == "context_length":
        window = (
            f"This model's maximum context length is {fault.limit} tokens. " if fault.limit else ""
        )
        counted = (
            f"However, your messages resulted in {fault.tokens} tokens. " if fault.tokens else ""
        )
        message = f"{window}{counted}Please reduce the length of the messages."
        return {
            "message": message,
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    if fault.kind == "litellm_context":
        window = f"maximum context length is {fault.limit} tokens; " if fault.limit else ""
        message = (
            "litellm.ContextWindowExceededError: litellm.BadRequestError: "
            "ContextWindowExceededError: OpenAIException - Input too long for this model: "
            f"{window}prompt is {fault.tokens} tokens"
        )
        return {"message": message, "type": None, "param": None, "code": "400"}
    message, kind, code = _ERRORS[fault.kind]
    return {"message": message, "type": kind, "param": None, "code": code}
