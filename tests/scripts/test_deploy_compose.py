"""scripts/deploy/compose.yaml is a valid compose file whose commands stowage accepts: checked
by ``docker compose config`` where Docker has the compose plugin, and read as YAML either way
(with its ``<<`` merges), each service's command parsed by the parser it is meant for."""

from __future__ import annotations

import argparse
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from stowage.cli._main import build_parser
from stowage.testing.fake_server import add_arguments

COMPOSE = Path(__file__).resolve().parents[2] / "scripts" / "deploy" / "compose.yaml"


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return loaded


def has_compose_plugin() -> bool:
    docker = shutil.which("docker")
    if docker is None:
        return False
    done = subprocess.run(
        [docker, "compose", "version"], capture_output=True, timeout=30, check=False
    )
    return done.returncode == 0


@pytest.mark.skipif(not has_compose_plugin(), reason="no docker compose plugin here")
def test_docker_compose_config_accepts_the_file() -> None:
    done = subprocess.run(
        ["docker", "compose", "-f", str(COMPOSE), "config", "--quiet"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_the_services_and_their_wiring() -> None:
    services = compose()["services"]
    assert set(services) >= {"postgres", "fake-openai", "worker", "send"}
    worker = services["worker"]
    # the merge of x-stowage gave every stowage service the image and the password's variable
    for name in ("fake-openai", "worker", "send"):
        assert services[name]["image"] == "stowage-runtime:dev"
        assert "PGPASSWORD" in services[name]["environment"]
    assert worker["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert worker["stop_signal"] == "SIGTERM"
    grace = next(float(a.split("=", 1)[1]) for a in worker["command"] if a.startswith("--grace="))
    assert float(worker["stop_grace_period"].removesuffix("s")) > grace  # drains in time
    assert "pgdata" in compose()["volumes"]


def test_every_command_is_one_stowage_accepts() -> None:
    services = compose()["services"]
    parsed = build_parser().parse_args(services["worker"]["command"])
    assert parsed.handler.__name__ == "worker_main"
    assert parsed.store == "postgresql://stowage@postgres:5432/stowage"
    assert parsed.base_url == "http://fake-openai:8000/v1"
    assert parsed.concurrency == 32
    # the sender: its entrypoint after "stowage", then a message
    send = services["send"]
    sent = build_parser().parse_args([*send["entrypoint"][1:], "s1", "hello", "--create"])
    assert sent.handler.__name__ == "send_main"
    assert sent.store == "postgresql://stowage@postgres:5432/stowage"
    # the fake server's own parser, as ``python -m stowage.testing.fake_server`` builds it
    fake = argparse.ArgumentParser()
    add_arguments(fake)
    served = fake.parse_args(services["fake-openai"]["command"])
    assert (served.host, served.port) == ("0.0.0.0", 8000)
