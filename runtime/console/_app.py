"""The console as a Starlette app: two pages, their live fragments and a server-sent events feed.

Read-only by construction: the app holds a store it only ever calls ``list_sessions``,
``read(..., repair=False)`` and ``read_tail(..., repair=False)`` on. Every piece of model or tool
text, and anything a URL brings, goes through Jinja2 with autoescape on, so a tool output
holding ``<script>`` is shown as text; errors are answered as ``text/plain``; and every response
carries a Content-Security-Policy that runs no inline script (``SecurityHeaders``). Live updates: the
page opens ``/events``; the server compares the store's fingerprint every ``poll`` seconds and
sends ``change`` when it moved; the page then fetches its fragment.

A long session's page shows its newest rounds and compactions; older ones come a page at a
time (``_pages``), from a view kept while the store does not change (``ViewCache``).

A view is kept with the store's fingerprint and the lease holder it was made at; any append
anywhere in the store moves the fingerprint, and the next request makes the view again.

The pages show what models and tools wrote; the templates escape it, and the policy below is
the second wall: a script runs only from ``/static``, never inline, nothing is fetched from
another origin, no other site frames the console. A dozen lines of ASGI rather than a
dependency: the headers are fixed strings.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import AsyncIterator, Hashable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import anyio
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from stowage.core import StowageError, TornTail, validate_session_id
from stowage.policy import PriceBook, money

from ._chart import chart_geometry
from ._pages import page_query
from ._source import StoreReader
from ._views import SessionRow, SessionView, paged, session_row, session_view

__all__ = [
    "CONTENT_SECURITY_POLICY",
    "LOOPBACK_HOSTS",
    "SecurityHeaders",
    "ViewCache",
    "create_app",
]

#: the Host headers a console on a loopback address answers
LOOPBACK_HOSTS = ("127.0.0.1", "localhost")

_HERE = Path(__file__).resolve().parent
_SORTS = {
    "activity": (lambda r: r.last_activity, True),
    "id": (lambda r: r.session_id, False),
    "tokens": (lambda r: r.percent or 0.0, True),
    "compactions": (lambda r: r.compactions, True),
    "turns": (lambda r: r.turns, True),
}


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(_HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
    )
    env.filters["pct"] = lambda v: "-" if v is None else f"{100 * v:.0f}%"
    env.filters["num"] = lambda v: "-" if v is None else f"{v:,}"
    env.filters["ago"] = ago
    env.filters["usd"] = money
    return env


def ago(ts: str, now: datetime | None = None) -> str:
    """``ts`` (a record's ISO-8601 time) as people say it: "just now", "3 min ago", "2 h
    ago", "5 d ago"; the string itself when it is not a time."""
    try:
        then = datetime.fromisoformat(ts)
    except ValueError:
        return ts
    if then.tzinfo is None:
        then = then.replace(tzinfo=UTC)
    seconds = ((now or datetime.now(UTC)) - then).total_seconds()
    if seconds < 45:
        return "just now"
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= size:
            return f"{int(seconds // size)} {unit} ago"
    return "just now"


def create_app(
    reader: StoreReader,
    *,
    store_label: str,
    poll: float = 0.25,
    allowed_hosts: Sequence[str] = LOOPBACK_HOSTS,
    prices: PriceBook | None = None,
) -> Starlette:
    """The console app over ``reader``; ``store_label`` is shown in the header (no secrets:
    pass a redacted URL); ``prices``: a session page shows what it cost (none without). ``poll`` is how often, in seconds, the live feed looks for changes.
    ``allowed_hosts`` are the ``Host`` headers answered (``"*"``: any); the loopback names by
    default, so a web page elsewhere cannot read the console through DNS rebinding."""
    env = _environment()

    def render(name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
        body = env.get_template(name).render(store=store_label, **context)
        return HTMLResponse(body, status_code=status_code)

    async def rows(request: Request) -> tuple[list[SessionRow], str, str]:
        found: list[SessionRow] = []
        for session_id in await reader.sessions():
            read = await reader.read(session_id)
            found.append(
                session_row(session_id, read.records, holder=await reader.holder(session_id))
            )
        query = request.query_params.get("q", "").strip()
        state = request.query_params.get("state", "")
        if query:
            found = [
                r
                for r in found
                if query.lower() in r.session_id.lower() or query.lower() in r.model.lower()
            ]
        if state:
            found = [r for r in found if r.state == state]
        sort = request.query_params.get("sort", "activity")
        key, reverse = _SORTS.get(sort, _SORTS["activity"])
        found.sort(key=key, reverse=reverse)
        return found, query, sort

    async def sessions_page(request: Request) -> Response:
        found, query, sort = await rows(request)
        template = "_sessions_table.html" if "fragment" in request.query_params else "sessions.html"
        return render(
            template, rows=found, q=query, sort=sort, state=request.query_params.get("state", "")
        )

    # one look at the store per ``poll`` for every open page, not one each
    latest: list[Any] = [None, -1.0]
    looking = anyio.Lock()

    async def fingerprint() -> Hashable:
        async with looking:
            if anyio.current_time() - latest[1] >= poll:
                latest[0] = await reader.fingerprint()
                latest[1] = anyio.current_time()
            return cast(Hashable, latest[0])

    views = ViewCache()

    async def session_page(request: Request) -> Response:
        try:
            session_id = validate_session_id(request.path_params["session_id"])
            query = page_query(request.query_params)
        except (StowageError, ValueError) as exc:
            return PlainTextResponse(f"bad request: {exc}", status_code=400)
        try:
            if session_id not in await reader.sessions():
                return render("missing.html", status_code=404, session_id=session_id)
            made_at = (await fingerprint(), await reader.holder(session_id))
            kept = views.get(session_id, made_at)
            if kept is None:
                # the lineage: the view leaves a rewind's discarded branch out, the cost not
                lineage = await reader.lineage(session_id)
                view = session_view(
                    session_id,
                    lineage.records,
                    holder=made_at[1],
                    query=query,
                    prices=prices,
                    own_from=lineage.own_from,
                )
                torn = lineage.read.torn_tail
                views.put(session_id, made_at, view, torn)
            else:
                view, torn = paged(kept[0], query), kept[1]
        except StowageError as exc:
            return PlainTextResponse(f"cannot read session {session_id}: {exc}", status_code=500)
        context: dict[str, Any] = {"view": view, "torn": torn, "session_id": session_id}
        if query.part is not None:
            return render(f"_older_{query.part}.html", **context)
        chart = chart_geometry(
            view.chart, view.cards, view.marks, view.row.usable, view.milestones, view.stops
        )
        template = "_session_body.html" if "fragment" in request.query_params else "session.html"
        return render(template, chart=chart, **context)

    async def events(request: Request) -> Response:
        async def feed() -> AsyncIterator[str]:
            last = await fingerprint()
            yield "retry: 1000\n\n"
            while not await request.is_disconnected():
                await anyio.sleep(poll)
                current = await fingerprint()
                if current != last:
                    last = current
                    yield f"event: change\ndata: {json.dumps({'changed': True})}\n\n"

        return StreamingResponse(
            feed(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    return Starlette(
        middleware=[
            Middleware(SecurityHeaders),
            Middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts)),
        ],
        routes=[
            Route("/", sessions_page),
            Route("/s/{session_id}", session_page),
            Route("/events", events),
            Mount("/static", StaticFiles(directory=_HERE / "static"), name="static"),
        ],
    )


@dataclass(eq=False)
class ViewCache:
    """Up to ``size`` views, the least recently used dropped first."""

    size: int = 4
    _views: OrderedDict[str, tuple[Hashable, SessionView, TornTail | None]] = field(
        default_factory=OrderedDict
    )

    def get(self, session_id: str, made_at: Hashable) -> tuple[SessionView, TornTail | None] | None:
        """The view of ``session_id`` made at ``made_at`` and its log's torn tail, if kept."""
        kept = self._views.get(session_id)
        if kept is None or kept[0] != made_at:
            return None
        self._views.move_to_end(session_id)
        return kept[1], kept[2]

    def put(
        self, session_id: str, made_at: Hashable, view: SessionView, torn: TornTail | None
    ) -> None:
        """Keep ``view`` (made at ``made_at``), dropping the least recently used past ``size``."""
        self._views[session_id] = (made_at, view, torn)
        self._views.move_to_end(session_id)
        while len(self._views) > self.size:
            self._views.popitem(last=False)


CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self'",
        "connect-src 'self'",
        "form-action 'self'",
        "base-uri 'none'",
        "frame-ancestors 'none'",
    )
)

_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}


class SecurityHeaders:
    """ASGI middleware: ``_HEADERS`` on every HTTP response ``app`` sends."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in _HEADERS.items():
                    headers[name] = value
            await send(message)

        await self.app(scope, receive, send_with_headers)
