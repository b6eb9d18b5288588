"""The group's commits (stream_registry/registry/stream/group_commits.py) over a consumer stand-in: marks carried by
every commit, errors only a poll resolves returned at once, transient ones retried, a failed batch commit owed
and committed again between batches for the partitions still held, an offset change's persist."""
from __future__ import annotations

import threading

from confluent_kafka import KafkaError
from consumer_standin import ConsumerStandIn

from stream_registry.model import PartitionKey
from stream_registry.registry.stream.change_marks import ChangeMark, MarkKey
from stream_registry.registry.stream.group_commits import OWED_RETRY_S, GroupCommits

P0, P1 = PartitionKey("t", 0), PartitionKey("t", 1)


KEY = MarkKey.new()   # the stream's identity and mark key (change_marks)
M20, M7 = ChangeMark(20, 20, 3), ChangeMark(7, 7, 0)


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def commits_with(consumer: ConsumerStandIn, *, outage: bool = False, rebalancing: bool = False):
    clock = Clock()
    commits = GroupCommits("orders", lambda: consumer, give_up=lambda: outage, in_rebalance=lambda: rebalancing,
                           redact=str, clock=clock, sleep=clock.sleep, mark_key=KEY)
    return commits, clock


def test_every_commit_of_a_partition_carries_its_last_changes_mark():
    consumer = ConsumerStandIn()
    commits, _ = commits_with(consumer)
    ours, foreign = KEY.encode(P0, M7), MarkKey.new().encode(P1, M7)
    assert commits.read_mark(P0, ours) == M7 and commits.read_mark(P1, foreign) is None
    assert commits.commit({P0: 10, P1: 4}) is None
    assert consumer.calls[-1] == ("commit", [("t", 0, 10, ours), ("t", 1, 4, None)]), "ours carried, not another's"
    commits.forget([P0])
    commits.commit({P0: 11})
    assert consumer.calls[-1] == ("commit", [("t", 0, 11, None)]), "a partition given up forgets its mark"


def test_an_error_only_a_poll_resolves_returns_at_once_and_the_batch_commit_is_owed_until_it_succeeds():
    consumer = ConsumerStandIn()
    consumer.commit_errors = [KafkaError(KafkaError.REBALANCE_IN_PROGRESS, "rebalancing")] * 2
    commits, clock = commits_with(consumer)
    commits.commit_batch({P0: 5, P1: 3})
    assert len(consumer.calls) == 1, "not retried in a loop: only the next poll can resolve it"
    assert commits.owed == {P0: 5, P1: 3}
    commits.retry_owed(frozenset({P0}))   # the next turn of the loop: fails again
    assert consumer.calls[-1] == ("commit", [("t", 0, 5, None)]), "only the partitions still held"
    commits.retry_owed(frozenset({P0}))
    assert len(consumer.calls) == 2, "then tried again once a second, not at every batch"
    clock.now += OWED_RETRY_S
    commits.retry_owed(frozenset({P0}))
    assert len(consumer.calls) == 3 and commits.owed == {}
    assert consumer.committed_offsets[("t", 0)] == (5, None)


def test_a_transient_error_is_retried_until_the_commit_succeeds():
    consumer = ConsumerStandIn()
    consumer.commit_errors = [KafkaError(KafkaError.COORDINATOR_NOT_AVAILABLE, "moving")] * 3
    commits, _ = commits_with(consumer)
    assert commits.commit({P0: 9}) is None
    assert len(consumer.calls) == 4 and consumer.committed_offsets[("t", 0)] == (9, None)


def test_during_an_outage_a_failed_commit_gives_up_and_says_why():
    consumer = ConsumerStandIn()
    consumer.commit_errors = [KafkaError(KafkaError.COORDINATOR_NOT_AVAILABLE, "no coordinator")]
    commits, _ = commits_with(consumer, outage=True)
    assert commits.commit({P0: 9}) == "COORDINATOR_NOT_AVAILABLE: no coordinator"
    assert len(consumer.calls) == 1


