"""Nothing lost, nothing leaked: a full disk fails the session whose write did not fit, with a
``StoreError`` that says so, and nothing else.

A 256 KiB tmpfs is mounted for the test (we run as root; skipped when mounting is not
permitted) and the JSONL store lives on it. Three sessions of one runtime (the offline scripted
model, real files) take turns with large messages until an append fails for want of space.
Then:

- the failure is the ``StoreError`` of the session that was writing, naming the lack of space;
  the other sessions are still live;
- every log passes ``stowage check`` (a real process): the failed batch was cut back, so no
  half-written record is on disk and none was acknowledged; every turn whose ``send`` returned
  is in its log as a finished turn with the answer it returned, and the failed turn is not;
- the command line on the still full disk exits non-zero with one line that says there is no
  space, and leaves the log sound;
- once space is freed the failed session resumes (in a new runtime and from the command line)
  and its log is sound.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from stowage import Runtime, Settings, StoreError
from stowage.storage import JsonlStore, encode_record

SESSIONS = ("a", "b", "c")
MESSAGE = "fill the disk " * 300  # ~4 KiB a turn, so a few dozen turns fill what is left


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs at ``tmp_path / "disk"``, unmounted after the test."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    if done.returncode != 0:
        pytest.skip(
            f"mount -t tmpfs is not permitted here: {done.stderr.strip() or done.returncode}"
        )
    try:
        yield mount
    finally:
        unmounted = subprocess.run(
            ["umount", str(mount)], capture_output=True, check=False, timeout=30
        )
        if unmounted.returncode != 0:  # something still has a file open there: detach it
            subprocess.run(["umount", "-l", str(mount)], check=False, timeout=30)


def fill(path: Path) -> None:
    """Write ``path`` until the file system has no byte left."""
    chunk = b"x" * 512
    try:
        with path.open("ab", buffering=0) as f:
            while True:
                f.write(chunk)
    except OSError as exc:  # the open itself fails when not even an inode fits
        assert exc.errno == errno.ENOSPC, exc


def records(store: Path, session_id: str) -> list[dict]:
    async def read() -> list[dict]:
        jsonl = JsonlStore(store)
        try:
            log = await jsonl.read(session_id, repair=False)
        finally:
            await jsonl.aclose()
        assert log.torn_tail is None, f"{session_id}: a torn last line {log.torn_tail}"
        return [json.loads(encode_record(r)) for r in log.records]

    return anyio.run(read)


def finished_answer(log: list[dict], message: str) -> str | None:
    """The answer of the finished turn that ``message`` started, or ``None``."""
    starts = [
        n
        for n, r in enumerate(log)
        if r["type"] == "item" and r["item"]["type"] == "user" and r["item"]["text"] == message
    ]
    if not starts:
        return None
    turn, answer = None, None
    for r in log[starts[-1] + 1 :]:
        if r["type"] == "turn" and r["phase"] == "started" and turn is None:
            turn = r["turn"]
        elif r["type"] == "item" and r["item"]["type"] == "user":
            return None
        elif r["type"] == "item" and r["item"]["type"] == "assistant":
            answer = r["item"]["text"]
        elif r["type"] == "turn" and r["phase"] == "finished" and r["turn"] == turn:
            return answer
    return None


def cli(cli_env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stowage.cli", *args],
        cwd=cwd,
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def chain(exc: BaseException) -> list[BaseException]:
    """``exc``, its causes and the members of exception groups, outermost first."""
    out: list[BaseException] = []
    todo = [exc]
    while todo:
        current = todo.pop(0)
        if current in out:
            continue
        out.append(current)
        if current.__cause__ is not None:
            todo.append(current.__cause__)
        if isinstance(current, BaseExceptionGroup):
            todo.extend(current.exceptions)
    return out


def test_a_full_disk_fails_only_the_session_that_wrote_and_loses_nothing_acknowledged(
    small_disk: Path, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    store = small_disk / "logs"
    filler = small_disk / "filler"
    filler.write_bytes(b"x" * 150_000)  # most of the disk: it fills after a few dozen turns
    settings = Settings(model="scripted", store=store, tools="none", auto_compact=False)
    acked: dict[str, list[tuple[str, str]]] = {sid: [] for sid in SESSIONS}

    async def run() -> tuple[str, str, BaseException, list[str]]:
        async with Runtime(settings) as rt:
            for sid in SESSIONS:
                await rt.create(sid)
            for n in range(400):  # bounded: 256 KiB holds far fewer turns than this
                sid = SESSIONS[n % len(SESSIONS)]
                message = f"turn {n} of {sid}: {MESSAGE}"
                try:
                    result = await rt.send(sid, message)
                except Exception as exc:
                    return sid, message, exc, sorted(rt.sessions)
                acked[sid].append((message, result.text))
        raise AssertionError("400 turns fitted on a 256 KiB disk: nothing was written?")

    failed, failed_message, error, live = anyio.run(run)

    # the failure names the lack of space, and it is the failing session's own store error
    store_errors = [e for e in chain(error) if isinstance(e, StoreError)]
    assert store_errors, f"no StoreError in {error!r}"
    assert any("no space" in str(e).lower() for e in store_errors), store_errors
    assert any(failed in str(e) for e in store_errors), store_errors
    assert sorted(set(SESSIONS) - {failed}) == live  # the others were not taken down
    assert sum(len(turns) for turns in acked.values()) >= 6

    for sid in SESSIONS:
        log = records(store, sid)  # no torn tail
        for message, answer in acked[sid]:
            assert finished_answer(log, message) == answer, f"{sid}: acknowledged turn lost"
        done = cli(cli_env, tmp_path, "check", sid, "--store", str(store))
        assert done.returncode == 0, done.stdout + done.stderr
    assert finished_answer(records(store, failed), failed_message) is None

    # the command line on a disk with no byte left: one clear line, and a sound log
    fill(small_disk / "filler-2")
    full = cli(cli_env, tmp_path, "resume", failed, "still full? " + MESSAGE, "--store", str(store),
               "--tools", "none", "--no-auto-compact")  # fmt: skip
    assert full.returncode != 0, full.stdout
    assert "no space" in full.stderr.lower(), full.stderr
    assert "Traceback" not in full.stderr, full.stderr
    done = cli(cli_env, tmp_path, "check", failed, "--store", str(store))
    assert done.returncode == 0, done.stdout + done.stderr

    # space again: the failed session resumes, in process and from the command line
    filler.unlink()
    (small_disk / "filler-2").unlink(missing_ok=True)

    async def resume() -> str:
        async with Runtime(settings) as rt:
            session = await rt.resume(failed)
            return (await session.send("after the disk was freed")).text

    answer = anyio.run(resume)
    assert finished_answer(records(store, failed), "after the disk was freed") == answer
    again = cli(cli_env, tmp_path, "resume", failed, "and from the command line", "--store",
                str(store), "--tools", "none", "--no-auto-compact")  # fmt: skip
    assert again.returncode == 0, again.stderr
    for sid in SESSIONS:
        done = cli(cli_env, tmp_path, "check", sid, "--store", str(store))
        assert done.returncode == 0, done.stdout + done.stderr
