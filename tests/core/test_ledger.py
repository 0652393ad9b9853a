"""The turn ledger: a loop is only what keeps happening, folded from the log like everything else."""

from __future__ import annotations

from stowage.core import (
    CompactionRecord,
    FunctionCall,
    FunctionCallOutput,
    ItemRecord,
    MicrocompactRecord,
    Record,
    RoundCommittedRecord,
    SessionRecord,
    TurnRecord,
    UserMessage,
    replay,
)


class Log:
    """A session log built round by round, as the sampler writes it."""

    def __init__(self) -> None:
        self.records: list[Record] = [SessionRecord(seq=1, model="m")]
        self.round = 0

    @property
    def seq(self) -> int:
        return self.records[-1].seq

    def turn(self, text: str) -> None:
        seq = self.seq
        self.records += [
            ItemRecord(seq=seq + 1, item=UserMessage(text=text)),
            TurnRecord(seq=seq + 2, turn=len(self.turns()) + 1, phase="started"),
        ]

    def turns(self) -> list[TurnRecord]:
        return [r for r in self.records if isinstance(r, TurnRecord) and r.phase == "started"]

    def read(self, path: str, size: int = 100) -> None:
        self.round += 1
        seq, cid = self.seq, f"c{self.round}"
        call = FunctionCall(call_id=cid, name="read_file", arguments=f'{{"path": "{path}"}}')
        self.records += [
            ItemRecord(seq=seq + 1, item=call, round=self.round),
            ItemRecord(
                seq=seq + 2,
                item=FunctionCallOutput(call_id=cid, output="x" * size),
                round=self.round,
            ),
            RoundCommittedRecord(
                seq=seq + 3, round=self.round, usage=None, first_seq=seq + 2, last_seq=seq + 3
            ),
        ]

    def compact(self) -> None:
        state = replay("s", self.records)
        seq = self.seq
        self.records.append(
            CompactionRecord(
                seq=seq + 1,
                summary="summary",
                covers_through=seq,
                retained=tuple(e for e in state.history if isinstance(e.item, UserMessage)),
                reason="test",
                tokens_before=None,
                tokens_after=None,
                removed=1,
                round=self.round,
            )
        )

    def looping(self, repeats: int = 3) -> bool:
        ledger = replay("s", self.records).ledger
        return ledger is not None and ledger.looping(repeats) is not None


def test_three_compactions_each_followed_by_reading_again_what_it_absorbed_are_a_loop() -> None:
    log = Log()
    log.turn("read a.txt")
    log.read("a.txt", 5000)
    for n in range(3):
        log.compact()
        log.read("a.txt", 5000)
        assert log.looping() == (n == 2)
    cycles = replay("s", log.records).ledger.looping(3)  # type: ignore[union-attr]
    assert cycles is not None and cycles[-1].call == ("read_file", '{"path": "a.txt"}')
    assert cycles[-1].output_chars == 5000


def test_a_new_distinct_call_between_compactions_is_work_not_a_loop() -> None:
    log = Log()
    log.turn("read everything")
    log.read("a.txt")
    for name in ("b.txt", "c.txt", "d.txt"):
        log.compact()
        log.read("a.txt")  # read again what was absorbed...
        log.read(name)  # ...and something new: the agent is getting on
    assert not log.looping()


def test_two_cycles_are_not_enough_and_a_new_turn_forgets_them() -> None:
    log = Log()
    log.turn("read a")
    log.read("a.txt")
    for _ in range(2):
        log.compact()
        log.read("a.txt")
    assert not log.looping() and log.looping(repeats=2)
    log.records.append(TurnRecord(seq=log.seq + 1, turn=1, phase="finished"))
    assert replay("s", log.records).ledger is None  # between turns nothing is kept
    log.turn("again")
    log.read("a.txt")
    assert not log.looping(repeats=1)


def test_an_output_stubbed_this_turn_counts_as_absorbed() -> None:
    log = Log()
    log.turn("read a")
    log.read("a.txt", 2000)
    output_seq = log.seq - 1
    log.compact()  # a cycle begins; the stub below takes a.txt out of view again
    log.read("b.txt")
    log.records.append(
        MicrocompactRecord(
            seq=log.seq + 1, stubbed=(output_seq + 4,), reason="t", tokens_before=1, tokens_after=0
        )
    )
    ledger = replay("s", log.records).ledger
    assert ledger is not None and ("read_file", '{"path": "b.txt"}') in ledger.absorbed


def test_stubs_of_the_turns_own_reads_start_a_cycle_but_count_as_no_compaction() -> None:
    log = Log()
    log.turn("read a")
    log.read("a.txt", 2000)
    for _ in range(3):
        output_seq = log.seq - 1
        log.records.append(
            MicrocompactRecord(
                seq=log.seq + 1, stubbed=(output_seq,), reason="t", tokens_before=1, tokens_after=0
            )
        )
        log.read("a.txt", 2000)
    ledger = replay("s", log.records).ledger
    assert ledger is not None and ledger.compactions == 0
    assert ledger.looping(3) is not None
