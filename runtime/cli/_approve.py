"""``stowage approve ID CALL_ID`` and ``stowage deny ID CALL_ID [--reason TEXT]``.

A turn that reached a tool marked as needing approval stopped with its calls durable and an
``approval`` request in the log. The answer goes through a resumed session like any other
input, in this process, as the session: its model, endpoint and settings, and the tools it
recorded (``--tools-from``, ``--mcp``, ``--mcp-url`` need not be typed again; typed, they are
an override, recorded). An approved call runs here, a denied one gets a "denied" output, and
the turn goes on. A call whose tool this process cannot offer is refused before it is
approved, so an approval is never spent on an "unknown tool" error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stowage.core import FunctionCall, LogStore

    from ._run_options import SessionSetup

__all__ = ["approval_main"]


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
