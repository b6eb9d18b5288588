"""Exactly-once: the sink and the stream never silently disagree (issue 34), through a real host on the embedded
cluster (one host sampling lag every 0.2 s, shared by the module: the `lag_host` and `api` fixtures).

- A sink change (`PATCH /streams/s {"sink": ...}`) continues where the stream stood: the new sink's first write
  carries the offsets over, nothing is read again, the group's commit never goes back, and the history has the
  change; `from` names another start (any offset spec), a change in the history too.
- A cypherl file cut back while the stream runs: the next append's compare-and-set sees the file as it is, the
  stream realigns to what the file holds (nothing lost, nothing twice), logged, in the history ("realigned") and
  shown by the lag verdict as REWIND. A file deleted while the stream is stopped: the same, at the assignment.

The scenario documented in docs/how-to/exactly-once.md: that page's commands are checked here.
"""
from __future__ import annotations

import threading
from collections import Counter

import pytest
from lag_host import create, lag_of
from stream_helpers import by_partition, delivered_from_file, wait_until

from stream_registry.graph.cypherl_frames import offsets_in_cypherl

pytestmark = pytest.mark.usefixtures("quick_rebalance")
TRANSFORM = "stream_helpers.offsets_transform"


def committed(api, name: str) -> dict[int, int | None]:
    return {r["partition"]: r["committed_offset"] for r in api.get(f"/streams/{name}/offsets").json()}


def history(api, name: str) -> list[dict]:
    response = api.get(f"/streams/{name}/history")
    assert response.status_code == 200, response.text
    return response.json()


class CommitWatch:
    """Samples the group's committed offsets in the background: the lowest seen per partition."""

    def __init__(self, api, name: str):
        self.lowest: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(api, name), daemon=True)

    def _run(self, api, name):
        while not self._stop.wait(0.05):
            for partition, offset in committed(api, name).items():
                if offset is not None:
                    self.lowest[partition] = min(self.lowest.get(partition, offset), offset)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(5)


def test_a_sink_change_continues_where_the_stream_stood_unless_from_names_another_start(api, kafka, tmp_path):
    topic = kafka.new_topic(partitions=2)
    kafka.produce(topic, 400, partitions=2)                     # offsets 0..199 on each partition
    a, b, c = (tmp_path / f"{x}.cypherl" for x in "abc")
    create(api, kafka, "sinkchange", topic, sink=f"cypherl://{a}", transform=TRANSFORM, delivery="exactly_once",
           batch_size=50)
    wait_until(lambda: committed(api, "sinkchange") == {0: 200, 1: 200}, 60, what="200 and 200 committed")

    with CommitWatch(api, "sinkchange") as watch:
        response = api.patch("/streams/sinkchange", json={"sink": f"cypherl://{b}"})
        assert response.status_code == 200, response.text
        kafka.produce(topic, 40, partitions=2)                  # 200..219 on each
        wait_until(lambda: len(delivered_from_file(b)) >= 40, 60, what="the new records in the new sink")
        wait_until(lambda: committed(api, "sinkchange") == {0: 220, 1: 220}, 30, what="220 and 220 committed")
    assert by_partition(delivered_from_file(b)) == {(topic, p): list(range(200, 220)) for p in range(2)}, \
        "the new sink continues where the stream stood: nothing read again"
    assert watch.lowest == {0: 200, 1: 200}, "the group's commit never went back"
    assert offsets_in_cypherl(str(b), "sinkchange") == {(topic, 0): 220, (topic, 1): 220}
    rows = [h for h in history(api, "sinkchange") if "sink change" in (h["message"] or "")]
    assert sorted((h["partition"], h["previous_offset"], h["offset"], h["status"]) for h in rows) == \
        [(0, 200, 200, "applied"), (1, 200, 200, "applied")]
    assert "continues where the stream stood" in rows[0]["message"] and len({h["change_id"] for h in rows}) == 1

    # `from` names where the new sink starts: any offset spec; a bad one is refused naming `from`, changing nothing
    refused = api.patch("/streams/sinkchange", json={"sink": f"cypherl://{c}", "from": "nonsense"})
    assert refused.status_code == 400 and refused.json()["error"].startswith("from:"), refused.text
    refused = api.patch("/streams/sinkchange", json={"batch_size": 40, "from": "earliest"})
    assert refused.status_code == 400 and refused.json()["error"].startswith("from:"), refused.text
    assert api.get("/streams/sinkchange").json()["sink"] == f"cypherl://{b}"
    assert api.get("/streams/sinkchange").json()["batch_size"] == 50
    response = api.patch("/streams/sinkchange", json={"sink": f"cypherl://{c}", "from": "earliest"})
    assert response.status_code == 200, response.text
    wait_until(lambda: len(delivered_from_file(c)) >= 440, 60, what="everything again, into the third sink")
    assert by_partition(delivered_from_file(c)) == {(topic, p): list(range(220)) for p in range(2)}
    rows = [h for h in history(api, "sinkchange") if "starts from 'earliest'" in (h["message"] or "")]
    assert sorted((h["partition"], h["previous_offset"], h["offset"]) for h in rows) == [(0, 220, 0), (1, 220, 0)]
    assert by_partition(delivered_from_file(b)) == {(topic, p): list(range(200, 220)) for p in range(2)}
    api.put("/streams/sinkchange/stop").raise_for_status()


