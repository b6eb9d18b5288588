"""calls_coming.CallsComing: an announced offset call holds new partitions until it ends or lapses."""
from __future__ import annotations

from stream_registry.registry.stream.calls_coming import LAPSE_SLACK_S, CallsComing


def test_a_call_is_coming_until_it_ended():
    coming = CallsComing(clock=lambda: 0.0)
    assert not coming.any()
    coming.coming(1, within=30.0)
    coming.coming(2, within=30.0)
    coming.ended(1)
    assert coming.any()
    coming.ended(2)
    coming.ended(2)   # a second end (or one for a call never announced) changes nothing
    assert not coming.any()


def test_an_announcement_whose_end_never_comes_lapses_after_the_calls_deadline():
    now = [100.0]
    coming = CallsComing(clock=lambda: now[0])
    coming.coming(7, within=5.0)   # a host killed mid-call never says it ended
    now[0] = 100.0 + 5.0 + LAPSE_SLACK_S - 0.001
    assert coming.any()
    now[0] = 100.0 + 5.0 + LAPSE_SLACK_S
    assert not coming.any()


def test_each_announcement_and_each_end_is_told_at_once():
    told: list[str] = []
    coming = CallsComing(clock=lambda: 0.0, wake=lambda: told.append("wake"), on_coming=lambda: told.append("coming"))
    coming.coming(1, within=1.0)
    coming.ended(1)
    assert told == ["coming", "wake"]
