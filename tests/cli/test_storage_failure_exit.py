"""A storage failure exits 5 (its own status, documented), in one line naming the file, the
operating system's reason and the fix, never 2 (usage) and never a traceback.

The failures are real, made by the kernel, not injected: a disk that is full (ENOSPC) is a
64 KiB tmpfs, mounted in a mount namespace of the command's own (``unshare --mount``), so it
needs no cleanup and leaves the machine's mounts alone; it runs where mounting is permitted
(root, or CAP_SYS_ADMIN) and is skipped elsewhere. A file-size limit (``ulimit -f``: EFBIG,
the same write refused the same way) needs no privilege and always runs. A read-only
directory would not do: root, which runs these tests in containers, writes through it.
"""

from __future__ import annotations

import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

MESSAGE = "x" * 20_000  # more than the space left: the user message's append fails


def _namespaces_allowed(tmp_path: Path) -> bool:
    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    probe = tmp_path / "probe"
    probe.mkdir()
    done = subprocess.run(
        [unshare, "--mount", "--propagation", "private", "sh", "-c",
         f"mount -t tmpfs -o size=64k tmpfs {probe}"],
        capture_output=True, timeout=30, check=False,
    )  # fmt: skip
    return done.returncode == 0


def _file_size_limit() -> None:
    """In the child: writes past 4 KiB fail with EFBIG (SIGXFSZ ignored, as a server would)."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))


def test_a_full_disk_exits_5_naming_the_file_and_the_fix(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    if not _namespaces_allowed(tmp_path):
        pytest.skip("mounting a tmpfs in a mount namespace is not permitted here")
    disk = tmp_path / "disk"
    disk.mkdir()
    # the tmpfs nearly filled first: 56 of its 64 KiB
    script = (
        f"mount -t tmpfs -o size=64k tmpfs {disk} && head -c 57344 /dev/zero > {disk}/filler && "
        f'exec "$0" -m stowage.cli run --session full --store {disk}/st --tools none "$1"'
    )
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script,
         sys.executable, MESSAGE],
        cwd=tmp_path, env=cli_env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 5, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert "No space left on device" in done.stderr and "disk is full" in done.stderr
    assert f"{disk}/st/full.jsonl" in done.stderr


def test_a_refused_write_exits_5_and_leaves_a_sound_log_that_resumes(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "stowage.cli", "run", "--session", "big", "--store", "st",
         "--tools", "none", MESSAGE],
        cwd=tmp_path, env=cli_env, capture_output=True, text=True, timeout=120, check=False,
        preexec_fn=_file_size_limit,
    )  # fmt: skip
    assert done.returncode == 5, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert "File too large" in done.stderr and "ulimit -f" in done.stderr
    # nothing half-written: the log checks sound, and the session goes on once there is room
    for argv in (("check", "big"), ("resume", "big", "short")):
        again = subprocess.run(
            [sys.executable, "-m", "stowage.cli", *argv, "--store", "st"],
            cwd=tmp_path, env=cli_env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert again.returncode == 0, (argv, again.stdout, again.stderr)


def test_the_status_is_documented_in_help_and_the_reference(repo_root: Path) -> None:
    from stowage.cli._exits import EXIT_STATUSES, EXIT_STORE

    assert EXIT_STORE == 5
    assert "  5    the store failed" in EXIT_STATUSES
    reference = repo_root / "docs" / "reference" / "exit-statuses.md"
    assert "| 5 | the store failed" in reference.read_text(encoding="utf-8")


def _one_line_per_failure(runs: list[subprocess.CompletedProcess[str]], fix: str) -> None:
    """Every run answered or failed on its store in exactly one line; some failed."""
    assert any(run.returncode == 5 for run in runs), [run.stderr for run in runs]
    for run in runs:
        assert run.returncode in (0, 5), run.stderr
        if run.returncode == 5:
            assert run.stderr.count("\n") == 1 and "Traceback" not in run.stderr, run.stderr
            assert fix in run.stderr, run.stderr
        else:  # answered; a release the full disk refused is said once, after the answer
            for line in run.stderr.splitlines():
                assert line.startswith("stowage: warning: session s: its writer lease was not")


def _run(
    argv: list[str], tmp_path: Path, env: dict[str, str], **extra: Any
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
        **extra,
    )  # fmt: skip


def test_a_full_disk_under_a_sqlite_store_is_said_once(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """The append fails, then the lease's release: one failure, one line, whichever of the
    batches the disk filled on (a few amounts of free space left)."""
    if not _namespaces_allowed(tmp_path):
        pytest.skip("mounting a tmpfs in a mount namespace is not permitted here")
    runs = []
    for free_kib in (32, 40, 48, 56, 64):
        disk = tmp_path / f"disk{free_kib}"
        disk.mkdir()
        store = f"sqlite:///{disk}/s.db"
        script = (
            f"mount -t tmpfs -o size=512k tmpfs {disk} && "
            f'"$0" -m stowage.cli run --session s --store {store} --tools none hi >/dev/null && '
            f"avail=$(df -k --output=avail {disk} | tail -1) && "
            f"head -c $(( (avail - {free_kib}) * 1024 )) /dev/zero > {disk}/filler; "
            f'exec "$0" -m stowage.cli resume s --store {store} --tools none "$1"'
        )
        unshare = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script]
        runs.append(_run([*unshare, sys.executable, MESSAGE], tmp_path, cli_env))
    _one_line_per_failure(runs, "the disk is full: free space there")


def test_a_refused_write_to_a_sqlite_store_is_said_once(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """As above with a file-size limit, which needs no privilege."""
    runs = []
    stowage = [sys.executable, "-m", "stowage.cli"]
    for limit in (28_672, 32_768, 40_960, 49_152):
        store = ["--store", f"sqlite:///{tmp_path}/s{limit}.db", "--tools", "none"]
        made = _run([*stowage, "run", "--session", "s", *store, "hi"], tmp_path, cli_env)
        assert made.returncode == 0, made.stderr

        def limited(limit: int = limit) -> None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

        resume = [*stowage, "resume", "s", *store, MESSAGE]
        runs.append(_run(resume, tmp_path, cli_env, preexec_fn=limited))
    _one_line_per_failure(runs, "the session store failed: sqlite store")
