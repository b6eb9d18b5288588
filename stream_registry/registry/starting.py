"""What a `starting` stream waits for, said with the figures of its own consumer config."""
from __future__ import annotations

from collections.abc import Mapping

from ..model import INITIAL_REBALANCE_DELAY_S, SESSION_TIMEOUT_MS


def starting_detail(configs: Mapping[str, object], waited_s: float) -> str:
    """The group's first assignment comes after the broker's initial rebalance delay, and a rejoin after a
    restart can wait until the member of the stream's previous run is dropped, up to its session timeout."""
    value = configs.get("session.timeout.ms", SESSION_TIMEOUT_MS)
    try:
        session_s = (int(value) if isinstance(value, (str, int, float)) else SESSION_TIMEOUT_MS) / 1000
    except ValueError:   # text that is no number: librdkafka refuses it at start; show its default meanwhile
        session_s = SESSION_TIMEOUT_MS / 1000
    return (f"waiting for the group to assign partitions ({waited_s:.0f} s so far): a first join waits about "
            f"{INITIAL_REBALANCE_DELAY_S} s (the broker's group.initial.rebalance.delay.ms); a rejoin after a restart "
            f"or a crash waits up to session.timeout.ms ({session_s:g} s) for the previous member to leave")


def restarting_detail(pid: int | None) -> str:
    """A stream an alter restarts: its previous run finishes its batch and commits, then the new config starts."""
    return (f"restarting to apply an alter: the previous run{f' (pid {pid})' if pid else ''} finishes its batch and "
            f"commits, then the stream starts with its new config")
