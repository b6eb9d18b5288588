"""Offset calls awaited on the host's event loop: a waiting call holds no thread.

A set_offset or revert is handed off in a worker thread (resolving asks the
cluster, within the call's deadline); what follows is a wait for its change's
outcome, which can last the call's whole timeout. `Waits` keeps those waits as
futures on the event loop: the registry says (from any thread) which stream may
have changed, and one check per stream, in a worker thread, asks the state store
which of its waiting changes are still pending (one query, however many calls
wait) and, in the same thread, reads the answers of those that are not. A call's
wait ends at its deadline, counted from the request's arrival.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from starlette.concurrency import run_in_threadpool

from stream_registry import OffsetChange, StreamRegistry
from stream_registry.registry.host.offset_calls import OffsetCall

RECHECK_S = 2.0   # a waiting call checks its change this often even when nothing says it changed


class Waits:
    """The calls waiting for their changes, per stream; made on the host's event loop."""

    def __init__(self, registry: StreamRegistry):
        self._registry = registry
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiting: dict[str, dict[OffsetCall, asyncio.Future[list[OffsetChange]]]] = {}
        self._dirty: set[str] = set()
        self._checking: set[str] = set()
        self._unwatch: Callable[[], None] | None = None

    async def answer(self, call: OffsetCall) -> list[OffsetChange]:
        """The call's answer, once no row of its change is pending, its stream stops running, or its deadline."""
        if call.waits:
            self._attach()
            future: asyncio.Future[list[OffsetChange]] = asyncio.get_running_loop().create_future()
            calls = self._waiting.setdefault(call.name, {})
            calls[call] = future
            try:
                self._mark(call.name)
                while not future.done():
                    left = call.deadline - time.monotonic()
                    if left <= 0:
                        break
                    try:
                        return await asyncio.wait_for(asyncio.shield(future), min(left, RECHECK_S))
                    except TimeoutError:
                        self._mark(call.name)
                if future.done():
                    return future.result()
            finally:
                calls.pop(call, None)
                if not calls:
                    self._waiting.pop(call.name, None)
        return await run_in_threadpool(call.answer)

    def _attach(self) -> None:
        if self._unwatch is None:
            self._loop = asyncio.get_running_loop()
            self._unwatch = self._registry.watch(self._wake)

    def close(self) -> None:
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None

    def _wake(self, name: str | None) -> None:
        """From any thread: stream `name` (None: any) may have changed."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(self._mark, name)
        except RuntimeError:   # the loop closed meanwhile: nobody waits any more
            pass

    def _mark(self, name: str | None) -> None:
        for stream in ([name] if name is not None else list(self._waiting)):
            if stream not in self._waiting:
                continue
            self._dirty.add(stream)
            if stream not in self._checking:
                self._checking.add(stream)
                asyncio.get_running_loop().create_task(self._check(stream))

    async def _check(self, name: str) -> None:
        """Settle the stream's waiting calls whose change is no longer pending; marks coalesce meanwhile."""
        try:
            while name in self._dirty:
                self._dirty.discard(name)
                calls = dict(self._waiting.get(name, {}))
                if not calls:
                    return
                answers = await run_in_threadpool(self._settled, name, [c for c, f in calls.items() if not f.done()])
                for call, (answer, error) in answers.items():
                    future = calls[call]
                    if future.done():
                        continue
                    if error is not None:
                        future.set_exception(error)
                    else:
                        future.set_result(answer)
        finally:
            self._checking.discard(name)

    def _settled(self, name: str, calls: list[OffsetCall]
                 ) -> dict[OffsetCall, tuple[list[OffsetChange] | None, Exception | None]]:
        """In a worker thread: the answers (or the errors reading them) of those calls no longer waiting."""
        try:
            pending = self._registry.unsettled(name, [call.change_id for call in calls if call.change_id is not None])
        except Exception:   # the stream was dropped, or the store is busy: the calls answer what is
            pending = set()
        answers: dict[OffsetCall, tuple[list[OffsetChange] | None, Exception | None]] = {}
        for call in calls:
            if call.change_id not in pending or not call.live():
                try:
                    answers[call] = (call.answer(), None)
                except Exception as exc:   # raised where the call awaits it, as its own hand-off's errors are
                    answers[call] = (None, exc)
        return answers
