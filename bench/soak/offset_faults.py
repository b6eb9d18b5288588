"""The soak's offset calls as faults, mixed into FaultMenu (faults.py): set_offset with a random spec, revert of
a recent change, cancel of what is pending (a refusal during a sink change is an answer too), and alter; each
call's rows are kept (`Call`) for the oracle to judge."""
from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from mgstreams.client import HostUnavailable
from stream_registry.errors import StreamError

from .evidence import Call
from .plan import PARTITIONS, STREAMS, StreamPlan

SET_OFFSET_TIMEOUT_S = 3.0


class OffsetFaults:
    """The offset calls of the fault menu; they act on Soak's client, random generator and event log."""

    def fault_set_offset(self, kind: str) -> None:
        plan = self.rng.choice(STREAMS)
        spec = self.random_spec(plan)
        self._offset_call(kind, plan, spec, lambda: self.client.set_offset(plan.name, spec,
                                                                           timeout=SET_OFFSET_TIMEOUT_S))

    def fault_revert(self, kind: str) -> None:
        """POST .../history/{id}/revert of a recent applied change (its rows judged like a set_offset's)."""
        plan = self.rng.choice(STREAMS)
        ids = [e.change_id for e in self.client.history(plan.name, limit=30)
               if e.change_id is not None and e.status.value in ("applied", "clamped")]
        if not ids:     # nothing to revert yet: a set_offset first, then its revert
            spec = self.random_spec(plan)
            self._offset_call("set_offset", plan, spec, lambda: self.client.set_offset(
                plan.name, spec, timeout=SET_OFFSET_TIMEOUT_S))
            ids = [r.change_id for r in self.calls[-1].rows or [] if r.change_id is not None
                   and r.status.value in ("applied", "clamped")]
            if not ids:
                return
        change_id = self.rng.choice(ids[:5])
        self._offset_call(kind, plan, {"revert": change_id},
                          lambda: self.client.revert(plan.name, change_id, timeout=SET_OFFSET_TIMEOUT_S))

    def fault_cancel(self, kind: str) -> None:
        """DELETE .../pending (of a stream that has pending rows, when one has): what it says it cancelled must
        never show applied in the history."""
        waiting = [p for p in STREAMS if self.client.pending(p.name)]
        # a sink change in flight (its carry-over pending) makes the host refuse: an answer too
        self._cancel(kind, self.rng.choice(waiting or list(STREAMS)), refusal_expected=True)

    def _cancel(self, kind: str, plan: StreamPlan, refusal_expected: bool = False) -> None:
        """Cancel the stream's pending changes; what the host says it cancelled is judged by the oracle. With
        `refusal_expected`, a refusal (a sink change in flight) is an answer too."""
        started = time.time()
        try:
            rows = self.client.cancel_pending(plan.name)
        except HostUnavailable as exc:
            self.event(kind, stream=plan.name, error=str(exc))
            return
        except StreamError as exc:
            if not refusal_expected:
                raise
            self.faults[kind] += 1
            self.event(kind, stream=plan.name, started=started, refused=str(exc))
            return
        self.cancelled += [(plan.name, r.change_id, r.topic, r.partition) for r in rows]
        self.faults[kind] += 1
        self.event(kind, stream=plan.name, started=started,
                   cancelled=[(r.change_id, r.partition, r.offset) for r in rows])

    def fault_alter(self, kind: str) -> None:
        """PATCH /streams/{name}: a new batch size or interval (the stream restarts with it)."""
        plan = self.rng.choice(STREAMS)
        change = self.rng.choice([{"batch_size": self.rng.choice((plan.batch_size // 2, plan.batch_size,
                                                                  plan.batch_size * 2))},
                                  {"batch_interval_ms": self.rng.choice((plan.batch_interval_ms // 2,
                                                                         plan.batch_interval_ms))}])
        self.client.alter(plan.name, **change)
        self.faults[kind] += 1
        self.event(kind, stream=plan.name, change=change)

    def _offset_call(self, kind: str, plan: StreamPlan, spec: object, send) -> None:
        call = Call(plan.name, spec, time.time(), self.sink_size(plan))
        self.calls.append(call)
        try:
            call.rows = send()
        except StreamError as exc:
            call.error = str(exc)
            call.unknown = isinstance(exc, HostUnavailable)
        call.size_after = self.sink_size(plan)
        call.returned = time.time()
        self.faults[kind] += 1
        self.event(kind, stream=plan.name, spec=spec, size_before=call.size_before, size_after=call.size_after,
                   started=call.started, returned=call.returned, error=call.error,
                   rows=[(r.partition, r.previous_offset, r.offset, r.status.value) for r in call.rows or []])

    def random_spec(self, plan: StreamPlan) -> object:
        def one() -> object:
            ends = [e for (t, _, e) in self.log_ends_estimate() if t == plan.topic] or [0]
            pick = self.rng.random()
            if pick < 0.30:
                return self.rng.randint(0, max(ends) + 20)          # absolute; past the end is clamped
            if pick < 0.45:
                return "earliest"
            if pick < 0.55:
                return "latest"
            if pick < 0.75:
                return f"-{self.rng.randint(1, 300)}"
            if pick < 0.90:
                return f"+{self.rng.randint(1, 100)}"
            moment = datetime.now(UTC) - timedelta(seconds=self.rng.uniform(1, 20))
            return moment.isoformat(timespec="milliseconds")
        if self.rng.random() < 0.35:
            chosen = self.rng.sample(range(PARTITIONS), self.rng.randint(1, 2))
            return {f"{plan.topic}:{p}": one() for p in chosen}
        return one()
