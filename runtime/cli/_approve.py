"""``stowage approve ID CALL_ID`` and ``stowage deny ID CALL_ID [--reason TEXT]``."""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ._parsing import fill_later

if TYPE_CHECKING:
    from stowage.core import FunctionCall, LogStore

    from ._run_options import SessionSetup

__all__ = ["add_approval_commands", "approval_main"]


def add_approval_commands(
    sub: Any, common: Callable[[argparse.ArgumentParser], None] | None = None
) -> None:
    """Add ``approve`` and ``deny`` to the subcommands ``sub``; ``common`` adds the options
    every command shares (``--store``, logging)."""
    for name, text in (
        ("approve", "approve call CALL_ID of session ID: it runs and the turn goes on"),
        ("deny", "deny call CALL_ID of session ID: it gets a denied output and the turn goes on"),
    ):
        parser = sub.add_parser(name, help=text)
        # the options are added when the command is used (see ``_parsing``)
        fill_later(parser, functools.partial(_options, deny=name == "deny", common=common))


def _options(
    parser: argparse.ArgumentParser,
    *,
    deny: bool,
    common: Callable[[argparse.ArgumentParser], None] | None,
) -> None:
    from ._run_options import add_mcp_options, add_model_options

    parser.add_argument("session", help="session id (see 'stowage list')")
    parser.add_argument("call_id", help="the call's id (see 'stowage show ID')")
    if deny:
        parser.add_argument("--reason", default=None, help="why: the model reads it")
    # the turn goes on: the session's model and tools options, as for resume
    add_model_options(parser, system_help=argparse.SUPPRESS)
    add_mcp_options(parser)
    if common is not None:
        common(parser)
    else:
        parser.add_argument("--store", default=None)
        parser.add_argument("--log-format", choices=["console", "json"], default="console")
        parser.add_argument("--log-level", default="warning")


def _check_tool_offered(
    session_id: str, pending: Sequence[FunctionCall], call_id: str, offered: set[str]
) -> None:
    """Raises ``ConfigError`` when call ``call_id`` of ``pending`` is for a tool that is not
    among ``offered``: approving it would only give the model an "unknown tool" error."""
    from stowage.core import ConfigError

    for call in pending:
        if call.call_id == call_id and call.name not in offered:
            raise ConfigError(
                f"call {call_id} of session {session_id} is for tool {call.name!r}, which this "
                f"process does not offer (it has: {', '.join(sorted(offered)) or 'none'}); name "
                "the tools that define it with --tools-from MODULE:NAME (or --mcp); nothing "
                "was approved"
            )


async def _check_before_starting(
    store: LogStore, session_id: str, call_id: str, setup: SessionSetup
) -> None:
    """``_check_tool_offered`` against the log, before the runtime starts: a refused approval writes
    nothing, not even the overrides typed with it."""
    from stowage.core import replay
    from stowage.tools import workspace_tools

    if setup.servers:
        return
    settings = setup.settings
    if setup.tools is not None:
        offered = set(setup.tools.names())
    elif settings.tools == "workspace":
        offered = set(workspace_tools(settings.workspace, settings=settings).names())
    else:
        offered = set()
    read = await store.read(session_id, repair=False)
    pending = replay(session_id, read.records).awaiting_approval
    _check_tool_offered(session_id, pending, call_id, offered)


async def approval_main(args: argparse.Namespace) -> int:
    """Answer the approval and run the rest of the turn, as the session; prints its answer (or which
    calls still wait). Raises ``ApprovalError`` (no such call awaits approval: usage, exit 2),
    ``ConfigError`` (the call's tool is not offered here: nothing is approved), and what
    ``Runtime.resume`` raises; the CLI turns them into its exit statuses."""
    from stowage.core import validate_session_id

    from ._run_options import as_the_session, mcp_servers_from, say_opening
    from ._store_args import open_cli_store, store_fields

    session_id = validate_session_id(args.session)
    mcp_servers_from(args)  # before anything opens: a missing extra is a usage error
    store = open_cli_store(args)
    setup = await as_the_session(args, store, session_id, **store_fields(args))
    if args.command == "approve":
        try:
            await _check_before_starting(store, session_id, args.call_id, setup)
        except BaseException:
            await store.aclose()
            raise
    async with setup.runtime(store) as rt:
        rt.subscribe(say_opening)
        session = await rt.resume(session_id)
        if args.command == "approve":
            offered = set(rt.tools.names())
            _check_tool_offered(session_id, session.pending_approvals, args.call_id, offered)
            result = await session.approve(args.call_id)
        else:
            result = await session.deny(args.call_id, reason=args.reason)
        if result.stopped == "pending_approval":
            from ._store_args import store_label
            from ._turns import say_pending

            waiting = ", ".join(c.call_id for c in session.pending_approvals)
            print(f"stowage: still awaiting approval: {waiting}", file=sys.stderr)
            say_pending(session, store_label(args))
        else:
            sys.stdout.write(result.text + "\n")
    return 0
