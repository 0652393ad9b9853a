"""No code of stowage reaches into the openai (or anthropic) SDK's private parts.

Model calls go through aiohttp or the SDK's public API only: a private hook can change in any
release of the SDK. The rule, checked on the source with ``ast``: no import of a private openai
module anywhere in the package (``from openai._models import ...``, ``import openai._x``), no
private attribute of the ``openai`` module (``openai._models``), and in the model package none
of the private names the gateway once used, as attributes, names or ``getattr`` strings.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_FOLDERS = ("runtime", "actors", "storage")
#: the openai SDK's private names the gateway's former fast path used
PRIVATE_NAMES = frozenset(
    {
        "_build_request",
        "_client",
        "_make_status_error_from_response",
        "_base_client",
        "_models",
        "FinalRequestOptions",
    }
)


def _sources(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py"))


#: the SDKs the gateways may call, through their public API only
SDKS = frozenset({"openai", "anthropic"})


def _private_module(name: str | None) -> bool:
    parts = (name or "").split(".")
    return parts[0] in SDKS and any(p.startswith("_") for p in parts[1:])


def private_sdk_uses(tree: ast.AST, *, strict: bool) -> list[str]:
    """Where ``tree`` imports a private openai module or touches a private attribute of the
    ``openai`` module; with ``strict``, also any use of ``PRIVATE_NAMES``."""
    found: list[str] = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.ImportFrom) and _private_module(node.module):
            found.append(f"{line}: from {node.module} import ...")
        elif isinstance(node, ast.Import):
            found += [f"{line}: import {a.name}" for a in node.names if _private_module(a.name)]
        elif isinstance(node, ast.Attribute):
            if (
                isinstance(node.value, ast.Name)
                and node.value.id in SDKS
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                found.append(f"{line}: {node.value.id}.{node.attr}")
            elif strict and node.attr in PRIVATE_NAMES:
                found.append(f"{line}: .{node.attr}")
        elif strict and isinstance(node, ast.Name) and node.id in PRIVATE_NAMES:
            found.append(f"{line}: {node.id}")
        elif strict and isinstance(node, ast.Constant) and node.value in PRIVATE_NAMES:
            found.append(f"{line}: {node.value!r}")
        elif strict and isinstance(node, ast.alias) and node.name in PRIVATE_NAMES:
            found.append(f"{line}: import of {node.name}")
    return found


def test_no_module_uses_a_private_part_of_the_openai_sdk() -> None:
    sources = _sources(*PACKAGE_FOLDERS)
    # the scan sees both gateways
    assert {"_openai_gateway.py", "_anthropic_sdk.py"} <= {p.name for p in sources}
    found = {}
    for path in sources:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        strict = path.is_relative_to(ROOT / "runtime" / "model")
        uses = private_sdk_uses(tree, strict=strict)
        if uses:
            found[str(path.relative_to(ROOT))] = uses
    assert found == {}


def test_the_hand_written_http_client_is_gone() -> None:
    assert not (ROOT / "runtime" / "model" / "_http1.py").exists()


@pytest.mark.parametrize(
    "source",
    [
        "from openai._models import FinalRequestOptions",
        "import openai._base_client",
        "import openai\nopenai._models.FinalRequestOptions.construct()",
        "request = client._build_request(options)",
        "http = client._client",
        "make = getattr(client, '_make_status_error_from_response')",
        "from anthropic._models import BaseModel",
        "import anthropic\nanthropic._exceptions.APIError",
    ],
)
def test_the_rule_catches_each_way_in(source: str) -> None:
    assert private_sdk_uses(ast.parse(source), strict=True)


def test_the_rule_lets_the_public_api_through() -> None:
    source = (
        "import openai\nclient = openai.AsyncOpenAI(api_key='k', max_retries=0)\n"
        "version = openai.__version__\nawait client.chat.completions.create(model='m')\n"
    )
    assert private_sdk_uses(ast.parse(source), strict=True) == []
