"""A session's identity: what it runs with, kept in its log so every continuation uses it.

The session record (seq 1) stores the identity fields of ``Settings`` (never a secret: the
endpoint URL and the MCP servers' commands and URLs are redacted, the API key is not stored at
all), the source of its tools among them (``tools_from``, ``mcp``, ``mcp_url``), so that a
command that continues the session builds the same tools without being told again. A
continuation starts from that identity; an explicit override is recorded as a ``SettingsChangedRecord`` and folded in after
it. ``continue_settings`` is the one place that merges them, for the facade and the CLI alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._errors import ConfigError, CorruptLogError
from ._records import Record, SessionRecord, SettingsChangedRecord
from ._redact import REDACTED, redact_url
from ._settings import IDENTITY_FIELDS, REDACTED_FIELDS, Settings, recordable

__all__ = [
    "IDENTITY_FIELDS", "SessionIdentity", "continue_settings", "identity_from_records",
    "identity_of",
]  # fmt: skip

_WATERMARKS = ("soft_mark", "compact_mark", "hard_mark", "target_after")


def identity_of(settings: Settings) -> dict[str, Any]:
    """The identity fields of ``settings`` as recordable values (credentials redacted)."""
    return {name: recordable(name, getattr(settings, name)) for name in IDENTITY_FIELDS}


def _given_again(name: str, stored: Any, given: Sequence[str]) -> tuple[str, ...]:
    """The MCP servers a session recorded, each redacted one replaced by the entry of ``given``
    that redacts to it, or left redacted (whoever starts the servers refuses that one)."""
    found: list[str] = []
    for entry in stored or ():
        match = [g for g in given if REDACTED in entry and recordable(name, [g]) == [entry]]
        found.append(match[0] if match else entry)
    return tuple(found)


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionIdentity:
    """What a session runs with, read from its log (see ``identity_from_records``)."""

    model: str
    base_url: str | None
    wire_api: str
    context_window: int | None
    #: how the window was found: option, registry, endpoint, assumed (None: an older log)
    window_source: str | None
    max_output_tokens: int | None
    tools: tuple[str, ...]
    #: every stored identity field by ``Settings`` field name
    fields: dict[str, Any] = field(default_factory=dict)
    #: settings_changed records folded in
    changes: int = 0

    def settings(self, base: Settings) -> Settings:
        """``base`` with the stored fields applied (the endpoint URL only when it holds no
        redacted credentials). Raises ``ConfigError`` for stored values ``Settings`` refuses."""
        values = {k: v for k, v in self.fields.items() if k not in REDACTED_FIELDS}
        url = self.fields.get("base_url")
        if url is None or REDACTED not in url:
            values["base_url"] = url
        for name in ("mcp", "mcp_url"):
            if name in self.fields:
                values[name] = [e for e in self.fields[name] or () if REDACTED not in e]
        return base.with_(**values)


def identity_from_records(records: Sequence[Record]) -> SessionIdentity:
    """The identity of a session from its full log (its session record, then every
    ``SettingsChangedRecord`` in order). Raises ``CorruptLogError`` when the first record is
    not a session record."""
    if not records or not isinstance(records[0], SessionRecord):
        raise CorruptLogError("the log does not start with a session record", path="log", line=1)
    first = records[0]
    stored = dict(first.settings)
    fields: dict[str, Any] = {}
    marks = stored.get("watermarks")
    if isinstance(marks, list | tuple) and len(marks) == len(_WATERMARKS):
        fields.update(zip(_WATERMARKS, marks, strict=True))  # logs written before identity
    fields.update({k: stored[k] for k in IDENTITY_FIELDS if k in stored})
    fields["model"] = first.model
    if first.context_window is not None:
        fields["context_window"] = first.context_window
    changes = 0
    for record in records[1:]:
        if isinstance(record, SettingsChangedRecord):
            changes += 1
            for name, change in record.changes.items():
                if name in IDENTITY_FIELDS and isinstance(change, list | tuple) and change:
                    fields[name] = change[-1]
    return SessionIdentity(
        model=str(fields["model"]),
        base_url=fields.get("base_url"),
        wire_api=str(fields.get("wire_api", "chat")),
        context_window=fields.get("context_window"),
        window_source=stored.get("window_source"),
        max_output_tokens=fields.get("max_output_tokens"),
        tools=tuple(first.tools),
        fields=fields,
        changes=changes,
    )


def continue_settings(
    base: Settings, identity: SessionIdentity, overrides: Mapping[str, Any]
) -> tuple[Settings, dict[str, list[Any]]]:
    """The settings a continued session runs with, and what ``overrides`` change.

    ``base`` gives what is not identity (store, durability, timeouts) and the secrets (the
    API key, and the endpoint URL or an MCP server when the stored one is redacted and
    ``base``'s redacts to it); the stored identity replaces ``base``'s identity fields;
    ``overrides`` (the options given explicitly) replace both; a session that compacts with
    its provider, given a wire that cannot carry the provider's item, compacts "auto" (a
    change of its own). The changes map each
    overridden field whose value differs from the stored one to ``[stored, new]``,
    credentials redacted, ready for a ``SettingsChangedRecord``.

    Raises ``ConfigError`` for an unknown override, for a stored endpoint whose credentials
    were redacted and that ``base`` does not give, or for values ``Settings`` refuses.
    """
    unknown = sorted(set(overrides) - set(IDENTITY_FIELDS))
    if unknown:
        raise ConfigError(f"not a session setting: {', '.join(unknown)}")
    values = {
        k: v
        for k, v in identity.fields.items()
        if k not in REDACTED_FIELDS and k in IDENTITY_FIELDS
    }
    for name in ("mcp", "mcp_url"):
        if name in identity.fields and name not in overrides:
            values[name] = _given_again(name, identity.fields[name], getattr(base, name))
    stored_url = identity.fields.get("base_url")
    if "base_url" not in overrides:
        if stored_url == redact_url(base.base_url):
            values["base_url"] = base.base_url
        elif stored_url is None or REDACTED not in stored_url:
            values["base_url"] = stored_url
        else:
            raise ConfigError(
                f"the session's endpoint {stored_url} needs credentials that are never stored: "
                "give the full URL with --base-url (or base_url in stowage.toml)"
            )
    values.update(overrides)
    # a session that compacts with its provider, moved to a wire that cannot carry the
    # provider's item: it compacts with the provider where it can and locally elsewhere
    # ("auto"), and its first turn there summarizes the items it has locally, from the log
    moved = (
        values.get("compaction") == "provider"
        and values.get("wire_api", base.wire_api) != "responses"
        and "compaction" not in overrides
    )
    if moved:
        values["compaction"] = "auto"
    settings = base.with_(**values)
    changes: dict[str, list[Any]] = {}
    for name in overrides:
        before = recordable(name, identity.fields.get(name))
        after = recordable(name, getattr(settings, name))
        if before != after and (name in identity.fields or after not in (None, [])):
            changes[name] = [before, after]
    if moved:
        changes["compaction"] = ["provider", "auto"]
    return settings, changes
