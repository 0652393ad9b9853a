"""A credential inside the base URL or the API key never reaches the store or an event."""

from __future__ import annotations

from pathlib import Path

import anyio
from stowage import Runtime, Settings

SECRETS = ("hunter2", "sk-planted-query", "sk-planted-key")


async def test_planted_secrets_are_in_no_file_of_the_store_and_no_event(tmp_path: Path) -> None:
    settings = Settings(
        model="scripted",
        base_url="https://alice:hunter2@llm.example/v1?key=sk-planted-query",
        api_key="sk-planted-key",
        store=tmp_path / "store",
        workspace=tmp_path,
        compact_threshold=1500,
    )
    (tmp_path / "notes.txt").write_text("plain notes\n" * 50)
    events: list[str] = []
    with anyio.fail_after(30):
        async with Runtime(settings) as rt:
            rt.subscribe(lambda event: events.append(repr(event)))
            session = await rt.create("secrets", system="be brief")
            for n in range(3):
                await session.send(f"read the notes, part {n}")
    files = [p for p in (tmp_path / "store").rglob("*") if p.is_file()]
    assert files, "the session wrote nothing"
    for path in files:
        data = path.read_bytes()
        for secret in SECRETS:
            assert secret.encode() not in data, f"{secret} found in {path}"
    assert "llm.example" in "".join(p.read_text() for p in files if p.suffix == ".jsonl")
    for secret in SECRETS:
        assert not any(secret in line for line in events)
