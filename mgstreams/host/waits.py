"""Offset calls awaited on the host's event loop: a waiting call holds no thread.

A set_offset or revert is handed off in a worker thread (resolving asks the
cluster, within the call's deadline); what follows is a wait for its change's
outcome, which can last the call's whole timeout. `Waits` keeps those waits as
futures on the event loop: the registry says (from any thread) which stream may
have changed, and one check per stream, in a worker thread, asks the state store
which of its waiting changes are still pending (one query, however many calls
wait). A call's wait ends at its deadline, counted from the request's arrival.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from starlette.concurrency import run_in_threadpool

from stream_registry import StreamRegistry
from stream_registry.registry.offset_calls import OffsetCall

RECHECK_S = 2.0   # a waiting call checks its change this often even when nothing says it changed


class Waits:
    """The calls waiting for their changes, per stream; made on the host's event loop."""

    def __init__(self, registry: StreamRegistry):
        self._registry = registry
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiting: dict[str, dict[OffsetCall, asyncio.Future]] = {}
        self._dirty: set[str] = set()
        self._checking: set[str] = set()
        self._unwatch: Callable[[], None] | None = None

    async def settle(self, call: OffsetCall) -> None:
        """Until no row of the call's change is pending, its stream stops running, or its deadline."""
        if not call.waits:
            return
        self._attach()
        future = asyncio.get_running_loop().create_future()
        calls = self._waiting.setdefault(call.name, {})
        calls[call] = future
        try:
            self._mark(call.name)
            while not future.done():
                left = call.deadline - time.monotonic()
                if left <= 0:
                    return
                try:
                    await asyncio.wait_for(asyncio.shield(future), min(left, RECHECK_S))
                except TimeoutError:
                    self._mark(call.name)
        finally:
            calls.pop(call, None)
            if not calls:
                self._waiting.pop(call.name, None)

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
                ids = [call.change_id for call in calls if call.change_id is not None]
                try:
                    pending = await run_in_threadpool(self._registry.unsettled, name, ids)
                except Exception:   # the stream was dropped, or the store is busy: the calls answer what is
                    pending = set()
                for call, future in calls.items():
                    if not future.done() and (call.change_id not in pending or not call.live()):
                        future.set_result(None)
        finally:
            self._checking.discard(name)
