"""The compaction promises, proved against the model zoo through the public API only.

After every step (a turn naming files of random sizes, a manual compaction, an approval or a
denial, an interrupt, a restart on the same store, a change of how usage is reported) the
harness checks, from the requests the zoo gateway received and from the log: no request above
the window unless its irreducible content cannot fit; no turn stopped while it fits; no call
without its output nor output without its call; no compaction that grows history; every log
replays to the live history; every prefix break coincides with a compaction event.
"""

from __future__ import annotations

import tempfile
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import anyio
import hypothesis
import pytest
from anyio.abc import TaskStatus
from anyio.from_thread import start_blocking_portal
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule
from stowage import (
    AssistantMessage,
    ContextLengthExceeded,
    FunctionCall,
    FunctionCallOutput,
    ModelRequest,
    UserMessage,
)

from tests.zoo import (
    USAGE_MODES,
    ZOO_MEMBERS,
    UsageMode,
    Violation,
    ZooBehaviour,
    ZooHarness,
    ZooModel,
    request_orphan_calls,
    request_orphan_outputs,
    write_zoo_file,
    zoo_member,
    zoo_settings,
)

WINDOW = 6000
MAX_OUTPUT = 500


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    """One step of a generated run."""

    kind: str
    sizes: tuple[int, ...] = ()
    guarded: bool = False
    after: int = 1
    usage: UsageMode = "exact"


class Run:
    """A harness over one session ``s1`` and the workspace its turns read from."""

    def __init__(self, harness: ZooHarness, workspace: Path, *, member: str, seed: int) -> None:
        self.harness = harness
        self.workspace = workspace
        self.member = member
        self.seed = seed
        self.turn = 0

    def ask(self, sizes: tuple[int, ...], *, guarded: bool = False) -> str:
        """Write this turn's files and return the user message naming them."""
        self.turn += 1
        names = []
        for k, tokens in enumerate(sizes):
            name = f"f{self.turn}_{k}.txt"
            if self.member == "huge_output" and k == 0 and self.turn % 2 == 0:
                name, tokens = f"huge{self.turn}.txt", WINDOW * 3 // 2
            write_zoo_file(self.workspace, name, tokens=tokens, seed=self.seed)
            names.append(name)
        text = "read " + " ".join(names)
        return text + (" then call guarded" if guarded else "")

    async def step(self, step: Step) -> list[Violation]:
        h = self.harness
        match step.kind:
            case "send":
                await h.send("s1", self.ask(step.sizes, guarded=step.guarded))
            case "interrupt":
                await h.interrupt("s1", self.ask(step.sizes), after=step.after)
            case "compact":
                await h.compact("s1")
            case "approve":
                await h.decide("s1", approve=True)
            case "deny":
                await h.decide("s1", approve=False)
            case "restart":
                await h.restart()
            case "usage":
                h.set_usage("s1", step.usage)
        return await h.check("s1")


def report(found: list[Violation]) -> str:
    return "\n".join(f"{v.kind} [{v.session_id}]: {v.detail}" for v in found)


async def run_steps(root: Path, member: str, seed: int, steps: list[Step]) -> ZooHarness:
    workspace = root / "ws"
    workspace.mkdir()
    gateway = zoo_member(member, seed=seed, window=WINDOW, max_output_tokens=MAX_OUTPUT)
    settings = zoo_settings(root / "store", workspace, window=WINDOW, max_output_tokens=MAX_OUTPUT)
    async with ZooHarness(gateway, settings) as harness:
        await harness.create("s1", system="You read files and quote their tokens.")
        run = Run(harness, workspace, member=member, seed=seed)
        for n, step in enumerate(steps):
            found = await run.step(step)
            assert not found, f"after step {n} ({step}) of {member}:\n{report(found)}"
    return harness


sizes = st.lists(st.integers(min_value=200, max_value=1800), min_size=1, max_size=4).map(tuple)


