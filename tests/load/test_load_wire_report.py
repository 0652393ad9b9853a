"""Where the load run's "no orphan tool call sent" verdict comes from."""

from __future__ import annotations

import anyio
import pytest
from stowage.core._errors import ModelConnectionError
from stowage.load._endpoint import WireCheck
from stowage.load._engine import wire_report
from stowage.testing import FakeOpenAIServer

NOWHERE = "http://127.0.0.1:9/v1"  # the discard port: nothing answers HTTP there


async def test_an_independent_server_without_stats_falls_back_to_the_client_check() -> None:
    with anyio.fail_after(10):
        client = WireCheck(requests=7, rounds=5, summaries=2, orphan_requests=0)
        report = await wire_report(NOWHERE, client, independent=True)
        assert report["checked_by"] == "client"
        assert report["requests"] == 7 and report["orphan_requests"] == 0


async def test_our_own_fake_server_must_answer_for_its_stats() -> None:
    with anyio.fail_after(10):
        with pytest.raises(ModelConnectionError):
            await wire_report(NOWHERE, WireCheck(), independent=False)


async def test_a_fake_server_reports_what_it_saw_itself() -> None:
    with anyio.fail_after(15):
        async with FakeOpenAIServer() as server:
            report = await wire_report(server.base_url, WireCheck(requests=99), independent=True)
        assert report["checked_by"] == "server"
        assert report["requests"] == 0  # the server's count, not the client's 99


async def test_in_process_runs_use_the_client_check() -> None:
    with anyio.fail_after(5):
        report = await wire_report(None, WireCheck(orphan_requests=1), independent=False)
        assert report["checked_by"] == "client" and report["orphan_requests"] == 1
