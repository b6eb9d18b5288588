"""The offset gate against a model: hypothesis drives the real OffsetGate in-process against a simulated
consumer that assigns, revokes and loses partitions, fails and succeeds commits, delivers batches, crashes
and restarts; it calls set_offset, cancel and revert, and checks the issue's invariants after every step:

- after an `applied` (persisted) report, that partition's next delivery is the target, and what follows
  comes from there;
- a committed offset never moves back except through a change;
- a cancelled (or superseded) change is never applied later;
- what a caller is told never contradicts the history (one final state per partition of a change);
- every partition of a call ends in exactly one status (checked once the group settles);
- a move to "the end" never takes a partition back from where it got: the log grows and the stream
  delivers between the call's resolving (the log end read) and the gate's applying it, and what is
  persisted and reported is where the partition really went, from where it really stood.

The simulated consumer has librdkafka's committed-offset race: a partition assigned without an explicit
offset looks its committed offset up later, and a seek made before that lookup is overridden by it.
"""
from __future__ import annotations

import itertools

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from stream_registry.model import GateEvent, MoveState, PendingMove
from stream_registry.registry.offset_gate import PERSIST_RETRY_S, OffsetGate

TPS = [("t", 0), ("t", 1)]
LOG_END = 30        # where the log ends at first; records are produced as the model runs
MAX_LOG_END = 60
COUNTS = {"examples": 0, "steps": 0}
FINAL = (MoveState.RECORDED, MoveState.SUPERSEDED, MoveState.CANCELLED)


class SimConsumer:
    """Fetch positions, a group's committed offsets and librdkafka's lookup race, in memory."""

    def __init__(self, committed: dict):
        self.committed = committed          # survives a crash: the broker's
        self.fetch: dict = {}               # assigned partition -> next offset it fetches
        self.lookup: dict = {}              # assigned without an offset: the lookup's answer, still to arrive
        self.fail_commits = False
        self.persisted: list = []           # each persist through the gate: {tp: offset} (one per call)

    # the gate's port
    def seek(self, tp, offset) -> bool:
        if tp not in self.fetch:
            return False
        self.fetch[tp] = offset             # overridden if the lookup is still due (the race)
        return True

    def reassign(self, tp, offset) -> None:
        self.assign(tp, offset)

    def persist(self, offsets):
        if self.fail_commits:
            return "REBALANCE_IN_PROGRESS: injected"
        for tp, offset in offsets.items():
            self.committed[tp] = offset
        self.persisted.append(dict(offsets))
        return None

    # the group
    def assign(self, tp, offset) -> None:
        if offset is None:                  # the lookup was sent now: it answers what is committed now
            self.fetch[tp] = None
            self.lookup[tp] = self.committed.get(tp, 0)
        else:
            self.fetch[tp] = offset
            self.lookup.pop(tp, None)

    def unassign(self, tp) -> None:
        self.fetch.pop(tp, None)
        self.lookup.pop(tp, None)

    def fetch_from(self, tp) -> int:
        if tp in self.lookup:               # the lookup answers now, over any seek made before it
            self.fetch[tp] = self.lookup.pop(tp)
        return self.fetch[tp]


class GateMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        COUNTS["examples"] += 1
        self.committed: dict = {}
        self.sim = SimConsumer(self.committed)
        self.now = 0.0
        self.ids = itertools.count(1)
        self.events: list[GateEvent] = []
        self.final: dict = {}               # (change_id, tp) -> its final state
        self.live: dict = {}                # (change_id, tp) -> offset: requested, no final state yet
        self.applied: dict = {}             # change_id -> {tp: previous}
        self.expect: dict = {}              # tp -> the offset its next delivery must have
        self.log_end = LOG_END
        self.got_to: dict = {}              # assigned tp -> where it stands (next to deliver), None: unknown
        self.resolved: list = []            # calls to the end resolved (the log end read), not handed over yet
        self.onward: set = set()            # change ids whose targets are onward (the end, +N)
        self.gate = self._new_gate({})

    def _new_gate(self, pending) -> OffsetGate:
        return OffsetGate(self.sim, self._on_event, pending=pending, clock=lambda: self.now)

    def _on_event(self, event: GateEvent) -> None:
        key = (event.change_id, (event.topic, event.partition))
        assert key not in self.final, f"{key} reported {event.state} after its final state {self.final.get(key)}"
        if event.state == MoveState.PERSISTED:
            assert key in self.live, f"{key} persisted but not live (cancelled or superseded?)"
            assert self.sim.persisted[-1].get(key[1]) == event.offset, "persisted by the last persist"
            self.applied.setdefault(event.change_id, {})[key[1]] = event.previous_offset
            self.expect[key[1]] = event.offset
            got_to = self.got_to.get(key[1])
            if event.change_id in self.onward and got_to is not None:
                assert event.offset >= got_to, f"{key}: a move to the end took it back from {got_to} to {event.offset}"
                assert event.previous_offset == got_to, f"{key}: reported from {event.previous_offset}, stood at {got_to}"
            self.got_to[key[1]] = event.offset
        if event.state in FINAL:
            self.final[key] = event.state
            self.live.pop(key, None)
        self.events.append(event)

    def _step(self) -> None:
        COUNTS["steps"] += 1

    @initialize(committed=st.lists(st.integers(0, LOG_END), min_size=2, max_size=2))
    def start(self, committed):
        for tp, offset in zip(TPS, committed, strict=False):
            self.committed[tp] = offset

    # -- the group -------------------------------------------------------------------
    @rule(tp=st.sampled_from(TPS), known=st.booleans())
    def assign(self, tp, known=False):
        """`known`: assigned where the stream resumes (exactly-once: the sink's stored offset), else where the
        group's committed-offset lookup says later (at-least-once)."""
        self._step()
        if tp in self.sim.fetch:
            return
        start = self.committed.get(tp, 0) if known else None
        self.got_to[tp] = start
        offsets = self.gate.on_assign({tp: start})
        self.sim.assign(tp, offsets[tp])
        if offsets[tp] is None or offsets[tp] == start:   # else a move's target: its PERSISTED event says
            self.expect[tp] = self.committed.get(tp, 0)
        self.gate.after_assign()

    @rule(tp=st.sampled_from(TPS), lost=st.booleans())
    def revoke(self, tp, lost):
        self._step()
        if tp not in self.sim.fetch:
            return
        self.gate.on_revoke([tp])
        self.sim.unassign(tp)
        self.expect.pop(tp, None)
        self.got_to.pop(tp, None)

    @rule(fail=st.booleans())
    def commits(self, fail):
        self._step()
        self.sim.fail_commits = fail

    @rule(size=st.integers(1, 8))
    def deliver_batch(self, size):
        """Collect, process, commit: what the worker does between drains."""
        self._step()
        batch = {}
        for tp in list(self.sim.fetch):
            start = self.sim.fetch_from(tp)
            taken = []
            for offset in range(start, min(start + size, self.log_end)):
                if tp not in self.sim.fetch:
                    break
                if not self.gate.check_delivery(tp, offset):
                    break                      # stale: the gate moved it again; the rest is outdated
                taken.append(offset)
            if taken:
                self.sim.fetch[tp] = taken[-1] + 1
                batch[tp] = taken
        for tp, offsets in batch.items():
            for offset in offsets:
                if tp in self.expect:
                    assert offset == self.expect[tp], f"{tp}: delivered {offset}, expected {self.expect[tp]}"
                self.expect[tp] = offset + 1
            self.got_to[tp] = offsets[-1] + 1
        next_offsets = {tp: offsets[-1] + 1 for tp, offsets in batch.items()}
        if next_offsets and not self.sim.fail_commits:
            for tp, offset in next_offsets.items():
                assert offset >= self.committed.get(tp, 0), \
                    f"{tp}: a batch commit moves the committed offset back from {self.committed.get(tp)} to {offset}"
                self.committed[tp] = offset
        self.gate.after_batch(next_offsets)

    @rule()
    def crash_and_restart(self):
        """The stream process dies: the host starts a new one with the changes still pending."""
        self._step()
        pending = {}
        for (change_id, tp), offset in sorted(self.live.items()):   # the latest per partition wins
            pending[tp] = PendingMove(change_id=change_id, offset=offset, onward=change_id in self.onward)
        for key in [k for k in self.live if pending.get(k[1], PendingMove(change_id=0, offset=0)).change_id != k[0]]:
            self.final[key] = MoveState.SUPERSEDED           # the host drops the older rows at start
            self.live.pop(key)
        for tp in list(self.sim.fetch):
            self.sim.unassign(tp)
        self.expect.clear()
        self.got_to.clear()
        self.gate = self._new_gate(pending)

    # -- calls ------------------------------------------------------------------------
    @rule(offset=st.integers(0, LOG_END), which=st.sampled_from([TPS, TPS[:1], TPS[1:]]))
    def set_offset(self, offset, which):
        self._step()
        change_id = next(self.ids)
        for tp in which:
            self.live[(change_id, tp)] = offset
        self.gate.request(change_id, {tp: offset for tp in which})

    @rule(records=st.integers(1, 6))
    def produce(self, records):
        self._step()
        self.log_end = min(self.log_end + records, MAX_LOG_END)

    @rule(which=st.sampled_from([TPS, TPS[:1], TPS[1:]]))
    def resolve_to_end(self, which):
        """set_offset("latest") or beyond the log end: the call reads the log end now; its change reaches the
        gate later (hand_over), the stream delivering meanwhile."""
        self._step()
        self.resolved.append((which, self.log_end))

    @rule()
    def hand_over(self):
        self._step()
        if not self.resolved:
            return
        which, end = self.resolved.pop(0)
        change_id = next(self.ids)
        self.onward.add(change_id)
        for tp in which:
            self.live[(change_id, tp)] = end
        self.gate.request(change_id, dict.fromkeys(which, end), onward=frozenset(which))

    @rule()
    def cancel(self):
        self._step()
        for event in self.gate.cancel():   # what the caller is told: cancelled, never applied later
            assert event.state == MoveState.CANCELLED
            key = (event.change_id, (event.topic, event.partition))
            assert self.final.get(key, MoveState.CANCELLED) == MoveState.CANCELLED
            self.final[key] = MoveState.CANCELLED
            self.live.pop(key, None)

    @rule(data=st.data())
    def revert(self, data):
        self._step()
        revertible = {cid: prev for cid, prev in self.applied.items() if all(p is not None for p in prev.values())}
        if not revertible:
            return
        change = data.draw(st.sampled_from(sorted(revertible)))
        change_id = next(self.ids)
        for tp in revertible[change]:
            self.live[(change_id, tp)] = revertible[change][tp]
        self.gate.request(change_id, dict(revertible[change]))

    @rule()
    def time_passes(self):
        self._step()
        self.now += PERSIST_RETRY_S
        self.gate.retry()

    # -- invariants ---------------------------------------------------------------------
    @invariant()
    def one_live_change_per_partition_in_the_gate(self):
        waiting = self.gate.waiting()
        live_tps = [tp for (_, tp) in self.live]
        assert set(waiting) <= set(live_tps)

    def teardown(self):
        """The group settles: commits succeed, every partition is assigned, time passes. Every partition of
        every call then has exactly one final state."""
        self.sim.fail_commits = False
        for tp in TPS:
            self.assign(tp)
        while self.resolved:
            self.hand_over()
        self.time_passes()
        self.deliver_batch(1)
        assert not self.live, f"changes left without a final state: {self.live}"
        requested = {(e.change_id, (e.topic, e.partition)) for e in self.events if e.state == MoveState.REQUESTED}
        assert requested <= set(self.final)


def test_the_gate_keeps_its_invariants_against_a_model():
    COUNTS.update(examples=0, steps=0)
    run_state_machine_as_test(GateMachine, settings=settings(
        max_examples=300, stateful_step_count=40, deadline=None, derandomize=True,
        suppress_health_check=list(HealthCheck)))
    print(f"offset gate model: {COUNTS['examples']} examples, {COUNTS['steps']} steps")
    assert COUNTS["examples"] >= 300 and COUNTS["steps"] >= 300 * 10, COUNTS