def test_inside_a_rebalance_callback_the_commit_is_made_on_the_calling_thread():
    consumer = ConsumerStandIn()
    threads = []
    real = consumer.commit
    consumer.commit = lambda offsets, asynchronous=True: (threads.append(threading.current_thread()),
                                                          real(offsets, asynchronous))[1]
    commits, _ = commits_with(consumer, rebalancing=True)
    commits.commit({P0: 1})
    assert threads == [threading.current_thread()]


def test_persisting_a_change_commits_its_mark_and_ends_what_was_owed():
    consumer = ConsumerStandIn()
    commits, _ = commits_with(consumer)
    commits.owed = {P0: 3}
    assert commits.persist({P0: 20}, {P0: M20}) is None
    assert commits.owed == {} and consumer.committed_offsets[("t", 0)] == (20, KEY.encode(P0, M20))


def test_a_change_whose_commit_fails_leaves_no_mark_behind():
    consumer = ConsumerStandIn()
    consumer.commit_errors = [KafkaError(KafkaError.ILLEGAL_GENERATION, "stale generation")]
    commits, _ = commits_with(consumer)
    error = commits.persist({P0: 20}, {P0: M20})
    assert error == "committing the new offset failed (ILLEGAL_GENERATION: stale generation)"
    commits.commit({P0: 21})
    assert consumer.calls[-1] == ("commit", [("t", 0, 21, None)])


def test_exactly_once_a_change_is_stored_in_the_sink_first_and_a_failed_store_commits_nothing():
    consumer = ConsumerStandIn()
    commits, _ = commits_with(consumer)
    stored = []
    assert commits.persist({P0: 20}, {P0: M20}, store=lambda offsets, marks: stored.append((offsets, marks))) is None
    assert stored == [({P0: 20}, {P0: KEY.encode_stored(P0, M20)})], "the signed mark stored beside the offset"
    assert consumer.committed_offsets[("t", 0)] == (20, KEY.encode(P0, M20))

    def unreachable(offsets, marks):
        raise OSError("graph unreachable")
    error = commits.persist({P1: 7}, {P1: M7}, store=unreachable)
    assert error == "storing the new offset in the sink failed (graph unreachable)"
    assert ("t", 1) not in consumer.committed_offsets and P1 not in commits.marks


class _SlowCoordinator(ConsumerStandIn):
    """A consumer whose commits are answered only once `answer` is set (a group coordinator a round trip away)."""

    def __init__(self):
        super().__init__()
        self.answer = threading.Event()
        self.asked = threading.Event()

    def commit(self, offsets, asynchronous=True):
        self.asked.set()
        assert self.answer.wait(10), "never answered"
        return super().commit(offsets, asynchronous)


def _pipelined(consumer, rebalancing: list[bool]):
    return GroupCommits("orders", lambda: consumer, give_up=lambda: False, in_rebalance=lambda: rebalancing[0],
                        redact=str, mark_key=KEY, pipelined=True)


def test_a_pipelined_batch_commit_is_answered_while_the_next_batch_is_read_and_commits_stay_in_order():
    consumer, rebalancing = _SlowCoordinator(), [False]
    commits = _pipelined(consumer, rebalancing)
    commits.commit_batch({P0: 5})   # returns with the commit in flight
    assert consumer.asked.wait(10) and consumer.committed_offsets == {}
    consumer.answer.set()
    assert commits.persist({P0: 2}, {P0: M7}) is None   # the batch's answered first
    assert [c[1] for c in consumer.calls if c[0] == "commit"] == [[("t", 0, 5, None)],
                                                                  [("t", 0, 2, KEY.encode(P0, M7))]]
    assert consumer.committed_offsets == {("t", 0): (2, KEY.encode(P0, M7))}


