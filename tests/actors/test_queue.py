"""The actors' mailbox and flag on asyncio: bounded, in order, closed as anyio's streams close,
nothing lost to a cancelled waiter, no trip round the event loop when nothing must wait."""

from __future__ import annotations

import asyncio

import anyio
import pytest
from stowage.actors import Reply, mailbox, open_mailbox
from stowage.actors._queue import Flag, _Deadlines


async def test_a_full_mailbox_holds_its_sender_until_an_item_is_taken() -> None:
    with anyio.fail_after(5):
        box = mailbox(2, int)
        send, receive = box.send, box.receive
        sent: list[int] = []

        async def sender() -> None:
            for n in range(4):
                await send.send(n)
                sent.append(n)

        async with anyio.create_task_group() as tg:
            tg.start_soon(sender)
            await anyio.wait_all_tasks_blocked()
            assert sent == [0, 1]  # the third waits: back-pressure
            assert send.statistics().current_buffer_used == 2
            assert await receive.receive() == 0
            await anyio.wait_all_tasks_blocked()
            assert sent == [0, 1, 2]
            assert [await receive.receive() for _ in range(3)] == [1, 2, 3]


async def test_receivers_end_once_every_send_end_is_closed_and_the_buffer_is_read() -> None:
    with anyio.fail_after(5):
        box = mailbox(4, str)
        send, receive = box.send, box.receive
        clone = send.clone()
        send.send_nowait("a")
        send.close()
        assert receive.receive_nowait() == "a"
        with pytest.raises(anyio.WouldBlock):
            receive.receive_nowait()  # a clone is still open
        got: list[str] = []

        async def reader() -> None:
            async for item in receive:
                got.append(item)

        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            await anyio.wait_all_tasks_blocked()
            await clone.send("b")
            clone.close()  # wakes the waiting reader, which then ends
        assert got == ["b"]
        with pytest.raises(anyio.EndOfStream):
            await receive.receive()


async def test_senders_break_once_every_receive_end_is_closed() -> None:
    with anyio.fail_after(5):
        box = mailbox(1, int)
        send, receive = box.send, box.receive
        send.send_nowait(1)
        failed: list[BaseException] = []

        async def sender() -> None:
            try:
                await send.send(2)
            except anyio.BrokenResourceError as exc:
                failed.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(sender)
            await anyio.wait_all_tasks_blocked()
            receive.close()
        assert len(failed) == 1
        with pytest.raises(anyio.BrokenResourceError):
            send.send_nowait(3)
        send.close()
        with pytest.raises(anyio.ClosedResourceError):
            send.send_nowait(4)


async def test_a_receiver_cancelled_after_its_wake_up_loses_no_item() -> None:
    """asyncio's own cancellation (anyio's waits for a woken task to run) can hit a woken
    receiver before it runs: the item then goes to the next one."""
    with anyio.fail_after(5):
        box = mailbox(4, int)
        # plain asyncio tasks: the race needs a cancel delivered to a woken waiter
        first = asyncio.ensure_future(box.receive.receive())
        await anyio.wait_all_tasks_blocked()
        second = asyncio.ensure_future(box.receive.receive())
        await anyio.wait_all_tasks_blocked()
        box.send.send_nowait(7)  # wakes the first waiter only...
        first.cancel()  # ...which leaves before it runs
        assert await second == 7
        assert first.cancelled()


async def test_sending_and_receiving_with_room_let_no_other_task_run() -> None:
    """The point of the mailbox: an append that need not wait costs no trip round the loop."""
    with anyio.fail_after(5):
        box = mailbox(8, int)
        ran: list[str] = []

        async def other() -> None:
            ran.append("other")

        async with anyio.create_task_group() as tg:
            tg.start_soon(other)
            await box.send.send(1)
            assert await box.receive.receive() == 1
            assert ran == []  # nothing yielded yet
        assert ran == ["other"]
        box.send.close()
        box.receive.close()


def test_a_mailbox_holds_at_least_one_item() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        open_mailbox(0)


async def test_a_flag_wait_within_times_out_without_setting_it() -> None:
    with anyio.fail_after(5):
        flag = Flag()
        assert await flag.wait_within(0.01) is False
        assert not flag.is_set() and flag._waiters == []
        flag.set()
        assert await flag.wait_within(0.01) is True


async def test_a_reply_wait_within_raises_timeout_then_still_takes_the_answer() -> None:
    with anyio.fail_after(5):
        reply: Reply[int] = Reply()
        with pytest.raises(TimeoutError):
            await reply.wait_within(0.01)
        reply.set(3)
        assert await reply.wait_within(0.01) == 3


async def test_a_cancelled_flag_waiter_leaves_nothing_behind() -> None:
    with anyio.fail_after(5):
        flag = Flag()
        with anyio.move_on_after(0.01):
            await flag.wait()
        assert flag._waiters == []
        flag.set()
        await flag.wait()


async def test_closing_an_end_fails_its_own_waiting_sender() -> None:
    with anyio.fail_after(5):
        box = mailbox(1, int)
        box.send.send_nowait(1)
        failed: list[BaseException] = []

        async def sender() -> None:
            try:
                await box.send.send(2)
            except anyio.ClosedResourceError as exc:
                failed.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(sender)
            await anyio.wait_all_tasks_blocked()
            box.send.close()
        assert len(failed) == 1
        assert box.receive.receive_nowait() == 1  # what was sent stays to be read
        box.receive.close()


async def test_answered_timed_waits_leave_no_waiter_behind() -> None:
    """A write's timed wait is dropped from its tick once answered: a busy second's waiters
    are not kept until the tick's timer fires a minute later."""
    with anyio.fail_after(5):
        replies: list[Reply[int]] = [Reply() for _ in range(50)]
        got: list[int] = []

        async def asker(reply: Reply[int]) -> None:
            got.append(await reply.wait_within(60))

        async with anyio.create_task_group() as tg:
            for reply in replies:
                tg.start_soon(asker, reply)
            await anyio.wait_all_tasks_blocked()
            assert sum(map(len, _Deadlines.of(asyncio.get_running_loop())._due.values())) == 50
            for n, reply in enumerate(replies):
                reply.set(n)
        assert sorted(got) == list(range(50))
        assert _Deadlines.of(asyncio.get_running_loop())._due == {}
