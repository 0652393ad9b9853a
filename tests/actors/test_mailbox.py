"""The actor base: replies answer once, slots coalesce and never block a sender."""

import anyio
import pytest
from stowage.actors import Latch, Reply, Slot, mailbox


async def test_reply_delivers_the_first_answer_only() -> None:
    with anyio.fail_after(5):
        reply: Reply[int] = Reply()
        reply.set(1)
        reply.set(2)
        reply.fail(RuntimeError("late"))
        assert await reply.wait() == 1


async def test_reply_raises_the_failure_to_the_asker() -> None:
    with anyio.fail_after(5):
        reply: Reply[int] = Reply()
        reply.fail(ValueError("bad"))
        with pytest.raises(ValueError, match="bad"):
            await reply.wait()


async def test_slot_keeps_only_the_latest_unread_value() -> None:
    with anyio.fail_after(5):
        slot: Slot[int] = Slot()
        for value in range(100):
            slot.put(value)  # never blocks, however many
        assert await slot.get() == 99
        assert slot.take() is None


async def test_slot_get_when_waits_for_an_acceptable_value() -> None:
    with anyio.fail_after(5):
        slot: Slot[int] = Slot()
        got: list[int] = []

        async def consumer() -> None:
            got.append(await slot.get_when(lambda v: v >= 3))

        async with anyio.create_task_group() as tg:
            tg.start_soon(consumer)
            await anyio.wait_all_tasks_blocked()
            slot.put(1)
            await anyio.wait_all_tasks_blocked()
            assert got == []
            slot.put(3)
        assert got == [3]


async def test_closed_empty_slot_ends_its_reader() -> None:
    with anyio.fail_after(5):
        slot: Slot[int] = Slot()
        slot.close()
        with pytest.raises(anyio.EndOfStream):
            await slot.get()


async def test_mailbox_is_bounded() -> None:
    with anyio.fail_after(5):
        box = mailbox(2, int)
        async with box.send, box.receive:
            box.send.send_nowait(1)
            box.send.send_nowait(2)
            with pytest.raises(anyio.WouldBlock):
                box.send.send_nowait(3)


async def test_latch_wakes_every_waiter_and_stays_set() -> None:
    with anyio.fail_after(5):
        latch = Latch()
        woke: list[int] = []

        async def waiter(n: int) -> None:
            await latch.wait()
            woke.append(n)

        async with anyio.create_task_group() as tg:
            for n in range(3):
                tg.start_soon(waiter, n)
            await anyio.wait_all_tasks_blocked()
            assert woke == [] and not latch.is_set()
            latch.set()
        assert sorted(woke) == [0, 1, 2] and latch.is_set()
        await latch.wait()  # set: returns at once


async def test_latch_and_slot_make_no_event_until_someone_waits() -> None:
    with anyio.fail_after(5):
        latch = Latch()
        latch.set()
        slot: Slot[int] = Slot()
        slot.put(1)
        slot.close()
        # what a parked session holds costs no event (an event is its own waiter queue)
        assert latch._waiters is None and slot._changed is None
        assert await slot.get() == 1
        slot.reopen()
        async with anyio.create_task_group() as tg:
            tg.start_soon(slot.get)
            await anyio.wait_all_tasks_blocked()
            assert slot._changed is not None
            slot.put(2)
        assert slot._changed is None  # dropped once its getter woke
