"""The approval policy, proved on ``ToolPolicy.judge`` alone over every sandbox and approval
mode: a deny rule always refuses, reading never waits, nothing is written under read-only,
untrusted asks for everything that acts, never asks for nothing it does not have to, an allow
rule never outweighs a deny rule, and the same call always gets the same verdict."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from stowage.core import ConfigError, Effect, Settings, parse_rule
from stowage.tools import ToolPolicy

SANDBOXES = ("read-only", "workspace-write", "full")
APPROVALS = ("untrusted", "on-request", "never")
TOOLS = ("write_file", "edit_file", "run_command", "read_file", "mine")
TARGETS = ("src/a.py", "docs/x.md", ".git/config", "pytest -q", "rm -rf build", "README.md")
RULES = (
    "*:.git/*",
    "run_command:pytest *",
    "write_file:docs/*",
    "*:src/*",
    "edit_file:*",
    "run_command:rm *",
)

effects = st.lists(
    st.builds(
        Effect,
        kind=st.sampled_from(("read", "list", "search", "write", "edit", "run")),
        target=st.sampled_from(TARGETS),
    ),
    max_size=3,
)
policies = st.builds(
    lambda sandbox, approval, allow, deny: ToolPolicy.for_settings(
        Settings(
            sandbox=sandbox,
            approval=approval,
            tool_allow=tuple(allow),
            tool_deny=tuple(deny),
        )
    ),
    st.sampled_from(SANDBOXES),
    st.sampled_from(APPROVALS),
    st.lists(st.sampled_from(RULES), max_size=2, unique=True),
    st.lists(st.sampled_from(RULES), max_size=2, unique=True),
)


def denied(policy: ToolPolicy, tool: str, found: list[Effect]) -> bool:
    return any(rule.matches(tool, e) for rule in policy.deny for e in found)


def allowed(policy: ToolPolicy, tool: str, found: list[Effect]) -> bool:
    acting = [e for e in found if e.acts]
    return all(any(rule.matches(tool, e) for rule in policy.allow) for e in acting)


@given(policies, st.sampled_from(TOOLS), effects, st.booleans())
def test_every_verdict_keeps_the_policy_promises(
    policy: ToolPolicy, tool: str, found: list[Effect], needs: bool
) -> None:
    verdict = policy.judge(tool, found, needs_approval=needs)
    assert verdict == policy.judge(tool, found, needs_approval=needs)  # pure
    assert verdict.reason
    acting = [e for e in found if e.acts]
    changes = [e for e in acting if e.kind in ("write", "edit")]
    if denied(policy, tool, found):
        assert verdict.action == "refuse" and "tool_deny" in verdict.reason
        return
    if needs:
        assert verdict.action == "ask"  # the tool's author asked for a person's word
        return
    if not acting:
        assert verdict.action == "run"  # reading never waits
        return
    if changes and policy.sandbox == "read-only":
        assert verdict.action == "refuse" and "read-only" in verdict.reason
        return
    if allowed(policy, tool, found):
        assert verdict.action == "run"
        return
    if policy.approval == "untrusted":
        assert verdict.action == "ask"
    elif policy.approval == "never":
        assert verdict.action == "run"
    else:  # on-request: only what the sandbox cannot confine waits
        unconfined = policy.sandbox == "full" and any(e.kind == "run" for e in acting)
        assert verdict.action == ("ask" if unconfined else "run")


@given(policies, st.sampled_from(TOOLS), effects)
def test_nothing_changes_under_read_only_without_a_person(
    policy: ToolPolicy, tool: str, found: list[Effect]
) -> None:
    if policy.sandbox != "read-only":
        return
    verdict = policy.judge(tool, found)
    if any(e.kind in ("write", "edit") for e in found):
        assert verdict.action == "refuse"


def test_the_default_keeps_git_out_of_reach() -> None:
    policy = ToolPolicy.for_settings(Settings(sandbox="workspace-write", approval="never"))
    verdict = policy.judge("write_file", [Effect("write", ".git/hooks/pre-commit")])
    assert verdict.action == "refuse"
    assert "'*:.git/*'" in verdict.reason and ".git/hooks/pre-commit" in verdict.reason
    assert policy.judge("write_file", [Effect("write", "src/a.py")]).action == "run"


def test_the_reasons_say_what_to_do() -> None:
    read_only = ToolPolicy.for_settings(Settings())
    refused = read_only.judge("write_file", [Effect("write", "a.txt")])
    assert refused.action == "refuse"
    assert "--sandbox workspace-write" in refused.reason and "'a.txt'" in refused.reason
    full = ToolPolicy.for_settings(Settings(sandbox="full"))
    asked = full.judge("run_command", [Effect("run", "make")])
    assert asked.action == "ask" and "unconfined" in asked.reason


@pytest.mark.parametrize("rule", ["", ":", "run_command:", ":pytest *", "  :  "])
def test_a_malformed_rule_is_refused_naming_it(rule: str) -> None:
    with pytest.raises(ConfigError, match="write TOOL:PATTERN"):
        Settings(tool_allow=(rule,))
    with pytest.raises(ConfigError, match="write TOOL:PATTERN"):
        parse_rule(rule)


def test_a_rule_without_a_tool_applies_to_every_tool() -> None:
    assert parse_rule("docs/*") == ("*", "docs/*")
    assert parse_rule(" run_command : pytest * ") == ("run_command", "pytest *")
