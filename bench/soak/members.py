"""The soak's other members of a stream's group and its file cuts: a plain consumer that joins for a while
(optionally committing: a foreign member, the oracle's `Foreign`), and cutting an exactly-once cypherl file back
whole batches (`CutMove`, what the oracle judges a cut by)."""
from __future__ import annotations

import fcntl
import os
import threading
import time
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaException

from stream_registry.graph import cypherl_frames

from .oracle import Foreign
from .plan import StreamPlan

FOREIGN_GRACE_S = 10.0   # how much longer a foreign member may stay to get partitions and commit once


class SecondMember(threading.Thread):
    """A plain consumer in a stream's group for a while: polls (rebalances), writes nothing; a foreign member
    (`commits`) also commits what it consumed every ~0.5 s (and keeps, per partition, the offsets it consumed
    and the offsets it committed: the oracle's `Foreign`)."""

    def __init__(self, bootstrap: str, plan: StreamPlan, seconds: float, commits: bool = False,
                 size=lambda: 0):
        super().__init__(daemon=True, name=f"soak-member-{plan.name}")
        self.plan, self.seconds, self.commits = plan, seconds, commits
        self.config = {"bootstrap.servers": bootstrap, "group.id": plan.group, "enable.auto.commit": False,
                       "auto.offset.reset": "earliest", "log_level": 2, **plan.group_config()}
        self.taken: set[int] = set()
        self.consumed = 0
        self.read: dict[int, set[int]] = {}         # partition -> offsets consumed
        self.committed: dict[int, set[int]] = {}    # partition -> offsets committed
        self.size = size
        self.lo = size()
        self.hi: int | None = None

    def run(self) -> None:
        consumer = Consumer(self.config)
        try:
            consumer.subscribe([self.plan.topic])
            deadline = time.monotonic() + self.seconds
            latest = deadline + FOREIGN_GRACE_S     # a committing member stays until it has committed something
            next_commit = time.monotonic() + 0.5
            while time.monotonic() < deadline or (self.commits and not self.committed and time.monotonic() < latest):
                msg = consumer.poll(0.1)
                if msg is not None and msg.error() is None:
                    self.consumed += 1
                    self.read.setdefault(msg.partition(), set()).add(msg.offset())
                self.taken.update(tp.partition for tp in consumer.assignment())
                if self.commits and time.monotonic() >= next_commit:
                    next_commit = time.monotonic() + 0.5
                    self._commit(consumer)
        finally:
            consumer.close()
            self.hi = self.size()

    def _commit(self, consumer) -> None:
        try:
            done = consumer.commit(asynchronous=False)
        except KafkaException:      # nothing consumed since the last commit, a rebalance, an injected error
            return
        for tp in done or []:
            if tp.error is None and tp.offset >= 0:
                self.committed.setdefault(tp.partition, set()).add(tp.offset)

    def foreign(self, partition: int) -> Foreign | None:
        """What it consumed and committed past on `partition` (None: it committed nothing there)."""
        commits = self.committed.get(partition)
        if not commits or self.hi is None:
            return None
        top = max(commits)
        taken = frozenset(o for o in self.read.get(partition, ()) if o < top)
        return Foreign(self.lo, self.hi, taken, frozenset(commits))


@dataclass(frozen=True)
class CutMove:
    """A file cut: when, the stream's logical sink size right after it, per partition whose stored offset
    went back, (stored before, stored after), and the group's committed offsets read right after it (None: not
    read)."""
    stream: str
    at: float
    size: int
    moves: dict
    committed: dict | None = None


def cut_file(path, stream: str, batches: int):
    """Cut `path` back `batches` whole batches under its lock: (new size, bytes removed, moves) or None when
    the file is too short (the cut would leave a partition with no stored offset)."""
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        last = target = cypherl_frames.last_frame(fd, size)
        for _ in range(batches):
            earlier = cypherl_frames.previous_frame(fd, target) if target is not None else None
            if earlier is None:
                break
            target = earlier
        if last is None or target is None or target is last or target.end >= size:
            return None
        before = cypherl_frames.stored_offsets(fd, size, stream)
        after = cypherl_frames.stored_offsets(fd, size, stream, end=target.end)
        if set(after) != set(before):
            return None
        os.ftruncate(fd, target.end)
        moves = {(k.topic, k.partition): (before[k], after[k]) for k in before if after[k] < before[k]}
        return target.end, size - target.end, moves
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
