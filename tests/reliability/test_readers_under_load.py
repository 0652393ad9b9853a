"""Readers never change a live log: ``stowage check`` and ``stowage show`` run again and again
while another process appends big batches to the same session, and the log never shrinks.

This is the hole an adversarial run found: a reader took the write in progress for a torn tail
and cut it (``bytes_removed=95984``), after which the log failed ``check``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

# A writer with tools returning 32 KB each: every committed batch is one long write, so a
# reader has a fair chance to meet a half-written last line.
WRITER = r"""
import sys
import anyio
from stowage import Runtime, Settings
from stowage.load._engine import synthetic_tools
from stowage.model import ScriptedModel

async def main() -> None:
    settings = Settings(store=sys.argv[1], compact_threshold=400_000, tools="none")
    model = ScriptedModel(latency=0.04)
    async with Runtime(settings, gateway=model, tools=synthetic_tools(32)) as rt:
        session = await rt.create("live", system="fetch, then answer")
        stop = anyio.Path(sys.argv[2])
        for turn in range(2000):  # bounded; the test asks it to stop after its reads
            if await stop.exists():
                break
            await session.send(f"turn {turn}: fetch the blob and the log, report")
    print("writer done", flush=True)

anyio.run(main)
"""


def test_check_and_show_during_appends_never_cut_the_live_log(
    tmp_path: Path, cli: Callable[..., subprocess.CompletedProcess[str]], cli_env: dict[str, str]
) -> None:
    store = tmp_path / "store"
    log = store / "live.jsonl"
    stop = tmp_path / "stop"
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(store), str(stop)],
        env=cli_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    sizes: list[int] = []
    reads = 0
    try:
        deadline = time.monotonic() + 150
        while writer.poll() is None:
            assert time.monotonic() < deadline, "the writer did not finish"
            if not log.exists():
                time.sleep(0.02)
                continue
            before = os.stat(log).st_size
            checked = cli("check", "live", "--store", str(store), cwd=tmp_path)
            # 0, or 1 when it met the write in progress as an incomplete last line: reported,
            # never cut, and never an internal error
            assert checked.returncode in (0, 1), checked.stderr
            shown = cli("show", "live", "--json", "--store", str(store), cwd=tmp_path)
            assert shown.returncode == 0, shown.stderr
            after = os.stat(log).st_size
            assert after >= before, f"a reader shrank the live log: {before} -> {after}"
            sizes.extend((before, after))
            reads += 1
            if reads == 4:
                stop.touch()
        out, err = writer.communicate(timeout=30)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.communicate()
    assert writer.returncode == 0, err
    assert "writer done" in out
    assert reads >= 4, "the readers never overlapped the writer"
    assert sizes == sorted(sizes), "the log shrank between two reads"
    final = cli("check", "live", "--store", str(store), cwd=tmp_path)
    assert final.returncode == 0, final.stdout + final.stderr
    assert not list(store.glob("*.tmp"))