def test_a_cypherl_file_cut_back_while_the_stream_runs_loses_nothing_and_says_so(api, kafka, tmp_path, lag_host):
    topic = kafka.new_topic(partitions=1)
    kafka.produce(topic, 100, partitions=1)
    out = tmp_path / "out.cypherl"
    create(api, kafka, "cutback", topic, sink=f"cypherl://{out}", transform=TRANSFORM, delivery="exactly_once",
           batch_size=10)
    wait_until(lambda: committed(api, "cutback") == {0: 100}, 60, what="100 committed")
    assert offsets_in_cypherl(str(out), "cutback") == {(topic, 0): 100}

    with VerdictWatch(api, "cutback") as verdicts:
        # an operator restores a copy: the file ends right after the frame that stores offset 50 (same inode)
        data = out.read_bytes()
        stored_50 = data.index(f" cutback:{topic}:0=50\n".encode())
        out.write_bytes(data[:data.index(b"\n", stored_50) + 1])
        assert offsets_in_cypherl(str(out), "cutback") == {(topic, 0): 50}
        kafka.produce(topic, 50, partitions=1)                      # 100..149

        def holds_all():
            return set(delivered_from_file(out)) == {(topic, 0, o) for o in range(150)}
        wait_until(holds_all, 60, what="offsets 0..149 in the file")
        assert [k for k, n in Counter(delivered_from_file(out)).items() if n > 1] == [], "nothing twice"
        wait_until(lambda: committed(api, "cutback") == {0: 150}, 30, what="150 committed")
        rows = [h for h in history(api, "cutback") if h["status"] == "realigned"]
        assert [(h["previous_offset"], h["offset"]) for h in rows] == [(100, 50)], history(api, "cutback")
        assert "changed by someone else" in rows[0]["message"]
        wait_until(lambda: (rows[0]["change_id"], False, True) in verdicts.rewinds, 10, what="REWIND for the cut")
    assert offsets_in_cypherl(str(out), "cutback") == {(topic, 0): 150}

    # a file deleted while the stream is stopped: at the assignment the sink holds nothing, the group 150
    api.put("/streams/cutback/stop").raise_for_status()
    out.unlink()
    with VerdictWatch(api, "cutback") as verdicts:
        api.put("/streams/cutback/start").raise_for_status()
        wait_until(lambda: len(delivered_from_file(out)) == 150, 60, what="everything read again into the new file")

        def realigned() -> list[dict]:
            return [h for h in history(api, "cutback") if h["status"] == "realigned"]
        # the stream process reports the realignment as an event: the host may write its row after the records
        wait_until(lambda: len(realigned()) == 2, 30, what="the new file's realigned row in the history")
        rows = realigned()
        assert [(h["previous_offset"], h["offset"]) for h in rows][0] == (150, 0), rows
        assert "stores no offset" in rows[0]["message"]
        wait_until(lambda: (rows[0]["change_id"], False, True) in verdicts.rewinds, 10, what="REWIND for the new file")
    assert "realigned to the sink" in lag_host.log() and "Traceback" not in lag_host.log()
    api.put("/streams/cutback/stop").raise_for_status()


class VerdictWatch(CommitWatch):
    """Samples the stream's lag verdict in the background: every (change_id, alarm) of a REWIND partition."""

    def __init__(self, api, name: str):
        super().__init__(api, name)
        self.rewinds: set[tuple[int | None, bool, bool]] = set()   # (change id, alarm, says "realigned")

    def _run(self, api, name):
        while not self._stop.wait(0.05):
            # REWIND, or OK caught up again after it (issue 46): both name the change while it is in the window
            self.rewinds |= {(p["change_id"], p["alarm"], "realigned to what its sink stores" in p["message"])
                             for p in lag_of(api, name)["partitions"]
                             if p["status"] == "REWIND" or (p["status"] == "OK" and p["change_id"] is not None)}
