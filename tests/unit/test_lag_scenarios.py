"""Lag verdicts hold for the whole of a steady run: no flap (issue 24).

A stream consuming 20/s of 30/s produced read OK, OK, WARN x11, OK x7 while its lag rose without a break; a
stream 12 s old read STALL because it had not reached partition 1 yet; a stopped one read OK at 10 records/s.
Here a simulated cluster (producers, a consumer that commits in batches) is sampled as the host samples it,
and every round's verdict is computed by the same pure functions the collector calls.
"""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_registry.lag.verdict import (
    WINDOW,
    LagSample,
    PartitionVerdict,
    evaluate,
    keeping_up,
    lag_trend,
    stream_verdict,
)
from stream_registry.model import StreamStatus, Verdict

PARTITIONS = 3
DT = 0.05


def simulate(produce, capacity, *, seconds=300.0, interval=5.0, batch_s=0.5, backlog=0, status=StreamStatus.RUNNING,
             seed=1, reached=None):
    """Per round (every `interval` s): the stream's verdict and its partitions'. `produce(t)` is records per
    second per partition, `capacity` what the consumer can take per second per partition (it commits every
    `batch_s`); `reached(p, t)` says whether the consumer serves partition p yet."""
    rng = random.Random(seed)
    log_end = [float(backlog)] * PARTITIONS
    consumed = [0.0] * PARTITIONS
    committed = [0] * PARTITIONS
    samples = [[] for _ in range(PARTITIONS)]
    totals = []
    rounds = []
    t, next_commit, next_sample = 0.0, batch_s, interval * rng.random()
    running = status == StreamStatus.RUNNING
    while t < seconds:
        t += DT
        for p in range(PARTITIONS):
            log_end[p] += produce(t) * DT * rng.uniform(0.5, 1.5)
            if running and (reached is None or reached(p, t)):
                consumed[p] = min(int(log_end[p]), consumed[p] + capacity * DT)
        if running and t >= next_commit:
            committed = [int(c) for c in consumed]
            next_commit += batch_s * rng.uniform(0.8, 1.2)
        if t >= next_sample:
            next_sample += interval
            verdicts = {}
            for p in range(PARTITIONS):
                samples[p].append(LagSample(committed[p], int(log_end[p]), t, polling=running))
                verdicts[("orders", p)] = evaluate(samples[p][-WINDOW:], running_since=0.0 if running else None)
            totals.append((t, sum(s[-1].lag for s in samples), sum(committed)))
            rounds.append((stream_verdict(status, verdicts, totals[-WINDOW:]), verdicts))
    return rounds


def verdicts_after(rounds, first):
    return [r[0].verdict for r in rounds[first:]]


def test_under_provisioned_is_warn_in_every_round():
    """30/s produced, 20/s consumed, with a backlog: the lag rises without a break, so WARN without a break."""
    rounds = simulate(lambda t: 10.0, 20.0 / 3, backlog=800)
    assert verdicts_after(rounds, 2) == [Verdict.WARN] * (len(rounds) - 2), [r[0] for r in rounds]
    assert all(r[0].alarm and "lag rising" in r[0].message for r in rounds[2:])
    assert [r[0].verdict for r in rounds[:2]] == [Verdict.STARTING] * 2   # two samples are no trend yet


def test_under_provisioned_from_an_empty_log_warns_once_the_lag_is_a_trend_and_keeps_warning():
    rounds = simulate(lambda t: 10.0, 20.0 / 3)
    got = [r[0].verdict for r in rounds]
    first = got.index(Verdict.WARN)
    assert first <= WINDOW + 2 and got[first:] == [Verdict.WARN] * (len(got) - first), got


def test_caught_up_is_ok_in_every_round():
    rounds = simulate(lambda t: 10.0, 50.0)
    assert verdicts_after(rounds, 2) == [Verdict.OK] * (len(rounds) - 2), [r[0] for r in rounds if r[0].verdict != Verdict.OK]


def test_bursty_is_ok_in_every_round():
    """300 records per partition every 20 s, taken in 6 s: the lag rises and falls, and is no trend."""
    rounds = simulate(lambda t: 300 / DT / 2 if int(t / DT) % int(20 / DT) in (0, 1) else 0.0, 50.0, seconds=400)
    assert verdicts_after(rounds, 2) == [Verdict.OK] * (len(rounds) - 2), \
        [(i, r[0]) for i, r in enumerate(rounds) if r[0].verdict != Verdict.OK]


