"""What a `starting` stream waits for, said with the figures of its own consumer config."""
from __future__ import annotations

from collections.abc import Mapping

from ...model import SESSION_TIMEOUT_MS


def starting_detail(configs: Mapping[str, object], waited_s: float) -> str:
    """The group's first assignment comes after the broker's initial rebalance delay (INITIAL_REBALANCE_DELAY_S
    by default), and a rejoin after a restart can wait until the member of the stream's previous run is dropped,
    up to its session timeout: said in at most about 100 characters."""
    value = configs.get("session.timeout.ms", SESSION_TIMEOUT_MS)
    try:
        session_s = (int(value) if isinstance(value, (str, int, float)) else SESSION_TIMEOUT_MS) / 1000
    except ValueError:   # text that is no number: librdkafka refuses it at start; show its default meanwhile
        session_s = SESSION_TIMEOUT_MS / 1000
    # one short line (a column of `mgstreams list`); the why, with the broker's initial delay, is in the docs'
    # troubleshooting and in the log's "running (the group assigned its partitions after N s)"
    return (f"waiting for the group to assign partitions ({waited_s:.0f} s so far; a rejoin can take "
            f"session.timeout.ms ({session_s:g} s))")


def restarting_detail(pid: int | None) -> str:
    """A stream an alter restarts: its previous run finishes its batch and commits, then the new config starts."""
    return (f"restarting to apply an alter: the previous run{f' (pid {pid})' if pid else ''} finishes its batch and "
            f"commits, then the stream starts with its new config")
