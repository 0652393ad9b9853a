"""``stowage load``: many sessions, many turns, compaction under concurrency, then proof."""

from __future__ import annotations

import argparse
import gc
import resource
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, MutableMapping
from contextlib import AsyncExitStack, contextmanager
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

import anyio
import orjson
import psutil
import pydantic
import structlog
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from stowage.core import (
    CompactionFailed,
    CompactionLanded,
    CompactionWaited,
    ConfigError,
    Event,
    HistoryCompacted,
    Microcompacted,
    ModelConnectionError,
    ModelError,
    ModelGateway,
    RoundCommitted,
    RoundStarted,
    RuntimeLimits,
    SessionError,
    SessionFailedEvent,
    SessionHibernated,
    SessionRehydrated,
    Settings,
    add_limit_options,
    limits_from_args,
)
from stowage.facade import GC_YOUNG_THRESHOLD, Runtime, tune_gc
from stowage.model import ScriptedModel, make_gateway
from stowage.policy import CacheFigures, PrefixCache, session_cache_figures
from stowage.tools import FunctionTool, ToolRegistry

from ._checks import SessionVerdict, check_session
from ._endpoint import (
    FaultyGateway,
    MeteredGateway,
    WireCheck,
    fake_server_process,
    fetch_server_stats,
    parse_rates,
)

__all__ = ["LoadConfig", "add_load_arguments", "config_from_args", "main_load", "run_load"]

_SYSTEM = "You are a careful agent. Fetch what you need with the tools, then answer briefly."


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadConfig:
    """One load run."""

    sessions: int = 50
    turns: int = 8
    latency: float = 0.0
    in_process: bool = False
    base_url: str | None = None
    faults: str = ""
    slow_delay: float = 1.0
    retry_after: float = 0.2
    store: Path | None = None
    durability: Literal["fsync", "syncfs", "none"] = "fsync"
    wire_api: Literal["chat", "responses", "anthropic"] = "chat"
    stream: bool = True
    tool_kb: float = 2.0
    tool_rounds: int = 2
    #: "watermarks" (the default policy, on ``context_window``) or "threshold" (the seed's
    #: fixed rule at ``compact_threshold``)
    policy: Literal["watermarks", "threshold"] = "watermarks"
    context_window: int = 5000
    background_compaction: bool = True
    compact_threshold: int = 3000
    #: the runtime's limits (``--max-model-calls``, ``--idle-timeout``, ...)
    limits: RuntimeLimits = field(default_factory=RuntimeLimits)
    seed: int | None = 1
    #: young-generation threshold of Python's cyclic GC during the run, set with ``tune_gc``
    #: (None: leave the process's thresholds)
    gc_threshold: int | None = GC_YOUNG_THRESHOLD
    progress: bool = True
    json_path: Path | None = None
    #: turns that may fail (a model error, or stopped without an answer) with the verdict ok
    allow_failed_turns: int = 0

    def __post_init__(self) -> None:
        if self.sessions < 1 or self.turns < 1:
            raise ConfigError("--sessions and --turns must be >= 1")
        if self.tool_kb <= 0:
            raise ConfigError("--tool-kb must be > 0")
        if self.allow_failed_turns < 0:
            raise ConfigError("--allow-failed-turns must be >= 0")
        if self.policy not in ("watermarks", "threshold"):
            raise ConfigError(f"--policy must be 'watermarks' or 'threshold', got {self.policy!r}")


class _NoArguments(pydantic.BaseModel):
    pass


