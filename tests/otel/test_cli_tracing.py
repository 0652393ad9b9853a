"""``STOWAGE_OTEL=1`` traces the real ``stowage`` command's sessions into whatever provider the
process set up (here a ``sitecustomize`` installing the SDK with a file exporter, as
``opentelemetry-instrument`` would); without the switch nothing is traced."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

SITECUSTOMIZE = """
import json, os
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

class FileExporter(SpanExporter):
    def export(self, spans):
        with open(os.environ["SPANS_FILE"], "a") as out:
            for span in spans:
                out.write(json.dumps({"name": span.name, "attributes": dict(span.attributes)}) + "\\n")
        return SpanExportResult.SUCCESS

provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(FileExporter()))
trace.set_tracer_provider(provider)
"""


def test_the_switch_traces_a_run_and_nothing_without_it(
    tmp_path: Path,
    cli: Callable[..., subprocess.CompletedProcess[str]],
    cli_env: dict[str, str],
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    spans_file = tmp_path / "spans.jsonl"
    cli_env["PYTHONPATH"] = str(site)
    cli_env["SPANS_FILE"] = str(spans_file)
    store = str(tmp_path / "store")
    quiet = cli("run", "--session", "t0", "--tools", "none", "--store", store, "hi", cwd=tmp_path)
    assert quiet.returncode == 0, quiet.stderr
    assert not spans_file.exists()
    cli_env["STOWAGE_OTEL"] = "1"
    traced = cli("run", "--session", "t1", "--tools", "none", "--store", store,
                 "plum-777 please", cwd=tmp_path)  # fmt: skip
    assert traced.returncode == 0, traced.stderr
    spans = [json.loads(line) for line in spans_file.read_text().splitlines()]
    names = [s["name"] for s in spans]
    assert "turn" in names and "chat scripted" in names, names
    (model_call,) = [s for s in spans if s["name"] == "chat scripted"]
    assert model_call["attributes"]["gen_ai.request.model"] == "scripted"
    assert model_call["attributes"]["gen_ai.usage.input_tokens"] > 0
    assert "plum-777" not in json.dumps(spans)  # no message text on a span by default