def test_idle_is_ok_in_every_round():
    rounds = simulate(lambda t: 0.0, 50.0, backlog=0)
    assert verdicts_after(rounds, 0) == [Verdict.OK] * len(rounds)


@pytest.mark.parametrize("status", [StreamStatus.STOPPED, StreamStatus.CREATED])
def test_stopped_is_stop_from_the_first_round(status):
    rounds = simulate(lambda t: 10.0, 50.0, status=status)
    assert verdicts_after(rounds, 0) == [Verdict.STOP] * len(rounds)
    assert not rounds[0][0].alarm, "an operator's stop is no alarm"
    failed = stream_verdict(StreamStatus.ERROR, {}, [(0.0, 5, 0)], error="sink: refused")
    assert (failed.verdict, failed.alarm) == (Verdict.STOP, True) and "sink: refused" in failed.message


def test_a_partition_not_reached_yet_is_starting_not_stall_while_the_stream_is_young():
    """The consumer serves partitions 0 and 2 first; partition 1 from t=30 s on (a 12-s-old stream read STALL)."""
    rounds = simulate(lambda t: 10.0, 50.0, backlog=100, reached=lambda p, t: p != 1 or t >= 30.0, seconds=120)
    young = [r for r in rounds if r[1][("orders", 1)].verdict != Verdict.OK and r[1][("orders", 0)].verdict == Verdict.OK]
    assert young, "partition 1 waited"
    assert all(r[1][("orders", 1)].verdict == Verdict.STARTING for r in young), [r[1][("orders", 1)] for r in young]
    assert "not reached yet" in young[0][1][("orders", 1)].message
    assert all(r[0].verdict in (Verdict.STARTING, Verdict.OK) for r in rounds)
    assert rounds[-1][0].verdict == Verdict.OK


def test_a_partition_still_not_moving_after_the_window_is_stall():
    rounds = simulate(lambda t: 10.0, 50.0, backlog=100, reached=lambda p, t: p != 1, seconds=120)
    got = [r[1][("orders", 1)].verdict for r in rounds]
    assert got[:WINDOW - 1] == [Verdict.STARTING] * (WINDOW - 1) and set(got[WINDOW:]) == {Verdict.STALL}, got
    assert rounds[-1][0].verdict == Verdict.STALL


def test_the_starting_state_is_starting():
    assert stream_verdict(StreamStatus.STARTING, {}, []).verdict == Verdict.STARTING


def test_trend_helpers():
    assert lag_trend([(0, 10), (1, 20), (2, 30)]).rising
    assert not lag_trend([(0, 10), (1, 12), (2, 9), (3, 11), (4, 10)]).rising
    assert lag_trend([(0, 10), (1, 20)]) is None and lag_trend([(1, 1), (1, 2), (1, 3)]) is None
    assert keeping_up([(0, 5, 100), (5, 4, 150)]) and not keeping_up([(0, 500, 100), (5, 600, 150)])


# -- properties ---------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 60)), min_size=1, max_size=25),
       st.integers(0, 10_000), st.booleans())
def test_a_lag_that_never_rises_is_never_warn(steps, backlog, young):
    """Whatever the producer and the consumer do, a partition whose lag never grows is not WARN."""
    committed, log_end, samples = 0, backlog, []
    for i, (produced, consumed) in enumerate(steps):
        log_end += produced
        committed = max(committed, min(log_end, committed + max(consumed, produced)))   # keeps up or better
        samples.append(LagSample(committed, log_end, float(i * 5)))
    got = evaluate(samples, running_since=0.0 if young else None)
    assert got.verdict != Verdict.WARN, (samples, got)


@given(st.sampled_from([StreamStatus.STOPPED, StreamStatus.CREATED, StreamStatus.ERROR]),
       st.lists(st.sampled_from(list(Verdict)), max_size=4))
def test_a_stream_that_does_not_run_is_stop(status, partitions):
    verdicts = {("t", i): PartitionVerdict(v, "m") for i, v in enumerate(partitions)}
    got = stream_verdict(status, verdicts, [(0.0, 5, 0)])
    assert got.verdict == Verdict.STOP and got.alarm == (status == StreamStatus.ERROR)