def synthetic_tools(tool_kb: float) -> ToolRegistry:
    """Two argument-less tools returning ``tool_kb`` KB each, so history grows every turn."""
    size = max(1, int(tool_kb * 1024))
    filler = ("lorem ipsum dolor sit amet " * (size // 27 + 1))[:size]
    served = 0

    def make(name: str) -> FunctionTool[_NoArguments]:
        async def fetch(args: _NoArguments) -> str:
            nonlocal served
            served += 1
            head = f"{name} #{served}: "
            return head + filler[len(head) :]

        return FunctionTool(
            name=name, description=f"Fetch the next {name}.", args_model=_NoArguments, fn=fetch
        )

    return ToolRegistry([make("fetch_blob"), make("fetch_log")])


@dataclass(eq=False)
class _Meter:
    """Subscribes to every event of the run; keeps only what the figures need."""

    def __post_init__(self) -> None:
        self.started: dict[tuple[str, int], float] = {}
        self.round_seconds: list[float] = []
        self.acknowledged: defaultdict[str, list[int]] = defaultdict(list)
        self.committed_at: dict[str, tuple[int, float]] = {}
        self.commit_to_compaction: list[float] = []
        self.compactions: defaultdict[str, int] = defaultdict(int)
        self.compacted = 0
        self.compaction_failures = 0
        self.failed_sessions: list[str] = []
        self.hibernated = 0
        self.rehydrated = 0
        #: per applied compaction: (kind, fraction of usable when applied, hard mark, waited)
        self.landed: list[tuple[str, float | None, float, float]] = []
        #: seconds rounds were held back for compaction, one entry per wait
        self.round_waits: list[float] = []
        self.microcompactions = 0

    def __call__(self, event: Event) -> None:
        if isinstance(event, RoundStarted):
            self.started[(event.session_id, event.round)] = time.perf_counter()
        elif isinstance(event, RoundCommitted):
            now = time.perf_counter()
            began = self.started.pop((event.session_id, event.round), None)
            if began is not None:
                self.round_seconds.append(now - began)
            self.acknowledged[event.session_id].append(event.round)
            self.committed_at[event.session_id] = (event.round, now)
        elif isinstance(event, HistoryCompacted):
            self.compactions[event.session_id] += 1
            self.compacted += 1
            committed = self.committed_at.get(event.session_id)
            if committed is not None and committed[0] == event.round:
                self.commit_to_compaction.append(time.perf_counter() - committed[1])
        elif isinstance(event, CompactionFailed):
            self.compaction_failures += 1
        elif isinstance(event, CompactionLanded):
            self.landed.append((event.kind, event.fraction, event.hard, event.waited))
        elif isinstance(event, Microcompacted):
            self.microcompactions += 1
        elif isinstance(event, CompactionWaited):
            self.round_waits.append(event.seconds)
        elif isinstance(event, SessionFailedEvent):
            self.failed_sessions.append(event.session_id)
        elif isinstance(event, SessionHibernated):
            self.hibernated += 1
        elif isinstance(event, SessionRehydrated):
            self.rehydrated += 1


def _percentiles(values: list[float], scale: float = 1000.0) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p95": None, "p99": None, "max": None}
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * scale, 2)

    return {"p50": at(0.50), "p95": at(0.95), "p99": at(0.99), "max": at(1.0)}


def _rss_mb() -> float:
    return float(psutil.Process().memory_info().rss) / 2**20


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


@contextmanager
def _gc_meter(threshold: int | None) -> Iterator[dict[str, float]]:
    """Time spent in the cyclic GC, by generation, while the block runs."""
    spent = {"gen0": 0.0, "gen1": 0.0, "gen2": 0.0, "collections": 0.0}
    started = 0.0

    def on_gc(phase: str, info: dict[str, int]) -> None:
        nonlocal started
        if phase == "start":
            started = time.perf_counter()
        else:
            spent[f"gen{info['generation']}"] += time.perf_counter() - started
            spent["collections"] += 1

    previous = tune_gc(threshold) if threshold is not None else gc.get_threshold()
    gc.callbacks.append(on_gc)
    try:
        yield spent
    finally:
        gc.callbacks.remove(on_gc)
        gc.set_threshold(*previous)


# Log events the injected faults cause by design: a load run counts them in its report instead of
# printing one line each (hundreds of them would bury the report and tear the progress bar).
_EXPECTED_UNDER_FAULTS = frozenset(
    {
        "model_call_retry",
        "summary_call_retry",
        "turn_failed",
        "compaction_failed",
        "compaction_unavailable",
        "compaction_fallback",
    }
)


@contextmanager
def _counted_fault_logs(active: bool) -> Iterator[Counter[str]]:
    """While active, drop the log events of ``_EXPECTED_UNDER_FAULTS`` and count them."""
    counts: Counter[str] = Counter()
    if not active:
        yield counts
        return
    saved = structlog.get_config()

    def count_and_drop(
        logger: Any, method: str, event_dict: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        name = str(event_dict.get("event", ""))
        if name in _EXPECTED_UNDER_FAULTS:
            counts[name] += 1
            raise structlog.DropEvent
        return event_dict

    structlog.configure(processors=[count_and_drop, *saved["processors"]])
    try:
        yield counts
    finally:
        structlog.configure(processors=saved["processors"])


@contextmanager
def _progress(config: LoadConfig, console: Console) -> Iterator[Callable[[int, int], None]]:
    if not config.progress:
        yield lambda turns, compactions: None
        return
    columns = (
        TextColumn("[bold]load"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("turns · {task.fields[compactions]} compactions"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, refresh_per_second=4) as progress:
        task = progress.add_task("turns", total=config.sessions * config.turns, compactions=0)

        def advance(turns: int, compactions: int) -> None:
            progress.update(task, advance=turns, compactions=compactions)

        yield advance


async def run_load(config: LoadConfig, *, console: Console | None = None) -> dict[str, Any]:
    """Run the load, check every session; the report. Raises ``ConfigError``."""

    console = console or Console(stderr=True)
    async with AsyncExitStack() as stack:
        store = config.store
        if store is None:
            store = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="stowage-load-")))
        base_url = config.base_url
        if not config.in_process and base_url is None:
            base_url = await stack.enter_async_context(
                fake_server_process(
                    latency=config.latency,
                    tool_rounds=config.tool_rounds,
                    faults=config.faults,
                    slow_delay=config.slow_delay,
                    retry_after=config.retry_after,
                    seed=config.seed,
                )
            )
        settings = Settings(
            model="scripted" if config.in_process else "load-model",
            base_url=base_url,
            api_key=None if config.in_process else "fake-key",
            wire_api=config.wire_api,
            stream=config.stream,
            store=store,
            durability=config.durability,
            tools="none",
            system=_SYSTEM,
            compact_threshold=config.compact_threshold if config.policy == "threshold" else None,
            context_window=config.context_window if config.policy == "watermarks" else None,
            background_compaction=config.background_compaction,
        )
        model: ModelGateway
        if config.in_process:
            model = ScriptedModel(
                tool_rounds=config.tool_rounds,
                latency=config.latency,
                keep_requests=False,
                prefix_cache=PrefixCache(),
            )
            rates = parse_rates(config.faults)
        else:
            # the client checks every request too: an independent server (--base-url) has no
            # stats endpoint to ask, and cannot inject the faults asked for, so we do
            model = make_gateway(settings)
            rates = parse_rates(config.faults) if config.base_url is not None else {}
        faulty = FaultyGateway(
            model,
            rates=rates,
            slow_delay=config.slow_delay,
            retry_after=config.retry_after,
            seed=config.seed,
        )
        gateway = MeteredGateway(faulty)
        meter = _Meter()
        runtime = Runtime(
            settings, gateway=gateway, tools=synthetic_tools(config.tool_kb), limits=config.limits
        )
        runtime.subscribe(meter)
        ids = [f"load-{n:05d}" for n in range(config.sessions)]
        acknowledged_turns: dict[str, int] = dict.fromkeys(ids, 0)
        turn_errors: defaultdict[str, int] = defaultdict(int)
        stopped: defaultdict[str, int] = defaultdict(int)  # turns ended without an answer
        rss_before = _rss_mb()
        async with runtime as rt:
            cpu_started, wall_started = time.process_time(), time.perf_counter()
            with (
                _gc_meter(config.gc_threshold) as gc_spent,
                _counted_fault_logs(bool(config.faults)) as fault_logs,
                _progress(config, console) as advance,
            ):

                async def drive(session_id: str, index: int) -> None:
                    for turn in range(config.turns):
                        text = f"Task {turn} of agent {index}: fetch the blob and the log, report."
                        try:
                            result = await rt.send(session_id, text)
                        except ModelError as exc:  # the turn failed; nothing of it was written
                            turn_errors[type(exc).__name__] += 1
                            continue
                        except SessionError:
                            return  # counted from the SessionFailed event
                        if result.stopped == "answered":
                            acknowledged_turns[session_id] += 1  # a "finished" record is due
                        else:
                            stopped[result.stopped] += 1
                        advance(1, meter.compacted)

                async with anyio.create_task_group() as tg:
                    for index, session_id in enumerate(ids):
                        tg.start_soon(drive, session_id, index)
            wall = time.perf_counter() - wall_started
            cpu = time.process_time() - cpu_started
            live_sessions = len(rt.sessions)
            rss_live = _rss_mb()
            verdicts, cache = await _verify_all(rt, ids, meter, acknowledged_turns)
        wire = await wire_report(
            None if config.in_process else base_url,
            faulty.check,
            independent=config.base_url is not None,
        )
    return _report(
        config,
        meter=meter,
        gateway=gateway,
        verdicts=verdicts,
        wire=wire,
        wall=wall,
        cpu=cpu,
        turn_errors=dict(turn_errors),
        turns_stopped=dict(stopped),
        fault_logs=dict(fault_logs),
        gc_spent=gc_spent,
        acknowledged_turns=sum(acknowledged_turns.values()),
        live_sessions=live_sessions,
        rss_before=rss_before,
        rss_live=rss_live,
        cache=cache,
    )


async def wire_report(
    base_url: str | None, client: WireCheck, *, independent: bool
) -> dict[str, Any]:
    """What the endpoint saw: the fake server's count, else what the client checked."""
    if base_url is None:
        return client.as_dict() | {"checked_by": "client"}
    try:
        return await fetch_server_stats(base_url) | {"checked_by": "server"}
    except ModelConnectionError:
        if not independent:
            raise
        return client.as_dict() | {"checked_by": "client"}


async def _verify_all(
    rt: Any, ids: list[str], meter: _Meter, acknowledged_turns: dict[str, int]
) -> tuple[list[SessionVerdict], CacheFigures]:
    """Every session checked, and the prompt cache figures of all of them summed."""
    verdicts: list[SessionVerdict] = []
    cache = CacheFigures()
    pending = iter(ids)
    running = rt.sessions  # one copy, not one per session

    async def worker() -> None:
        for session_id in pending:
            if session_id in meter.failed_sessions:
                continue
            # a hibernated session is woken: its live history is then the rehydrated one
            session = running.get(session_id) or await rt.open(session_id)
            live = session.history
            full = await rt.store.read(session_id)
            tail = await rt.store.read_tail(session_id)
            nonlocal cache
            cache = cache + session_cache_figures(full.records)
            verdicts.append(
                check_session(
                    session_id,
                    records=full.records,
                    tail_records=tail.records,
                    live=live,
                    acknowledged_rounds=meter.acknowledged.get(session_id, ()),
                    acknowledged_turns=acknowledged_turns[session_id],
                )
            )

    async with anyio.create_task_group() as tg:
        for _ in range(16):
            tg.start_soon(worker)
    return verdicts, cache


def _report(
    config: LoadConfig,
    *,
    meter: _Meter,
    gateway: MeteredGateway,
    verdicts: list[SessionVerdict],
    wire: dict[str, Any],
    wall: float,
    cpu: float,
    turn_errors: dict[str, int],
    turns_stopped: dict[str, int],
    fault_logs: dict[str, int],
    gc_spent: dict[str, float],
    acknowledged_turns: int,
    live_sessions: int,
    rss_before: float,
    rss_live: float,
    cache: CacheFigures | None = None,
) -> dict[str, Any]:
    rounds = sum(len(r) for r in meter.acknowledged.values())
    compactions = [meter.compactions.get(v.session_id, 0) for v in verdicts]
    bad = [v for v in verdicts if not v.ok]
    failed_turns = sum(turn_errors.values()) + sum(turns_stopped.values())
    checks = {
        "log_replays_to_live_history": not any("replay" in p for v in bad for p in v.problems),
        "acknowledged_rounds_in_log": not any("acknowledged" in p for v in bad for p in v.problems),
        "no_orphan_tool_call_sent": wire.get("orphan_requests", 1) == 0,
        "no_session_failed": not meter.failed_sessions,
        "every_session_checked": len(verdicts) == config.sessions,
        "failed_turns_within_allowance": failed_turns <= config.allow_failed_turns,
    }
    # the limits at the top level of the report's config, where they were before they were one
    figures = {**asdict(config), **asdict(config.limits)}
    del figures["limits"]
    config_dict = {k: (str(v) if isinstance(v, Path) else v) for k, v in figures.items()}
    return {
        "config": config_dict,
        "sessions": config.sessions,
        "turns_answered": acknowledged_turns,
        "turn_errors": turn_errors,
        "turns_stopped": turns_stopped,
        "turns_failed": failed_turns,
        "turns_failed_allowed": config.allow_failed_turns,
        "rounds": rounds,
        "requests": wire.get("requests"),
        "summary_requests": wire.get("summaries"),
        "summary_cached_share": _summary_cached_share(wire),
        "faults_injected": wire.get("faults"),
        "fault_log_events": fault_logs,
        "requests_checked_by": wire.get("checked_by"),
        "compactions": sum(compactions),
        "compactions_per_session": {
            "min": min(compactions, default=0),
            "mean": round(sum(compactions) / max(1, len(compactions)), 2),
            "max": max(compactions, default=0),
        },
        "compaction_failures": meter.compaction_failures,
        "wall_seconds": round(wall, 3),
        "throughput_rounds_per_s": round(rounds / wall, 1) if wall > 0 else None,
        "cpu_seconds": round(cpu, 3),
        "cpu_ms_per_round": round(cpu * 1000 / rounds, 3) if rounds else None,
        "gc_seconds": {k: round(v, 3) for k, v in gc_spent.items()},
        "round_latency_ms": _percentiles(meter.round_seconds),
        "compaction_latency_ms": _percentiles(gateway.summary_seconds),
        # from a session's last committed round to its compaction being applied (the next
        # round's start, or the next turn's): no round waits for it (see below)
        "commit_to_compaction_ms": _percentiles(meter.commit_to_compaction),
        **_landing(meter, rounds),
        **_cache_report(cache or CacheFigures()),
        "hibernated": meter.hibernated,
        "rehydrated": meter.rehydrated,
        "live_sessions_at_end": live_sessions,
        "rss_growth_per_live_session_kb": round((rss_live - rss_before) * 1024 / live_sessions, 1)
        if live_sessions
        else None,
        "peak_rss_mb": round(_peak_rss_mb(), 1),
        "checks": checks,
        "problems": [f"{v.session_id}: {p}" for v in bad[:20] for p in v.problems]
        + [f"{sid}: session failed" for sid in meter.failed_sessions[:20]]
        + [f"orphan call in request: {e}" for e in wire.get("orphan_examples", [])[:5]]
        + (
            [
                f"{failed_turns} turns failed ({turn_errors or ''}{turns_stopped or ''}), "
                f"more than --allow-failed-turns {config.allow_failed_turns}"
            ]
            if failed_turns > config.allow_failed_turns
            else []
        ),
        "ok": all(checks.values()),
    }


def _landing(meter: _Meter, rounds: int) -> dict[str, Any]:
    """Where compactions landed against the marks, and how long rounds waited for them."""
    full = [(f, hard) for kind, f, hard, _ in meter.landed if kind == "full" and f is not None]
    below = sum(f < hard for f, hard in full)
    fractions = [f for f, _ in full]
    waits = [w for w in meter.round_waits if w > 0]
    return {
        "microcompactions": meter.microcompactions,
        "full_compactions_applied": len(full),
        "full_compactions_below_hard_mark": below,
        "full_compactions_below_hard_mark_share": round(below / len(full), 3) if full else None,
        "compaction_applied_at_fraction": _percentiles(fractions, scale=1.0),
        "rounds_waiting_on_compaction": len(waits),
        # over every round: a round that did not wait waited 0
        "round_wait_on_compaction_ms": _percentiles(waits + [0.0] * max(0, rounds - len(waits))),
    }


def _summary_cached_share(wire: dict[str, Any]) -> float | None:
    """The share of summary input the prefix cache served (None: nobody counted)."""
    total = wire.get("summary_input_tokens")
    return round(wire.get("summary_cached_tokens", 0) / total, 3) if total else None


def _cache_report(cache: CacheFigures) -> dict[str, Any]:
    """The provider's prompt cache over every round request of the run."""
    return {
        "input_tokens": cache.input_tokens,
        "cached_input_tokens": cache.cached_tokens,
        "uncached_input_tokens": cache.uncached_tokens,
        "prefix_reuse": round(cache.reuse, 3),
        "prefix_breaks": cache.breaks,
        "cached_tokens_reported": cache.reported,
    }


def print_report(report: dict[str, Any], console: Console) -> None:
    """The report as a table, then the verdict."""
    table = Table(title=f"stowage load: {report['sessions']} sessions")
    table.add_column("figure")
    table.add_column("value", justify="right")
    skip = {"config", "checks", "problems", "ok"}
    for key, value in report.items():
        if key not in skip:
            shown = orjson.dumps(value).decode() if isinstance(value, dict) else str(value)
            table.add_row(key.replace("_", " "), shown)
    for key, value in report["checks"].items():
        table.add_row(f"check: {key.replace('_', ' ')}", "ok" if value else "[red]FAILED[/]")
    console.print(table)
    for problem in report["problems"]:
        console.print(f"[red]problem[/] {problem}")
    console.print("[bold green]verdict: ok[/]" if report["ok"] else "[bold red]verdict: FAILED[/]")


def add_load_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``stowage load`` and ``scripts/load_compaction.py``."""
    defaults = LoadConfig()
    add = parser.add_argument
    add("--sessions", type=int, default=defaults.sessions, help="concurrent sessions")
    add("--turns", type=int, default=defaults.turns, help="turns per session")
    add("--latency", type=float, default=0.0, help="seconds the model takes per request")
    add("--in-process", action="store_true", help="the scripted model in process, no server")
    add("--base-url", default=None, help="an already running OpenAI-compatible server")
    add("--faults", default="", help="random faults per request, e.g. 429:0.05,500:0.02,slow:0.01")
    add("--slow-delay", type=float, default=defaults.slow_delay, help="seconds of a slow fault")
    add("--retry-after", type=float, default=defaults.retry_after, help="Retry-After of a 429")
    add("--store", type=Path, default=None, help="log directory (default: a temporary one)")
    add("--durability", choices=["fsync", "syncfs", "none"], default="fsync")
    add("--wire-api", choices=["chat", "responses", "anthropic"], default="chat")
    add("--no-stream", action="store_true", help="ask for whole responses")
    add("--tool-kb", type=float, default=defaults.tool_kb, help="KB of every tool output")
    add("--tool-rounds", type=int, default=defaults.tool_rounds, help="tool rounds per turn")
    add(
        "--policy",
        choices=["watermarks", "threshold"],
        default=defaults.policy,
        help="the watermark policy on --context-window (default), or a fixed token threshold",
    )
    add(
        "--context-window",
        type=int,
        default=defaults.context_window,
        help="the model window the watermark policy works in",
    )
    add(
        "--no-background-compaction",
        action="store_true",
        help="wait for each plan at the compaction mark instead of planning in the background",
    )
    add(
        "--compact-threshold",
        type=int,
        default=defaults.compact_threshold,
        help="the fixed threshold of --policy threshold",
    )
    add_limit_options(parser, defaults.limits)
    add("--seed", type=int, default=defaults.seed, help="seed of the injected faults")
    add(
        "--gc-threshold",
        type=int,
        default=defaults.gc_threshold,
        help=(
            "young-generation GC threshold during the run, with the middle generation "
            "collected 10 times less often (stowage.tune_gc; 0: leave Python's thresholds)"
        ),
    )
    add(
        "--allow-failed-turns",
        type=int,
        default=0,
        metavar="N",
        help="turns that may fail (model errors, stopped turns) with the verdict still ok",
    )
    add("--no-progress", action="store_true", help="no progress bar")
    add("--json", type=Path, default=None, dest="json_path", help="write the report here")


def config_from_args(args: argparse.Namespace) -> LoadConfig:
    """A ``LoadConfig`` from parsed options. Raises ``ConfigError`` for bad values."""
    parse_rates(args.faults)  # fail before anything starts
    # the options named as the fields, then those said another way (``--no-stream``) or whole
    given = {f.name: getattr(args, f.name) for f in fields(LoadConfig) if f.name in args}
    given |= {
        "stream": not args.no_stream,
        "background_compaction": not args.no_background_compaction,
        "progress": not args.no_progress,
        "gc_threshold": args.gc_threshold or None,
        "limits": limits_from_args(RuntimeLimits, args),
    }
    return LoadConfig(**given)


async def main_load(args: argparse.Namespace) -> int:
    """Run ``stowage load``: 0 when every check held, 1 otherwise. Raises ``ConfigError``."""
    config = config_from_args(args)
    console = Console(stderr=True)
    report = await run_load(config, console=console)
    print_report(report, Console())
    if config.json_path is not None:
        config.json_path.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2) + b"\n")
    return 0 if report["ok"] else 1