def test_a_failed_pipelined_batch_commit_is_owed_but_never_after_a_change_of_its_partition():
    consumer, rebalancing = ConsumerStandIn(), [False]
    consumer.commit_errors = [KafkaError(KafkaError.REBALANCE_IN_PROGRESS, "rebalancing")]
    commits = _pipelined(consumer, rebalancing)
    commits.commit_batch({P0: 5, P1: 3})
    commits.settle()
    assert commits.owed == {P0: 5, P1: 3}, "failed: owed, retried between batches"
    commits.commit_batch({P0: 9})   # while commits fail, a batch's offsets join what is owed (no commit of its own)
    assert commits.owed == {P0: 9, P1: 3} and len(consumer.calls) == 1
    assert commits.persist({P0: 1}, {P0: M20}) is None
    assert commits.owed == {P1: 3}, "the failed batch's P0 offset does not come back to undo the change"
    assert consumer.committed_offsets[("t", 0)] == (1, KEY.encode(P0, M20))


def test_inside_a_rebalance_callback_a_change_waits_for_the_batch_commit_in_flight_never_overtakes_it():
    consumer, rebalancing = _SlowCoordinator(), [False]
    commits = _pipelined(consumer, rebalancing)
    commits.commit_batch({P0: 5})
    assert consumer.asked.wait(10)
    rebalancing[0] = True   # librdkafka answers no other thread's commit until the callback returns
    error = commits.persist({P0: 2}, {P0: M7})
    assert error is not None and "earlier commit still waits" in error, "refused at once: the gate retries it"
    assert commits.marks == {}, "no mark left behind"
    rebalancing[0] = False
    consumer.answer.set()
    assert commits.persist({P0: 2}, {P0: M7}) is None
    assert [c[1][0][1:3] for c in consumer.calls if c[0] == "commit"] == [(0, 5), (0, 2)], "in order"


def test_a_commit_refused_while_an_earlier_one_hangs_still_asks_whether_the_cluster_is_gone():
    """Issue 42: an outage that begins while a commit hangs in librdkafka must reach the stream's error from the
    owed commit's retries too, where the next commit fails at once (an earlier one still waits): the probe
    (`give_up`) runs there as it does while a commit waits."""
    from stream_registry.registry.stream.commits import BoundedCommitter, CommitUnanswered

    release = threading.Event()

    class Hanging:
        def commit(self, offsets, asynchronous):
            release.wait(10)
            return offsets
    committer, asked = BoundedCommitter("orders"), []
    try:
        try:
            committer.commit(Hanging(), [], 0.2)
        except CommitUnanswered:
            pass
        assert committer.busy
        try:
            committer.commit(Hanging(), [], 5.0, give_up=lambda: asked.append(1) or True)
        except CommitUnanswered as exc:
            assert "an earlier commit still waits" in str(exc)
        assert asked == [1], "refused at once without asking whether the cluster answers"
    finally:
        release.set()


def test_a_commit_in_flight_is_waited_for_in_slices_asking_about_the_cluster_and_a_close_goes_after_it():
    """Issue 42, reproduction 5: confluent-kafka makes every call on a consumer wait while a commit of it runs on
    the commit thread, so the poll loop makes none while one is in flight: it waits in slices (a stop is seen
    between them), asks whether the cluster is gone once the commit has waited COMMIT_MIN_WAIT_S, and a close
    behind a commit that still hangs is left to the commit thread."""
    from stream_registry.registry.stream.group_commits import COMMIT_MIN_WAIT_S

    consumer, asked = _SlowCoordinator(), []
    clock = Clock()
    commits = GroupCommits("orders", lambda: consumer, give_up=lambda: asked.append(clock.now) or True,
                           in_rebalance=lambda: False, redact=str, clock=clock, mark_key=KEY, pipelined=True)
    closed = threading.Event()
    consumer.close = closed.set
    try:
        commits.commit_batch({P0: 5})
        assert consumer.asked.wait(10) and commits.in_flight
        commits.await_in_flight(0.01)
        assert commits.in_flight and asked == [], "a commit just made: waited for, the cluster not asked yet"
        clock.now += COMMIT_MIN_WAIT_S
        commits.await_in_flight(0.01)
        assert asked == [COMMIT_MIN_WAIT_S], "one that waited COMMIT_MIN_WAIT_S asks (the probe shows an outage)"
        commits.close_after_commit(consumer)
        assert not closed.wait(0.2), "not closed while the commit runs: the poll thread went on"
    finally:
        consumer.answer.set()
    assert closed.wait(10), "closed on the commit thread once the commit returned"
    commits.await_in_flight(0.01)
    assert not commits.in_flight and consumer.committed_offsets == {("t", 0): (5, None)}


