"""``run_command``: a command in the workspace, confined by the session's sandbox."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
from pathlib import Path

import anyio
from pydantic import BaseModel, ConfigDict, Field
from stowage.core import Effect, Settings, current_tool_context

from ._guard import Guard
from ._registry import FunctionTool, ToolError
from ._sandbox import sandboxed_argv

__all__ = ["RunCommandArgs", "command_line", "command_tool"]

#: seconds a command may run unless the call asks for less (never more)
MAX_COMMAND_SECONDS = 600.0
# output is made durable every this many characters (or at the end)
_PROGRESS_CHARS = 4096
# what the model reads of a long output: its head and its tail
_KEEP_CHARS = 8000
# a call's output logged whole up to here; past it, every _FLOOD_CHARS, its tail only
_LOGGED_WHOLE = 2 * _KEEP_CHARS
_FLOOD_CHARS = 64 * 1024


class RunCommandArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    command: str | list[str] = Field(
        description="An argv list (['pytest', '-q']), or a shell line run by /bin/sh -c."
    )
    cwd: str = Field(default=".", description="Working directory, relative to the workspace.")
    timeout: float = Field(
        default=120.0, gt=0, le=MAX_COMMAND_SECONDS, description="Seconds before it is killed."
    )


def command_line(command: str | list[str]) -> str:
    """The command as one line, as rules match it and a person approves it."""
    return command if isinstance(command, str) else shlex.join(command)


class _Printed:
    """What a command printed: whole while short, head and tail once long."""

    __slots__ = ("head", "tail", "total")

    def __init__(self) -> None:
        self.head = ""
        self.tail = ""
        self.total = 0

    def add(self, text: str) -> None:
        self.total += len(text)
        if len(self.head) < _KEEP_CHARS:
            room = _KEEP_CHARS - len(self.head)
            self.head, text = self.head + text[:room], text[room:]
        self.tail += text
        if len(self.tail) > 4 * _KEEP_CHARS:
            self.tail = self.tail[-_KEEP_CHARS:]

    def text(self) -> str:
        cut = self.total - len(self.head) - min(len(self.tail), _KEEP_CHARS)
        if cut <= 0 and self.total == len(self.head) + len(self.tail):
            return self.head + self.tail
        return (
            f"{self.head}\n[... {cut:,} characters of output cut ...]\n{self.tail[-_KEEP_CHARS:]}"
        )


def command_tool(guard: Guard, settings: Settings) -> FunctionTool[RunCommandArgs]:
    """``run_command`` over the guard's workspace, under the settings' sandbox."""
    store = Path(settings.store).resolve()

    async def run_command(args: RunCommandArgs) -> str:
        workdir = guard.scope().resolve(args.cwd)
        if not workdir.is_dir():
            raise ToolError(f"cwd {args.cwd!r} is not a directory of the workspace")
        argv = ["/bin/sh", "-c", args.command] if isinstance(args.command, str) else args.command
        if not argv:
            raise ToolError("command is empty")
        boxed = sandboxed_argv(
            argv,
            sandbox=settings.sandbox,
            workspace=guard.base,
            cwd=workdir,
            hidden=[store],
            network=settings.sandbox_network,
        )
        env = {k: os.environ[k] for k in settings.command_env if k in os.environ}
        return await _run(boxed, workdir, env, args.timeout)

    def preview(args: RunCommandArgs) -> str:
        confined = {
            "full": "unconfined (sandbox full)",
            "workspace-write": "in the workspace-write sandbox",
            "read-only": "in the read-only sandbox",
        }[settings.sandbox]
        network = ", with network" if settings.sandbox_network else ", no network"
        network = "" if settings.sandbox == "full" else network
        return (
            f"$ {command_line(args.command)}\n"
            f"(in {args.cwd}, {confined}{network}, killed after {args.timeout:g}s)"
        )

    return FunctionTool(
        name="run_command",
        description=(
            "Run a command in the workspace (argv list, or a shell line) and get its output "
            "and exit status. It runs in a sandbox: writes only inside the workspace, no "
            "network, a timeout."
        ),
        args_model=RunCommandArgs,
        fn=run_command,
        timeout=MAX_COMMAND_SECONDS + 30,
        effects=lambda a: (Effect("run", command_line(a.command)),),
        preview=preview,
    )


async def _run(argv: list[str], cwd: Path, env: dict[str, str], seconds: float) -> str:
    """Run ``argv``; its output and exit status, its process group killed after ``seconds``."""
    context = current_tool_context.get()
    progress = context.progress if context is not None else None
    printed = _Printed()
    pending: list[str] = []
    timed_out = False
    try:
        process = await anyio.open_process(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as exc:
        raise ToolError(f"cannot start {argv[0]!r}: {exc.strerror or exc}") from None

    logged = 0

    async def flush() -> None:
        nonlocal logged
        if pending and progress is not None:
            chunk = "".join(pending)
            pending.clear()
            if logged >= _LOGGED_WHOLE and len(chunk) > _KEEP_CHARS:
                # past the head, a flood logs its tail only: the log keeps no more than a
                # resume would show
                chunk = f"[... {len(chunk) - _KEEP_CHARS:,} characters ...]\n{chunk[-_KEEP_CHARS:]}"
            logged += len(chunk)
            await progress(chunk)

    async def read() -> None:
        assert process.stdout is not None
        size = 0
        async for data in process.stdout:
            text = data.decode("utf-8", errors="replace")
            printed.add(text)
            pending.append(text)
            size += len(text)
            if size >= (_PROGRESS_CHARS if logged < _LOGGED_WHOLE else _FLOOD_CHARS):
                size = 0
                await flush()

    try:
        with anyio.move_on_after(seconds) as scope:
            await read()
            await process.wait()
        if scope.cancelled_caught:
            timed_out = True
            _kill(process.pid)
            with anyio.CancelScope(shield=True):
                await process.wait()
    except BaseException:
        _kill(process.pid)
        with anyio.CancelScope(shield=True), anyio.move_on_after(5):
            await flush()  # what it printed before it was stopped (the output says the rest)
            await process.wait()
        raise
    finally:
        with anyio.CancelScope(shield=True):
            await process.aclose()
    output = printed.text()
    status = (
        f"timed out after {seconds:g}s (killed)"
        if timed_out
        else f"exit status {process.returncode}"
    )
    return f"{status}\n{output}" if output else status


def _kill(pid: int) -> None:
    """Kill the command and everything it started (its own process group)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
