"""The soak's load: keyed payloads at a steady rate, with the sequence number each offset holds."""
from __future__ import annotations

import random
import threading
import time

from confluent_kafka import Producer


class SteadyProducer(threading.Thread):
    """Keyed payloads `seq=<n>;...` at `rate` per second, round-robin over the topics."""

    def __init__(self, bootstrap: str, topics: list[str], rate: float, seed: int):
        super().__init__(daemon=True, name="soak-producer")
        self.bootstrap, self.topics, self.rate = bootstrap, topics, rate
        self.rng = random.Random(seed)
        self.written: dict[tuple[str, int, int], int] = {}
        self.ends: dict[tuple[str, int], int] = {}
        self.failed: list[str] = []
        self.sent = 0
        self._halt = threading.Event()
        self.error: BaseException | None = None

    def stop(self) -> None:
        self._halt.set()
        self.join(120)

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:   # reported by the soak
            self.error = exc

    def _run(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5,
                             "message.timeout.ms": 300_000, "log_level": 2})

        def delivered(err, msg):
            if err is not None:
                self.failed.append(str(err))
            else:
                tp = (msg.topic(), msg.partition())
                self.written[(*tp, msg.offset())] = int(msg.value()[4:].split(b";")[0])
                self.ends[tp] = max(self.ends.get(tp, 0), msg.offset() + 1)

        started = time.monotonic()
        while not self._halt.is_set():
            due = int((time.monotonic() - started) * self.rate)
            while self.sent < due:
                seq = self.sent
                topic = self.topics[seq % len(self.topics)]
                value = b"seq=%d;user=u%04d;pad=%s" % (seq, self.rng.randrange(10_000), b"x" * 40)
                try:
                    producer.produce(topic, value=value, key=b"key-%d" % self.rng.randrange(500),
                                     on_delivery=delivered)
                except BufferError:
                    producer.poll(0.05)
                    continue
                self.sent += 1
            producer.poll(0.02)
        left = producer.flush(120)
        if left:
            self.failed.append(f"{left} messages not delivered at the end")