CADENCE_S = 0.5   # a stream's commit.interval.ms of 500


def _paced(consumer, clock: Clock, rebalancing: list[bool]):
    return GroupCommits("orders", lambda: consumer, give_up=lambda: False, in_rebalance=lambda: rebalancing[0],
                        redact=str, clock=clock, sleep=clock.sleep, mark_key=KEY, pipelined=True,
                        cadence_s=CADENCE_S)


def _committed(consumer) -> list:
    return [[tp[1:3] for tp in c[1]] for c in consumer.calls if c[0] == "commit"]


def test_reading_a_backlog_full_batches_are_committed_merged_at_the_cadence_and_a_batch_not_full_at_once():
    consumer, clock, rebalancing = ConsumerStandIn(), Clock(), [False]
    commits = _paced(consumer, clock, rebalancing)
    commits.commit_batch({P0: 5}, full=True)   # the first: nothing committed for a cadence before it
    commits.settle()
    commits.commit_batch({P0: 9, P1: 3}, full=True)
    commits.commit_batch({P1: 8}, full=True)
    commits.settle()
    assert _committed(consumer) == [[(0, 5)]], "within the cadence: deferred"
    clock.now += CADENCE_S
    commits.commit_batch({P0: 12}, full=True)
    commits.settle()
    assert _committed(consumer)[1:] == [[(0, 12), (1, 8)]], "one commit carries every batch deferred"
    commits.commit_batch({P1: 10}, full=False)   # caught up: at once
    commits.settle()
    assert _committed(consumer)[2:] == [[(1, 10)]]
    commits.commit_batch({P0: 20}, full=True)
    commits.flush()   # going idle, closing
    commits.settle()
    assert consumer.committed_offsets == {("t", 0): (20, None), ("t", 1): (10, None)}


def test_an_offset_change_drops_what_the_cadence_deferred_of_its_partition_and_a_revoke_commits_the_rest():
    consumer, clock, rebalancing = ConsumerStandIn(), Clock(), [False]
    commits = _paced(consumer, clock, rebalancing)
    commits.commit_batch({P0: 5}, full=True)
    commits.settle()
    commits.commit_batch({P0: 9, P1: 3}, full=True)   # deferred
    assert commits.persist({P0: 2}, {P0: M7}) is None
    commits.flush()
    commits.settle()
    assert consumer.committed_offsets[("t", 0)] == (2, KEY.encode(P0, M7)), "the batch's 9 never undoes the change"
    assert consumer.committed_offsets[("t", 1)] == (3, None)
    commits.commit_batch({P0: 4, P1: 6}, full=True)   # deferred
    rebalancing[0] = True
    commits.flush_revoked({P1})   # inside the revoke callback: directly, while this member owns it
    assert consumer.calls[-1][0] == "commit" and consumer.committed_offsets[("t", 1)] == (6, None)
    commits.forget({P1})
    rebalancing[0] = False
    commits.flush()
    commits.settle()
    assert consumer.committed_offsets == {("t", 0): (4, KEY.encode(P0, M7)), ("t", 1): (6, None)}
