"""What comes from a URL, a session or a tool comes back as text: every response carries the
Content-Security-Policy, errors are plain text, and no page holds markup it did not write
itself (no inline script or style, no event attribute, no link off the console)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from html.parser import HTMLParser
from pathlib import Path

import httpx
import pytest
from stowage.console import StoreReader, create_app
from stowage.console._app import CONTENT_SECURITY_POLICY
from stowage.storage import JsonlStore

from .conftest import PAYLOAD, PAYLOADS, payload_records

pytestmark = pytest.mark.timeout(60)

#: paths and queries as an attacker would send them (httpx sends them percent-encoded)
HOSTILE_URLS = (
    "/s/<img src=x onerror=alert(1)>",
    "/s/%3Cscript%3Ewindow.__xss%3D1%3C%2Fscript%3E",
    '/s/"><svg onload=alert(1)>',
    "/s/payloads?before=<script>alert(1)</script>",
    "/s/payloads?cards_from=%22%3E%3Cimg%20src%3Dx%20onerror%3Dalert(1)%3E",
    "/s/payloads?part=<script>",
    "/?q=<script>window.__xss=1</script>",
    '/?q="><img src=x onerror=alert(1)>&sort=<svg onload=alert(1)>&state="><script>',
    "/<script>alert(1)</script>",
    "/static/<img src=x onerror=alert(1)>",
)
PAGES = (
    "/",
    "/?fragment=1",
    "/s/payloads",
    "/s/payloads?fragment=1",
    "/s/payloads?part=timeline&before=30",
    "/s/payloads?part=cards&cards_before=99",
    "/s/nope",
)


@pytest.fixture
async def transport(tmp_path: Path) -> AsyncIterator[httpx.ASGITransport]:
    """The console over a store holding the payload session (its label a payload too)."""
    store = JsonlStore(tmp_path / "store")
    await store.create("payloads", payload_records())
    await store.aclose()
    reader = StoreReader(JsonlStore(tmp_path / "store"))
    try:
        yield httpx.ASGITransport(app=create_app(reader, store_label=PAYLOADS[0]))
    finally:
        await reader.store.aclose()


@pytest.fixture
async def client(transport: httpx.ASGITransport) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
        yield c


class _Tags(HTMLParser):
    """Every element and attribute as a browser's parser sees them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def _assert_only_own_markup(html: str) -> None:
    """No element the console does not write itself, no script but its own file, no event
    handler or style attribute, no URL off the console; and no payload verbatim."""
    parser = _Tags()
    parser.feed(html)
    parser.close()
    for tag, attrs in parser.tags:
        assert tag not in ("iframe", "img", "style", "object", "embed", "base", "frame"), tag
        assert not [a for a in attrs if a.startswith("on") or a in ("style", "srcdoc")], (
            tag,
            attrs,
        )
        if tag == "script":
            assert attrs == {"src": "/static/console.js", "defer": None}, attrs
        if tag == "meta":
            assert attrs == {"charset": "utf-8"}, attrs
        for name in ("href", "src", "action"):
            url = attrs.get(name)
            assert url is None or (url.startswith(("/", "#")) and not url.startswith("//")), attrs
    for payload in PAYLOADS:
        assert payload not in html


async def test_every_response_carries_the_policy_and_no_sniffing(
    client: httpx.AsyncClient, transport: httpx.ASGITransport
) -> None:
    urls = [*PAGES, *HOSTILE_URLS, "/static/console.js", "/static/console.css"]
    for url in urls:
        response = await client.get(url)
        assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY, url
        assert response.headers["x-content-type-options"] == "nosniff", url
    assert "script-src 'self'" in CONTENT_SECURITY_POLICY
    assert "unsafe-inline" not in CONTENT_SECURITY_POLICY
    # a Host the console does not answer: refused, with the same headers
    async with httpx.AsyncClient(transport=transport, base_url="http://evil.example") as other:
        refused = await other.get("/s/payloads")
    assert refused.status_code == 400
    assert refused.headers["content-security-policy"] == CONTENT_SECURITY_POLICY


async def test_errors_are_plain_text_and_hostile_urls_come_back_as_text(
    client: httpx.AsyncClient,
) -> None:
    bad_id = await client.get("/s/<img src=x onerror=alert(1)>")
    assert bad_id.status_code == 400
    assert bad_id.headers["content-type"].startswith("text/plain")
    assert "invalid session id" in bad_id.text
    bad_query = await client.get("/s/payloads?before=<script>alert(1)</script>")
    assert bad_query.status_code == 400
    assert bad_query.headers["content-type"].startswith("text/plain")
    assert "before=" in bad_query.text and "record number" in bad_query.text
    for url in HOSTILE_URLS:
        response = await client.get(url)
        kind = response.headers["content-type"]
        assert response.status_code < 500, url
        if kind.startswith("text/html"):
            _assert_only_own_markup(response.text)
        else:
            assert kind.startswith("text/plain"), (url, kind)
    # a query is shown back, as text, in the filter box
    listing = await client.get("/", params={"q": '"><script>window.__xss=1</script>'})
    assert 'value="&#34;&gt;&lt;script&gt;window.__xss=1&lt;/script&gt;"' in listing.text
    _assert_only_own_markup(listing.text)


async def test_stored_markup_in_every_field_is_shown_as_text(client: httpx.AsyncClient) -> None:
    for url in PAGES:
        response = await client.get(url)
        assert response.status_code in (200, 404), url
        assert response.headers["content-type"].startswith("text/html")
        _assert_only_own_markup(response.text)
    page = (await client.get("/s/payloads")).text
    older = re.search(r'href="(/s/payloads\?before=\d+)"', page)
    assert older, "the payload session has an older page"
    page += (await client.get(older.group(1) + "&part=timeline")).text
    escaped = PAYLOADS[0].replace("<", "&lt;").replace(">", "&gt;").replace("'", "&#39;")
    # each place a person, the model or a tool wrote: the text is there, escaped
    for opening, closing in (
        ('<li class="t t-user"', "</li>"),
        ('<li class="t t-output"', "</li>"),
        ('<li class="t t-call"', "</li>"),
        ('<li class="t t-assistant"', "</li>"),
        ('<li class="t t-error is-error"', "</li>"),
        ('<li class="t t-milestone"', "</li>"),
        ('<section class="alert alert-failed"', "</section>"),
        ('<details class="summary">', "</details>"),
        ('<table class="protected">', "</table>"),
        ('<div class="tile"><div class="label">model</div>', "</div></div>"),
    ):
        element = re.search(re.escape(opening) + "(.*?)" + re.escape(closing), page, re.S)
        assert element and escaped in element.group(1), opening
    assert "&lt;iframe src=&#34;http://evil.example/frame&#34;&gt;" in page
    assert PAYLOAD not in page