class CompactionPromises(RuleBasedStateMachine):
    """One session of a zoo member drawn by Hypothesis, driven step by step.

    The harness lives in a task of a blocking portal's event loop (a thread of its own), so
    each rule is a plain call and the runtime and its session survive from one rule to the
    next; every call into the loop is bounded, and so is the teardown.
    """

    def __init__(self) -> None:
        super().__init__()
        self._tmp = tempfile.TemporaryDirectory()
        self._portal_cm = start_blocking_portal()
        self.portal = self._portal_cm.__enter__()
        self._host: Future[None] | None = None
        self._stop: anyio.Event | None = None
        self.run: Run | None = None

    def call(self, step: Step) -> None:
        assert self.run is not None
        run = self.run

        async def bounded() -> list[Violation]:
            with anyio.fail_after(30):
                return await run.step(step)

        found = self.portal.call(bounded)
        assert not found, f"after {step} of {run.member}:\n{report(found)}"

    async def _hold(
        self, harness: ZooHarness, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Enter the harness, start session s1, and keep them until told to stop."""
        self._stop = anyio.Event()
        async with harness:
            with anyio.fail_after(30):
                await harness.create("s1")
            task_status.started()
            await self._stop.wait()

    @initialize(member=st.sampled_from(ZOO_MEMBERS), seed=st.integers(0, 2**16))
    def start(self, member: str, seed: int) -> None:
        root = Path(self._tmp.name)
        workspace = root / "ws"
        workspace.mkdir()
        gateway = zoo_member(member, seed=seed, window=WINDOW, max_output_tokens=MAX_OUTPUT)
        settings = zoo_settings(
            root / "store", workspace, window=WINDOW, max_output_tokens=MAX_OUTPUT
        )
        harness = ZooHarness(gateway, settings)
        self._host, _ = self.portal.start_task(self._hold, harness)
        self.run = Run(harness, workspace, member=member, seed=seed)

    @rule(files=sizes, guarded=st.booleans())
    def send(self, files: tuple[int, ...], guarded: bool) -> None:
        self.call(Step(kind="send", sizes=files, guarded=guarded))

    @rule(files=sizes, after=st.integers(1, 3))
    def interrupt(self, files: tuple[int, ...], after: int) -> None:
        self.call(Step(kind="interrupt", sizes=files, after=after))

    @rule(kind=st.sampled_from(["compact", "approve", "deny", "restart"]))
    def act(self, kind: str) -> None:
        self.call(Step(kind=kind))

    @rule(usage=st.sampled_from(USAGE_MODES))
    def report_usage(self, usage: UsageMode) -> None:
        self.call(Step(kind="usage", usage=usage))

    def teardown(self) -> None:
        try:
            if self._host is not None and self._stop is not None:
                self.portal.call(self._stop.set)
                self._host.result(timeout=30)  # the runtime closed, or the test fails here
        except BaseException as exc:
            # cancel what is left in the loop rather than wait for it
            self._portal_cm.__exit__(type(exc), exc, exc.__traceback__)
            raise
        else:
            self._portal_cm.__exit__(None, None, None)
        finally:
            self._tmp.cleanup()


CompactionPromises.TestCase.settings = hypothesis.settings(
    max_examples=30,
    stateful_step_count=8,
    deadline=None,
    derandomize=True,
    database=None,
    # a failure is reported as found: shrinking runs of many turns would take minutes
    phases=[hypothesis.Phase.explicit, hypothesis.Phase.generate],
    suppress_health_check=[hypothesis.HealthCheck.too_slow],
)
test_random_steps_keep_every_compaction_promise = CompactionPromises.TestCase


def realistic(member: str) -> list[Step]:
    """Six turns of three files of 900-1,400 tokens, with the member's own twist."""
    plan = [Step(kind="send", sizes=(1400, 900, 1200)) for _ in range(6)]
    if member == "approval":
        plan[1] = Step(kind="send", sizes=(1000, 1300), guarded=True)
        plan.insert(2, Step(kind="approve"))
        plan[4] = Step(kind="send", sizes=(1200, 1100), guarded=True)
        plan.insert(5, Step(kind="deny"))
    if member == "interrupt":
        plan[2] = Step(kind="interrupt", sizes=(1400, 1300, 1200), after=2)
        plan.insert(4, Step(kind="restart"))
    if member == "bursty":
        plan[3] = Step(kind="send", sizes=(1000, 1100, 900, 1000))
    plan.insert(3, Step(kind="compact"))
    return plan


@pytest.mark.parametrize("member", ZOO_MEMBERS)
async def test_a_realistic_session_keeps_every_compaction_promise(
    tmp_path: Path, member: str
) -> None:
    with anyio.fail_after(60):
        harness = await run_steps(tmp_path, member, 7, realistic(member))
    assert harness.figures.turns >= 6
    assert not harness.violations


async def test_the_stateless_rereader_finishes_ten_turns_of_three_large_files(
    tmp_path: Path,
) -> None:
    """A 6,000-token window, default policy, three ~1,400-token files a turn: every turn
    answers, and history is compacted at least three times on the way."""
    with anyio.fail_after(60):
        workspace = tmp_path / "ws"
        workspace.mkdir()
        gateway = zoo_member("rereader", seed=3, window=WINDOW, max_output_tokens=MAX_OUTPUT)
        settings = zoo_settings(tmp_path / "store", workspace, window=WINDOW)
        async with ZooHarness(gateway, settings) as harness:
            await harness.create("s1")
            outcomes = []
            for turn in range(10):
                names = [f"t{turn}_{k}.txt" for k in range(3)]
                files = [write_zoo_file(workspace, n, tokens=1400, seed=3) for n in names]
                result = await harness.send("s1", "read " + " ".join(names))
                outcomes.append(None if result is None else result.stopped)
                found = await harness.check("s1")
                assert not found, report(found)
                assert result is not None and result.stopped == "answered", outcomes
                assert all(f.token in result.text for f in files)
    figures = harness.figures
    assert figures.full + figures.fallback >= 3, figures
    assert figures.stopped == 0 and gateway.refused == 0


async def test_a_compaction_while_a_call_awaits_approval_keeps_that_call_and_its_output(
    tmp_path: Path,
) -> None:
    """Compacting by hand between a call that awaits approval and its approval must leave
    the call in history with its output, and the log replayable."""
    plan = [
        Step(kind="send", sizes=(300, 400)),
        Step(kind="send", sizes=(300, 250), guarded=True),
        Step(kind="compact"),
        Step(kind="approve"),
        Step(kind="send", sizes=(350,)),
    ]
    with anyio.fail_after(30):
        harness = await run_steps(tmp_path, "approval", 11, plan)
    assert not harness.sessions["s1"].pending_approvals


def read_request(path: str, output: str) -> ModelRequest:
    call = FunctionCall(call_id="c1", name="read_file", arguments=f'{{"path": "{path}"}}')
    return ModelRequest(
        model="zoo",
        input=(
            UserMessage(text=f"read {path}"),
            call,
            FunctionCallOutput(call_id="c1", output=output),
        ),
    )


async def test_the_rereader_answers_from_a_whole_output_and_reads_a_stubbed_one_again(
    tmp_path: Path,
) -> None:
    zoo_file = write_zoo_file(tmp_path, "a.txt", tokens=300, seed=1)
    whole = (tmp_path / "a.txt").read_text()
    model = zoo_member("rereader")
    with anyio.fail_after(5):
        answered = await model.create(read_request("a.txt", whole))
        stub = "[output stored as artifact R5, 1200 chars ~300 tokens; call recall_artifact]"
        again = await model.create(read_request("a.txt", stub))
    assert answered.text == f"done a.txt:{zoo_file.token}" and not answered.calls
    assert [(c.name, c.arguments) for c in again.calls] == [("read_file", '{"path": "a.txt"}')]


async def test_the_zoo_refuses_a_request_above_its_window_stating_the_figures() -> None:
    model = ZooModel(window=1000, max_output_tokens=200)
    request = ModelRequest(model="zoo", input=(UserMessage(text="x" * 4000),))
    with anyio.fail_after(5), pytest.raises(ContextLengthExceeded) as refused:
        await model.create(request)
    assert (refused.value.tokens, refused.value.limit) == (1000, 800)
    assert model.refused == 1 and model.requests[0].refused


@pytest.mark.parametrize(
    ("usage", "reported"), [("exact", 250), ("half", 125), ("double", 500), ("zero", 0)]
)
async def test_the_zoo_reports_usage_as_its_behaviour_says(usage: UsageMode, reported: int) -> None:
    model = ZooModel(ZooBehaviour(usage=usage))
    with anyio.fail_after(5):
        response = await model.create(
            ModelRequest(model="zoo", input=(UserMessage(text="y" * 1000),))
        )
    assert response.usage is not None and response.usage.input_tokens == reported
    silent = ZooModel(ZooBehaviour(usage="none"))
    with anyio.fail_after(5):
        response = await silent.create(ModelRequest(model="zoo", input=(UserMessage(text="y"),)))
    assert response.usage is None


def test_pairing_checks_name_calls_without_outputs_and_outputs_without_calls() -> None:
    call = FunctionCall(call_id="a", name="read_file", arguments="{}")
    request = ModelRequest(
        model="zoo",
        input=(
            FunctionCallOutput(call_id="b", output="early"),
            call,
            FunctionCall(call_id="b", name="read_file", arguments="{}"),
            AssistantMessage(text="..."),
            FunctionCallOutput(call_id="c", output="lost"),
        ),
    )
    assert request_orphan_calls(request) == ["a"]
    assert request_orphan_outputs(request) == ["b", "c"]
