"""``stowage approve ID CALL_ID`` and ``stowage deny ID CALL_ID [--reason TEXT]``.

A turn that reached a tool marked as needing approval stopped with its calls durable and an
``approval`` request in the log. The answer goes through a resumed session like any other
input, in this process: an approved call runs here (with the tools ``--tools-from`` names),
a denied one gets a "denied" output, and the turn goes on with the session's own model.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ._parsing import fill_later

__all__ = ["add_approval_commands", "approval_main"]

_STORE_ENV = "STOWAGE_STORE"
_DEFAULT_STORE = ".stowage"


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
    from ._mcp_options import add_mcp_options
    from ._run_options import add_model_options

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


async def approval_main(args: argparse.Namespace) -> int:
    """Answer the approval and run the rest of the turn; prints its answer (or which calls
    still wait). Returns 0.

    Raises ``ApprovalError`` (no such call awaits approval: usage, exit 2), and what
    ``Runtime.resume`` raises; the CLI turns them into its exit statuses.
    """
    from stowage.core import validate_session_id
    from stowage.facade import Runtime
    from stowage.storage import open_store

    from ._mcp_options import mcp_servers_from
    from ._run_options import continued_settings, tools_from_spec

    session_id = validate_session_id(args.session)
    servers = mcp_servers_from(args)  # before anything opens: a missing extra is a usage error
    spec = args.store or os.environ.get(_STORE_ENV) or _DEFAULT_STORE
    store = open_store(spec, durability=getattr(args, "durability", None) or "fsync")
    try:
        store_dir = Path(_DEFAULT_STORE) if "://" in spec else Path(spec)
        settings, overrides, _ = await continued_settings(args, store, session_id, store=store_dir)
        if args.tools_from:
            sys.path.insert(0, os.getcwd())  # like "python -m": the user's modules import
        tools = tools_from_spec(args.tools_from) if args.tools_from else None
    except BaseException:
        await store.aclose()
        raise
    async with Runtime(settings, store=store, tools=tools, overrides=overrides, mcp=servers) as rt:
        session = await rt.resume(session_id)
        if args.command == "approve":
            result = await session.approve(args.call_id)
        else:
            result = await session.deny(args.call_id, reason=args.reason)
        if result.stopped == "pending_approval":
            waiting = ", ".join(c.call_id for c in session.pending_approvals)
            print(f"stowage: still awaiting approval: {waiting}", file=sys.stderr)
        else:
            sys.stdout.write(result.text + "\n")
    return 0
