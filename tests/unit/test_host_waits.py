"""The host's waits for offset changes (mgstreams.host.waits): on the event loop, holding no thread.

A registry stand-in says which changes are pending; the registry's notifications come from another thread, as
the stream processes' pipe readers send them.
"""
from __future__ import annotations

import asyncio
import threading
import time

from mgstreams.host.waits import Waits
from stream_registry.registry.host.offset_calls import OffsetCall


class Registry:
    def __init__(self):
        self.pending: dict[str, set[int]] = {}
        self.watchers = []
        self.queries = 0

    def watch(self, callback):
        self.watchers.append(callback)
        return lambda: self.watchers.remove(callback)

    def unsettled(self, name, change_ids):
        self.queries += 1
        return self.pending.get(name, set()) & set(change_ids)

    def settle(self, name: str, change_id: int) -> None:   # a pipe reader: from another thread
        self.pending[name].discard(change_id)
        threading.Thread(target=lambda: [w(name) for w in list(self.watchers)]).start()


def call(name: str, change_id: int | None, seconds: float, live=lambda: True, answer=None) -> OffsetCall:
    return OffsetCall(name, change_id, time.monotonic() + seconds, live, answer or (lambda: [("answer", change_id)]))


def test_a_call_waits_until_its_change_is_not_pending_and_one_query_serves_many():
    registry = Registry()
    registry.pending["s"] = set(range(1, 101))
    waits = Waits(registry)

    async def scenario():
        calls = [asyncio.create_task(waits.answer(call("s", i, 30))) for i in range(1, 101)]
        await asyncio.sleep(0.3)
        assert not any(c.done() for c in calls), "their changes are pending"
        began = time.monotonic()
        registry.settle("s", 7)
        await asyncio.wait_for(calls[6], 5)
        assert time.monotonic() - began < 1
        assert not any(c.done() for i, c in enumerate(calls) if i != 6)
        for i in range(1, 101):
            registry.pending["s"].discard(i)
        registry.settle("s", 1)
        answers = await asyncio.wait_for(asyncio.gather(*calls), 5)
        assert answers == [[("answer", i)] for i in range(1, 101)], "each call gets its own answer"
    asyncio.run(scenario())
    assert registry.queries < 20, f"{registry.queries} queries for 100 waiting calls: one per check, not per call"


def test_a_call_ends_at_its_deadline_or_when_its_stream_stops():
    registry = Registry()
    registry.pending["s"] = {1, 2}
    waits = Waits(registry)
    running = {"s": True}

    async def scenario():
        began = time.monotonic()
        assert await waits.answer(call("s", 1, 0.5)) == [("answer", 1)], "answered with what is, at the deadline"
        assert 0.45 < time.monotonic() - began < 2, "the deadline"
        stopping = asyncio.create_task(waits.answer(call("s", 2, 30, live=lambda: running["s"])))
        await asyncio.sleep(0.2)
        assert not stopping.done()
        running["s"] = False
        [w(None) for w in registry.watchers]   # a stop notifies (here from the loop's own thread)
        await asyncio.wait_for(stopping, 5)
        await asyncio.wait_for(waits.answer(call("s", None, 30)), 1)   # nothing to wait for
    asyncio.run(scenario())


def test_an_answer_that_cannot_be_read_fails_its_own_call_only():
    """Reading an answer that raises (the stream dropped meanwhile) fails that call with the error, as its
    hand-off's errors do; the other calls of the stream get theirs."""
    registry = Registry()
    registry.pending["s"] = {1, 2}
    waits = Waits(registry)

    def dropped():
        raise LookupError("name: no stream 's'")

    async def scenario():
        failing = asyncio.create_task(waits.answer(call("s", 1, 30, answer=dropped)))
        fine = asyncio.create_task(waits.answer(call("s", 2, 30)))
        await asyncio.sleep(0.2)
        registry.pending["s"].clear()
        registry.settle("s", 1)
        assert await asyncio.wait_for(fine, 5) == [("answer", 2)]
        try:
            await asyncio.wait_for(failing, 5)
        except LookupError as exc:
            assert "no stream 's'" in str(exc)
        else:
            raise AssertionError("the call whose answer raised did not fail")
    asyncio.run(scenario())
