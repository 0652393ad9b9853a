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
