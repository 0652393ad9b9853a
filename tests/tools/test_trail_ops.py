"""What a tool says it touches becomes the session's trail of files touched: ``@tool``'s
``touches`` declaration, and ``trail_ops`` over a round's calls and outputs (a failed call
touched nothing; a command keeps how it ended)."""

from __future__ import annotations

import json

import pytest
from stowage.core import ConfigError, Effect, FunctionCall, FunctionCallOutput
from stowage.tools import ToolRegistry, call_effects, tool, trail_ops


@tool(touches={"path": "edit", "sources": "read"})
def patch(path: str, sources: list[str], note: str = "") -> str:
    """Patch a file from others."""
    return "patched"


@tool(touches={"cmd": "run"})
def shell(cmd: str) -> str:
    """Run a command."""
    return "exit status 1\nboom"


def call(name: str, call_id: str, **arguments: object) -> FunctionCall:
    return FunctionCall(call_id=call_id, name=name, arguments=json.dumps(arguments))


def test_touches_names_paths_and_lists_of_paths_normalised() -> None:
    found = call_effects(
        patch, call("patch", "c1", path="src/./a.py", sources=["b.py", "x/../c.py"])
    )
    assert found == (Effect("edit", "src/a.py"), Effect("read", "b.py"), Effect("read", "c.py"))


def test_touches_must_name_the_tools_arguments() -> None:
    with pytest.raises(ConfigError, match=r"touches names \['file'\]"):

        @tool(touches={"file": "read"})
        def bad(path: str) -> str:
            """Read."""
            return ""


def test_trail_ops_keep_what_succeeded_and_how_a_command_ended() -> None:
    registry = ToolRegistry([patch, shell])
    calls = [
        call("patch", "ok", path="a.py", sources=[]),
        call("patch", "failed", path="b.py", sources=[]),
        call("shell", "ran", cmd="pytest -q"),
    ]
    outputs = [
        FunctionCallOutput(call_id="ok", output="patched"),
        FunctionCallOutput(call_id="failed", output="no such file", is_error=True),
        FunctionCallOutput(call_id="ran", output="exit status 1\nboom"),
    ]
    assert trail_ops(registry, calls, outputs) == [
        {"op": "touch", "kind": "edit", "target": "a.py"},
        {"op": "touch", "kind": "run", "target": "pytest -q", "status": "exit status 1"},
    ]
