"""MCP servers' tools beside the built-in ones, over stdio and streamable HTTP, with a real
server written with the SDK (``mcp_test_server.py``): prefixed names on a clash, error outputs
for a tool that fails, a server that crashes mid-call or hangs is restarted and the session goes
on, and the server's process is stopped when the runtime closes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import anyio
import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install '.[mcp]')")

from stowage import (
    AssistantMessage,
    ConfigError,
    FunctionCall,
    FunctionCallOutput,
    ModelResponse,
    Runtime,
    Settings,
    ToolRegistry,
    tool,
)
from stowage.core import ItemRecord
from stowage.model._scripted import ScriptedModel
from stowage.storage import JsonlStore
from stowage.tools import MCPServer, mcp_server

SERVER = Path(__file__).with_name("mcp_test_server.py")


def stdio_server(tmp_path: Path) -> MCPServer:
    return MCPServer(
        command=(sys.executable, str(SERVER), "stdio"),
        env={"CRASH_MARKER": str(tmp_path / "crashed")},
    )


@tool
async def echo(text: str) -> str:
    """The built-in echo."""
    return f"local echo: {text}"


def call(call_id: str, name: str, arguments: str = "{}") -> FunctionCall:
    return FunctionCall(call_id=call_id, name=name, arguments=arguments)


def answer(text: str = "done") -> ModelResponse:
    return ModelResponse(items=(AssistantMessage(text=text),))


async def outputs_of(store_dir: Path, session_id: str = "s1") -> dict[str, FunctionCallOutput]:
    log = await JsonlStore(store_dir).read(session_id)
    return {
        r.item.call_id: r.item
        for r in log.records
        if isinstance(r, ItemRecord) and isinstance(r.item, FunctionCallOutput)
    }


def process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def test_stdio_tools_sit_beside_the_built_in_ones_and_a_clash_gets_the_server_prefix(
    tmp_path: Path,
) -> None:
    model = ScriptedModel.from_responses(
        [
            ModelResponse(
                items=(
                    call("c1", "add", '{"a": 2, "b": 40}'),
                    call("c2", "echo", '{"text": "a"}'),
                    call("c3", "mcp_test_server_echo", '{"text": "b"}'),
                    call("c4", "refuse", '{"reason": "no"}'),
                    call("c5", "pid"),
                )
            ),
            answer(),
        ]
    )
    with anyio.fail_after(60):
        async with Runtime(
            Settings(store=tmp_path / "store"),
            gateway=model,
            tools=ToolRegistry([echo]),
            mcp=[stdio_server(tmp_path)],
        ) as rt:
            session = await rt.create("s1")
            result = await session.send("use the tools")
    assert result.text == "done"
    names = [spec.name for spec in model.requests[0].tools]
    assert names[0] == "echo"
    assert {"add", "mcp_test_server_echo", "refuse", "pid", "crash", "hang"} <= set(names)
    add_schema = next(s for s in model.requests[0].tools if s.name == "add").parameters
    assert add_schema["required"] == ["a", "b"]
    out = await outputs_of(tmp_path / "store")
    assert out["c1"].output == "42" and not out["c1"].is_error
    assert out["c2"].output == "local echo: a"
    assert out["c3"].output == "mcp echo: b"
    assert out["c4"].is_error and out["c4"].output.startswith("error: ")
    server_pid = int(out["c5"].output)
    assert process_gone(server_pid)  # stopped with the runtime


async def test_a_server_that_crashes_mid_call_gives_an_error_output_and_is_restarted(
    tmp_path: Path,
) -> None:
    model = ScriptedModel.from_responses(
        [
            ModelResponse(items=(call("c1", "pid"),)),
            ModelResponse(items=(call("c2", "crash"),)),
            ModelResponse(items=(call("c3", "add", '{"a": 1, "b": 1}'), call("c4", "pid"))),
            answer("still here"),
        ]
    )
    with anyio.fail_after(60):
        async with Runtime(
            Settings(store=tmp_path / "store"), gateway=model, mcp=[stdio_server(tmp_path)]
        ) as rt:
            session = await rt.create("s1")
            result = await session.send("crash it")
    assert result.text == "still here"
    assert (tmp_path / "crashed").exists()  # the server really died mid-call
    out = await outputs_of(tmp_path / "store")
    assert out["c2"].is_error
    assert "mcp_test_server failed during crash" in out["c2"].output
    assert "restarted" in out["c2"].output
    assert out["c3"].output == "2"
    assert out["c4"].output != out["c1"].output  # a new server process answered


async def test_a_hung_server_is_given_up_on_restarted_and_the_next_call_reaches_a_fresh_one(
    tmp_path: Path,
) -> None:
    """The server's own call timeout gives up on the hung call and restarts the server; the
    next call waits for the new process."""
    model = ScriptedModel.from_responses(
        [
            ModelResponse(items=(call("c1", "pid"),)),
            ModelResponse(items=(call("c2", "hang"),)),
            ModelResponse(items=(call("c3", "pid"),)),
            answer(),
        ]
    )
    with anyio.fail_after(60):
        async with Runtime(
            Settings(store=tmp_path / "store"),
            gateway=model,
            mcp=[replace(stdio_server(tmp_path), call_timeout=1.0)],
        ) as rt:
            session = await rt.create("s1")
            await session.send("hang it")
    out = await outputs_of(tmp_path / "store")
    assert out["c2"].is_error
    assert "did not answer hang within 1 s; it is being restarted" in out["c2"].output
    assert out["c3"].output.isdigit() and out["c3"].output != out["c1"].output
    assert process_gone(int(out["c1"].output))  # the hung process was stopped


async def test_the_executor_timeout_gives_an_error_output_for_a_hung_server(
    tmp_path: Path,
) -> None:
    model = ScriptedModel.from_responses(
        [ModelResponse(items=(call("c1", "hang"),)), answer("went on")]
    )
    with anyio.fail_after(60):
        async with Runtime(
            Settings(store=tmp_path / "store", tool_timeout=1.0),
            gateway=model,
            mcp=[stdio_server(tmp_path)],
        ) as rt:
            session = await rt.create("s1")
            result = await session.send("hang it")
    assert result.text == "went on"
    out = await outputs_of(tmp_path / "store")
    assert out["c1"].is_error and out["c1"].output == "error: hang timed out after 1 s"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    env = {**os.environ, "CRASH_MARKER": str(tmp_path / "crashed")}
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), "http", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # readiness: the port accepts connections (or the server died)
        for _ in range(600):
            if proc.poll() is not None:
                pytest.fail(f"the MCP test server exited with {proc.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.1):
                    break
            except OSError:
                time.sleep(0.05)  # polling a subprocess's port: nothing to wait on instead
        else:
            pytest.fail("the MCP test server did not listen within 30 s")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)


async def test_streamable_http_server_tools_run_like_the_others(
    tmp_path: Path, http_server: str
) -> None:
    model = ScriptedModel.from_responses(
        [
            ModelResponse(
                items=(call("c1", "add", '{"a": 3, "b": 4}'), call("c2", "echo", '{"text": "h"}'))
            ),
            answer(),
        ]
    )
    with anyio.fail_after(60):
        async with Runtime(
            Settings(store=tmp_path / "store"), gateway=model, mcp=[http_server]
        ) as rt:
            session = await rt.create("s1")
            await session.send("over http")
    out = await outputs_of(tmp_path / "store")
    assert out["c1"].output == "7"
    assert out["c2"].output == "mcp echo: h"


def test_server_specs_from_text() -> None:
    assert mcp_server("npx -y some-server --root '/a b'").command == (
        "npx",
        "-y",
        "some-server",
        "--root",
        "/a b",
    )
    assert mcp_server("https://tools.example/mcp").url == "https://tools.example/mcp"
    with pytest.raises(ConfigError, match="empty"):
        mcp_server("   ")
    with pytest.raises(ConfigError, match="exactly one"):
        MCPServer()


async def test_a_server_that_does_not_start_is_a_config_error_naming_it(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        with pytest.raises(ConfigError, match="MCP server nonexistent_cmd: could not start"):
            async with Runtime(
                Settings(store=tmp_path), gateway=ScriptedModel(), mcp=["nonexistent_cmd --x"]
            ):
                pass


def test_without_the_sdk_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)  # what an environment without it imports
    with pytest.raises(ConfigError, match=r"pip install 'stowage-runtime\[mcp\]'"):
        Runtime(Settings(), gateway=ScriptedModel(), mcp=["server"])


def test_mcp_option_without_the_sdk_is_one_line_naming_the_extra(
    tmp_path: Path,
    cli: Callable[..., subprocess.CompletedProcess[str]],
    cli_env: dict[str, str],
) -> None:
    """An environment without the SDK: a package ``mcp`` that cannot be imported shadows it."""
    shadow = tmp_path / "shadow" / "mcp"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError(\"No module named 'mcp'\")\n")
    cli_env["PYTHONPATH"] = str(shadow.parent)
    done = cli(
        "approve", "s1", "c1", "--mcp", "some-server", "--store", str(tmp_path), cwd=tmp_path
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert "pip install 'stowage-runtime[mcp]'" in done.stderr


def test_the_command_line_offers_mcp_tools_from_the_option_or_stowage_toml(
    tmp_path: Path,
    cli: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    """The offline model calls every tool offered in turn: the MCP server's ``pid`` answers
    from its own process, whether ``--mcp`` names the server or ``stowage.toml`` does."""
    command = f"{sys.executable} {SERVER} stdio"
    store = str(tmp_path / "store")
    by_option = cli("run", "--session", "o1", "--tools", "none", "--mcp", command,
                    "--store", store, "use the tools", cwd=tmp_path)  # fmt: skip
    assert by_option.returncode == 0, by_option.stderr
    (tmp_path / "stowage.toml").write_text(f"mcp = [{command!r}]\n".replace("'", '"'))
    by_config = cli("run", "--session", "o2", "--tools", "none", "--store", store,
                    "use the tools", cwd=tmp_path)  # fmt: skip
    assert by_config.returncode == 0, by_config.stderr
    for sid in ("o1", "o2"):
        log = anyio.run(JsonlStore(Path(store)).read, sid).records
        calls = {r.item.call_id: r.item.name for r in log if isinstance(r, ItemRecord)
                 and isinstance(r.item, FunctionCall)}  # fmt: skip
        outputs = {calls[r.item.call_id]: r.item.output for r in log if isinstance(r, ItemRecord)
                   and isinstance(r.item, FunctionCallOutput)}  # fmt: skip
        assert outputs["pid"].isdigit() and int(outputs["pid"]) != os.getpid()
