"""A store's own thread for its group commits, in place of ``anyio.to_thread.run_sync``."""

from __future__ import annotations

import asyncio
import functools
import os
import queue
import threading
from collections.abc import Callable
from contextlib import suppress
from typing import Any, TypeVar

import anyio
import anyio.to_thread

__all__ = ["WriterThread"]

_T = TypeVar("_T")
_A = TypeVar("_A")


#: what the writer thread is given: where to answer, and the call to make
_Job = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[[Any], Any], Any]


class WriterThread:
    """The store's own thread for its group commits: a queue put and one loop wake-up each."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()

    async def run(self, func: Callable[[_A], _T], arg: _A) -> _T:
        """``func(arg)`` in the thread; returns its result or raises its exception."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[_T] = loop.create_future()
        if self._pid != os.getpid():
            # a process forked from the one that started the thread has none running: its
            # own starts with its first commit, on a queue of its own
            self._pid, self._thread, self._jobs = os.getpid(), None, queue.SimpleQueue()
        if self._thread is None:
            self._thread = threading.Thread(
                target=_serve, args=(self._jobs,), name=self._name, daemon=True
            )
            self._thread.start()
        self._jobs.put((loop, done, func, arg))
        with anyio.CancelScope(shield=True):
            result = await done
        return result

    async def stop(self) -> None:
        """Let the thread finish what it was given, end it, and wait until it has."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._jobs.put(None)
        await anyio.to_thread.run_sync(thread.join)

    def stop_soon(self) -> None:
        """End the thread once it is idle, without waiting (for a store nobody closed)."""
        self._jobs.put(None)


def _serve(jobs: queue.SimpleQueue[_Job | None]) -> None:
    while (job := jobs.get()) is not None:
        _run_job(*job)
        del job  # holds the store (a bound method) while this thread waits for the next


def _run_job(
    loop: asyncio.AbstractEventLoop, done: asyncio.Future[Any], func: Callable[[Any], Any], arg: Any
) -> None:
    try:
        result = func(arg)
    except BaseException as exc:  # the caller's to raise, as anyio's worker threads do
        answer = functools.partial(_settle, done, None, exc)
    else:
        answer = functools.partial(_settle, done, result, None)
    with suppress(RuntimeError):  # the loop is closed: nobody waits for the answer any more
        loop.call_soon_threadsafe(answer)


def _settle(done: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if done.cancelled():  # its waiter was cancelled by asyncio itself, past anyio's shield
        return
    if error is not None:
        done.set_exception(error)
    else:
        done.set_result(result)
