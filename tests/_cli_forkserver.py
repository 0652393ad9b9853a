"""A fork server for the ``cli`` fixture: ``python -m stowage.cli`` without paying, on every
call, for a new interpreter and the command line's imports (about a second each on 2 cores).

Run as ``python tests/_cli_forkserver.py``. It imports the command line once, says ``ready``
on stdout, then reads one request a line on stdin (JSON: ``n``, ``argv``, ``cwd``, ``env``, ``out``, ``err``, ``timeout``) and
forks a child for each: the child is a process of its own, as ``python -m stowage.cli`` would
be (its own exit status, signals, globals and interpreter shutdown), with the request's working
directory, environment (``os.environ`` replaced), ``/dev/null`` for stdin, and stdout and stderr
written to the files ``out`` and ``err``. The server answers one JSON line: ``{"n": n, "returncode": N}``
(negative for a signal, as ``subprocess`` reports it) or ``{"n": n, "timeout": true}`` once it has
SIGKILLed a child that ran past ``timeout`` seconds.

The server has one thread, so forking it is safe. What a child cannot change is decided when the
server starts (``PYTHON*`` variables, ``sys.flags``): the fixture runs a real subprocess for a
call whose environment changes one of those.
"""

from __future__ import annotations

import sys

# this file's folder (tests/) is not a place to import from: each child puts its own working
# directory first, as ``python -m`` does
del sys.path[0]

import importlib  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import pkgutil  # noqa: E402
import runpy  # noqa: E402
import select  # noqa: E402
import signal  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import stowage.cli  # noqa: E402

#: what the commands import (the command line loads most of it lazily), imported once here with
#: every name each package exports (the packages load their names on first use); a module that
#: cannot be imported is left to the child, which fails as a fresh interpreter would
PRELOAD = (
    *(f"stowage.cli.{m.name}" for m in pkgutil.iter_modules(stowage.cli.__path__)),
    "stowage.core", "stowage.storage", "stowage.model", "stowage.tools", "stowage.policy",
    "stowage.actors", "stowage.facade", "openai", "httpx", "pydantic", "structlog", "rich",
)  # fmt: skip


def _preload() -> None:
    for name in PRELOAD:
        if name.endswith("__main__"):
            continue  # importing it would run the command line
        try:
            module = importlib.import_module(name)
            for exported in getattr(module, "__all__", ()):
                getattr(module, exported)
        except Exception:
            continue


def _wait(pid: int, timeout: float) -> dict[str, Any]:
    fd = os.pidfd_open(pid)
    try:
        deadline = time.monotonic() + timeout
        while not select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
            if time.monotonic() >= deadline:
                os.kill(pid, signal.SIGKILL)  # as subprocess.run does on its timeout
                os.waitpid(pid, 0)
                return {"timeout": True}
        _, status = os.waitpid(pid, 0)
        return {"returncode": os.waitstatus_to_exitcode(status)}
    finally:
        os.close(fd)


def _serve() -> dict[str, Any]:
    """Answer requests until stdin closes (then exit); returns a request in a forked child."""
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            return request
        answer = {"n": request["n"], **_wait(pid, float(request["timeout"]))}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
    raise SystemExit(0)


def _become(request: dict[str, Any]) -> None:
    """In the child: take the request's directory, environment and standard streams."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(request["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    err = os.open(request["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    for fd, target in ((null, 0), (out, 1), (err, 2)):
        os.dup2(fd, target)
        os.close(fd)
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    streams = []
    for fd, mode, old in ((0, "r", sys.stdin), (1, "w", sys.stdout), (2, "w", sys.stderr)):
        raw = io.FileIO(fd, mode, closefd=False)
        if unbuffered and mode == "w":
            binary: io.RawIOBase | io.BufferedIOBase = raw
        elif mode == "w":
            binary = io.BufferedWriter(raw)
        else:
            binary = io.BufferedReader(raw)
        text = io.TextIOWrapper(
            binary,  # type: ignore[arg-type]
            encoding=old.encoding,
            errors=old.errors,
            write_through=unbuffered or fd == 2,
        )
        streams.append(text)
    sys.stdin, sys.stdout, sys.stderr = streams
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = streams
    main = os.path.join(os.path.dirname(stowage.cli.__file__), "__main__.py")
    sys.argv = [main, *request["argv"]]
    sys.path.insert(0, os.getcwd())  # as ``python -m`` starts: the working directory first


if __name__ == "__main__":
    _preload()
    _become(_serve())
    # as ``python -m stowage.cli``: its ``__main__`` ends the process with main()'s status, and
    # anything it raises ends it the way it ends an interpreter
    runpy.run_module("stowage.cli", run_name="__main__", alter_sys=True)
