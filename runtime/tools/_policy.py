"""Whether a tool call runs, waits for a person's word, or is refused: the user's policy.

Two settings say it, as Codex users know them: ``sandbox`` (what may change at all:
``read-only``, ``workspace-write``, ``full``) and ``approval`` (when a call that acts waits
for a person: ``untrusted``, ``on-request``, ``never``), with rules ``TOOL:PATTERN`` that
allow a call without asking (``tool_allow``) or refuse it whatever else says
(``tool_deny``). A call is judged on what it says it touches (``Effect``): reading never
waits; a write or an edit is refused under ``read-only`` (where the acting tools are not
even offered), any call is refused by a deny rule, run without asking by an allow rule, and
otherwise asked for as ``approval`` says. Pure: the same call, settings and effects always
get the same verdict, before anything runs and again when an answer comes.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from stowage.core import Effect, Settings, parse_rule

__all__ = ["CallVerdict", "ToolPolicy"]


@dataclass(frozen=True, slots=True)
class CallVerdict:
    """``run``, ``ask`` (a person's word first) or ``refuse``, and why."""

    action: Literal["run", "ask", "refuse"]
    reason: str


@dataclass(frozen=True, slots=True)
class _Rule:
    tool: str
    pattern: str
    text: str

    def matches(self, tool: str, effect: Effect) -> bool:
        return fnmatch.fnmatchcase(tool, self.tool) and fnmatch.fnmatchcase(
            effect.target, self.pattern
        )


@dataclass(frozen=True, slots=True)
class ToolPolicy:
    """The user's word on what tools may do (``for_settings``)."""

    sandbox: Literal["read-only", "workspace-write", "full"]
    approval: Literal["untrusted", "on-request", "never"]
    allow: tuple[_Rule, ...] = ()
    deny: tuple[_Rule, ...] = ()

    @classmethod
    def for_settings(cls, settings: Settings) -> ToolPolicy:
        """The settings' rules are checked when they are made (``parse_rule``)."""

        def rules(texts: Sequence[str]) -> tuple[_Rule, ...]:
            return tuple(_Rule(*parse_rule(text), text=text) for text in texts)

        return cls(
            sandbox=settings.sandbox,
            approval=settings.approval,
            allow=rules(settings.tool_allow),
            deny=rules(settings.tool_deny),
        )

    def judge(
        self, tool: str, effects: Sequence[Effect], *, needs_approval: bool = False
    ) -> CallVerdict:
        """The verdict on a call of ``tool`` that touches ``effects`` (``needs_approval``:
        the tool's author asks for a person's word on every call). Raises nothing."""
        acting = [e for e in effects if e.acts]
        for effect in effects:
            for rule in self.deny:
                if rule.matches(tool, effect):
                    return CallVerdict(
                        "refuse",
                        f"refused by the rule {rule.text!r} (tool_deny) for {effect.target!r}",
                    )
        if needs_approval:
            return CallVerdict("ask", f"{tool} asks for a person's word on every call")
        if not acting:
            return CallVerdict("run", "it only reads")
        changes = [e for e in acting if e.kind in ("write", "edit")]
        if changes and self.sandbox == "read-only":
            return CallVerdict(
                "refuse",
                f"the session's sandbox is read-only: nothing is written until you say so "
                f"(resume with --sandbox workspace-write); not writing {changes[0].target!r}",
            )
        if all(any(rule.matches(tool, e) for rule in self.allow) for e in acting):
            return CallVerdict("run", "allowed by a tool_allow rule")
        if self.approval == "untrusted":
            what = ", ".join(f"{e.kind} {e.target}" for e in acting)
            return CallVerdict("ask", f"approval is untrusted: {what} waits for your word")
        if self.approval == "never":
            return CallVerdict("run", "approval is never: the sandbox confines it")
        # on-request: what the sandbox confines runs; what it cannot confine waits
        if self.sandbox == "full" and any(e.kind == "run" for e in acting):
            return CallVerdict(
                "ask",
                "the sandbox is full (commands run unconfined): a command waits for your word",
            )
        return CallVerdict("run", f"the {self.sandbox} sandbox confines it")
