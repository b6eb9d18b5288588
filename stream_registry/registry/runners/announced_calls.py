"""The offset calls announced to a runner and not ended yet (engine.CallsAnnounced), each with when it lapses.

A stream or a task that starts while a call is being resolved (a task restarted after a kill, a stream started
during the call) must hold its first assignment for that call too (calls_coming.py), not only for the calls
announced after it started: so a runner keeps what it was told and tells its stream when that exists (a stream
process: in its spawn spec, before its consumer is made). `lock` is held while telling, so that a call's end
never overtakes its start on the way to a stream.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping


class AnnouncedCalls:
    def __init__(self, calls: Mapping[int, float] | None = None, clock: Callable[[], float] = time.monotonic):
        """`calls`: token -> seconds until it lapses, as handed over by the runner that was told."""
        self._clock = clock
        self.lock = threading.Lock()
        self._calls: dict[int, float] = {token: clock() + within for token, within in (calls or {}).items()}

    def coming(self, token: int, within: float) -> None:
        now = self._clock()
        self._calls = {t: until for t, until in self._calls.items() if until > now}   # lapsed ones go
        self._calls[token] = now + max(within, 0.0)

    def ended(self, token: int) -> None:
        self._calls.pop(token, None)

    def current(self) -> dict[int, float]:
        """The calls still coming: token -> seconds until it lapses."""
        now = self._clock()
        return {token: until - now for token, until in self._calls.items() if until > now}