def test_while_an_offset_call_is_coming_batch_commits_wait_so_the_change_commits_first_without_queueing():
    """The host announced a call (calls_coming.py): a batch's commit started now would make the change's commit
    wait for its answer (one commit at a time), so it waits; the change commits at once and drops what waited of
    its partition, the rest commits once no call is coming, and a close or a revoke commits regardless."""
    consumer, clock, rebalancing, coming = ConsumerStandIn(), Clock(), [False], [True]
    commits = GroupCommits("orders", lambda: consumer, give_up=lambda: False, in_rebalance=lambda: rebalancing[0],
                           redact=str, clock=clock, sleep=clock.sleep, mark_key=KEY, pipelined=True,
                           hold=lambda: coming[0])
    commits.commit_batch({P0: 9, P1: 3}, full=False)   # not full: would commit at once, but a call is coming
    commits.flush()   # the idle path, too, leaves it waiting
    assert not commits.in_flight and _committed(consumer) == [] and not commits.deferred
    assert commits.persist({P0: 2}, {P0: M7}) is None, "the change commits with nothing in flight before it"
    assert _committed(consumer) == [[(0, 2)]]
    coming[0] = False
    commits.commit_batch({P0: 4}, full=False)
    commits.settle()
    assert consumer.committed_offsets == {("t", 0): (4, KEY.encode(P0, M7)), ("t", 1): (3, None)}, \
        "the batch's 9 of the moved partition never undoes the change; the other partition's 3 is not lost"
    coming[0] = True
    commits.commit_batch({P1: 7}, full=False)
    rebalancing[0] = True
    commits.flush_revoked({P1})   # inside a revoke callback: committed while this member owns it
    assert consumer.committed_offsets[("t", 1)] == (7, None)
    rebalancing[0] = False
    commits.commit_batch({P0: 6}, full=False)
    commits.flush(closing=True)
    commits.settle()
    assert consumer.committed_offsets[("t", 0)] == (6, KEY.encode(P0, M7)), "a close commits what waits"


def test_a_coordinator_loading_for_a_minute_is_asked_about_once_a_second_and_the_commit_lands_once_it_answers():
    """A commit-error episode (COORDINATOR_LOAD_IN_PROGRESS for 60 s of the model's time, a batch every 0.1 s): a
    batch commit retries with a backoff (0.05 s doubled, at most 1 s) until its deadline, then is owed; the next
    batches' offsets join what is owed, tried about once a second. Before, the first batch commit alone asked 20
    times a second (200 attempts in its 10 s) and every later batch made a failing commit of its own: 1000 pushed
    errors lasted well under a minute."""
    from stream_registry.registry.stream.group_commits import COMMIT_RETRY_MAX_S

    consumer = ConsumerStandIn()
    consumer.commit_errors = [KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS, "loading")] * 10_000
    commits, clock = commits_with(consumer)
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        clock.sleep(seconds)
    commits._sleep = sleep
    commits.commit_batch({P0: 5})
    assert commits.owed == {P0: 5}
    commits.retry_owed(frozenset({P0}))   # between batches
    assert sleeps[:5] == [0.05, 0.1, 0.2, 0.4, 0.8] and max(sleeps) == COMMIT_RETRY_MAX_S, sleeps
    offset = 5
    while clock.now < 60.0:   # the poll loop for the rest of the minute: a batch every 0.1 s, the owed retry between
        clock.now += 0.1
        offset += 1
        commits.commit_batch({P0: offset})
        commits.retry_owed(frozenset({P0}))
    asked = len(consumer.calls)
    assert asked <= 70, f"{asked} commits in a minute of the coordinator loading"
    assert commits.owed == {P0: offset}, "the last batch's offsets are owed"
    consumer.commit_errors = []   # the coordinator answers: the owed commit lands within a second
    answered_at = clock.now
    while commits.owed:
        clock.now += 0.01
        commits.retry_owed(frozenset({P0}))
    assert clock.now - answered_at <= 1.0 and consumer.committed_offsets[("t", 0)] == (offset, None)
    commits.commit_batch({P0: offset + 1})   # and the batches commit again, each at once
    assert consumer.committed_offsets[("t", 0)] == (offset + 1, None)
