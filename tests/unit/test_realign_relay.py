"""A stream process reports a realignment to its host and writes nothing from there until the host said it
recorded it (stream_process._RealignRelay): a host killed right after that batch still has the row."""
from __future__ import annotations

import threading

from stream_registry.model import Realignment
from stream_registry.registry.runners import stream_process
from stream_registry.registry.runners.stream_process import Realigned, RealignRecorded, _RealignRelay

MOVE = Realignment(topic="t", partition=0, previous_offset=100, offset=50, reason="the file was cut")


def test_the_poll_thread_goes_on_only_once_the_host_recorded_the_realignment():
    sent: list[object] = []
    relay = _RealignRelay(sent.append)
    done = threading.Event()
    poll = threading.Thread(target=lambda: (relay([MOVE]), done.set()), daemon=True)
    poll.start()
    while not sent:
        done.wait(0.01)
    [message] = sent
    assert isinstance(message, Realigned) and message.moves == [MOVE] and message.request_id is not None
    assert not done.wait(0.2), "it went on before the host recorded the realignment"
    relay.recorded(RealignRecorded(message.request_id + 1))   # another one's answer changes nothing
    assert not done.wait(0.05)
    relay.recorded(RealignRecorded(message.request_id))
    assert done.wait(10)


def test_a_host_that_never_answers_holds_the_stream_only_so_long(monkeypatch):
    monkeypatch.setattr(stream_process, "REALIGN_RECORD_WAIT_S", 0.01)
    relay = _RealignRelay(lambda message: None)
    relay([MOVE])   # returns: logged, the stream goes on (its host is gone, or the pipe is)
