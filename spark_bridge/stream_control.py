"""The control channel between whoever owns a Spark stream (the host) and its running query's reader.

The reader lives where Spark plans micro-batches: the driver's Python worker (classic PySpark) or the Spark
Connect server's. Nothing in the owner's process can reach it, so changes go through a directory both see
(a local directory, or a shared filesystem for a remote Spark Connect server), in plain JSON files:

- `control.json`: the epoch counter and the changes not yet taken by the reader (`request` appends one,
  `cancel` removes one that was not taken), each `{"change_id", "epoch", "targets": {"t:0": 5}, "onward":
  ["t:0"]}` (`onward`: targets that never move a partition back, stream_offsets);
- `taken/<epoch>.json`: a change the reader took into a micro-batch's end offset (latestOffset); a cancel
  after that is too late, whatever happens next;
- `applied/<change_id>.json`: what a change did per partition, written when the first micro-batch of its
  epoch is planned (partitions(start, end)); replayed batches write the same answer again;
- `moved/<epoch>-<digest>.json`: an exactly-once move (an epoch's start) stored in the graph, so that a
  replayed planning does not store it again;
- `notes.jsonl`: what the reader states on its own: where a (re)started query resumes when its checkpoint,
  the group's committed offsets or the graph's stored offsets differ; each line `{"kind", ...}`.

Every read-modify-write holds `control.lock` (flock: one machine; see the report for a shared filesystem).
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from stream_registry.errors import ConfigError, StreamError
from stream_registry.model import PartitionKey

from .stream_offsets import Move, offsets_from_json, offsets_to_json, parse_tp, tp_key

CONTROL = "control.json"


@dataclass(frozen=True)
class Applied:
    """What one change did, per partition: status (`applied`, `clamped`, `superseded`, `gone`), the offset the
    partition was planned from, and where it stood before; `notes`: why a partition went elsewhere than its
    target (an onward target it already stood past: it stayed where it stood)."""
    change_id: int
    epoch: int
    batch_id: int | None
    partitions: Mapping[PartitionKey, tuple[str, int | None, int | None]]
    notes: Mapping[PartitionKey, str] = field(default_factory=dict)


class ControlChannel:
    """One stream's control directory (created if missing)."""

    def __init__(self, directory: str | os.PathLike):
        self.dir = Path(directory)
        if not str(directory):
            raise ConfigError("controlDir: required (the stream's control directory)")
        for sub in ("taken", "applied", "moved"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)

    # -- the owner's side --------------------------------------------------------------------------------
    def request(self, change_id: int, targets: Mapping[PartitionKey, int],
                onward: Iterable[PartitionKey] = ()) -> int:
        """Queue a change (absolute target per partition; those of `onward` never move a partition back: one
        that stands past its target at the boundary stays there); its epoch, applied at the next micro-batch."""
        if not targets:
            raise ConfigError("targets: a change moves at least one partition")
        change: dict = {"change_id": change_id, "targets": offsets_to_json(targets)}
        onward_keys = sorted(tp_key(tp) for tp in onward if tp in targets)
        if onward_keys:
            change["onward"] = onward_keys
        with self._locked() as state:
            epoch = state["next_epoch"]
            state["next_epoch"] = epoch + 1
            state["changes"].append({**change, "epoch": epoch})
        return epoch

    def cancel(self, change_id: int) -> bool:
        """Withdraw a change the reader has not taken; False when it was taken (it will be, or was, applied)."""
        with self._locked() as state:
            kept = [c for c in state["changes"] if c["change_id"] != change_id]
            found = len(kept) != len(state["changes"])
            state["changes"] = kept
        return found

    def applied(self, change_id: int) -> Applied | None:
        """The answer of a change once its first micro-batch was planned; None before."""
        path = self.dir / "applied" / f"{change_id}.json"
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        return Applied(raw["change_id"], raw["epoch"], raw.get("batch_id"),
                       {parse_tp(k): (v["status"], v.get("offset"), v.get("previous"))
                        for k, v in raw["partitions"].items()},
                       {parse_tp(k): v["note"] for k, v in raw["partitions"].items() if v.get("note")})

    def wait_applied(self, change_id: int, timeout: float) -> Applied:
        """The change's answer, waited for (a state, polled): StreamError naming the change after `timeout`."""
        deadline = time.monotonic() + timeout
        while (answer := self.applied(change_id)) is None:
            if time.monotonic() > deadline:
                raise StreamError(f"change {change_id}: not applied within {timeout:g} s (the query plans no "
                                  f"micro-batch: is it running?)")
            time.sleep(0.05)
        return answer

    def notes(self) -> list[dict]:
        try:
            return [json.loads(line) for line in (self.dir / "notes.jsonl").read_text().splitlines() if line]
        except FileNotFoundError:
            return []

    # -- the reader's side -----------------------------------------------------------------------------
    def take(self, after_epoch: int) -> list[Move]:
        """The queued changes of epochs after `after_epoch`, oldest first, marked taken (a restarted query whose
        checkpoint ends before a taken change takes it again: it was never planned)."""
        with self._locked() as state:
            for change in state["changes"]:
                _write_atomic(self.dir / "taken" / f"{change['epoch']}.json", change)
            state["changes"] = []    # taken: a cancel now is too late (the taken file is the change's truth)
        taken = [json.loads(p.read_text()) for p in (self.dir / "taken").glob("*.json")]
        pending = {c["epoch"]: c for c in taken
                   if c["epoch"] > after_epoch and self.applied(c["change_id"]) is None}
        return [Move(c["change_id"], c["epoch"], offsets_from_json(c["targets"], "targets"),
                     frozenset(parse_tp(k) for k in c.get("onward", ())))
                for _, c in sorted(pending.items())]

    def new_epoch(self) -> int:
        """An epoch number for a move the reader makes itself (a realignment to the graph)."""
        with self._locked() as state:
            epoch = state["next_epoch"]
            state["next_epoch"] = epoch + 1
        return epoch

    def mark_moved(self, epoch: int, origin: Mapping[PartitionKey, int]) -> bool:
        """Whether the move of a micro-batch's end (its epoch and origin) is still to be stored in the graph."""
        return not self._moved_path(epoch, origin).exists()

    def moved_done(self, epoch: int, origin: Mapping[PartitionKey, int]) -> None:
        _write_atomic(self._moved_path(epoch, origin), offsets_to_json(origin))

    def _moved_path(self, epoch: int, origin: Mapping[PartitionKey, int]) -> Path:
        digest = hashlib.sha1(json.dumps(offsets_to_json(origin)).encode()).hexdigest()[:16]
        return self.dir / "moved" / f"{epoch}-{digest}.json"

    def targets_of(self, change_id: int) -> dict[PartitionKey, int]:
        for path in (self.dir / "taken").glob("*.json"):
            change = json.loads(path.read_text())
            if change["change_id"] == change_id:
                return offsets_from_json(change["targets"], "targets")
        return {}

    def record_applied(self, answer: Applied) -> None:
        path = self.dir / "applied" / f"{answer.change_id}.json"
        if path.exists():
            return   # a replayed micro-batch: the first planning said it
        partitions = {tp_key(tp): {"status": s, "offset": o, "previous": p}
                      for tp, (s, o, p) in sorted(answer.partitions.items())}
        for tp, note in answer.notes.items():
            partitions[tp_key(tp)]["note"] = note
        _write_atomic(path, {"change_id": answer.change_id, "epoch": answer.epoch, "batch_id": answer.batch_id,
                             "partitions": partitions})

    def note(self, kind: str, **fields) -> None:
        line = json.dumps({"kind": kind, "at": time.time(), **fields}, sort_keys=True)
        with self._locked(), open(self.dir / "notes.jsonl", "a") as out:
            out.write(line + "\n")

    # -- internals -------------------------------------------------------------------------------------
    @contextmanager
    def _locked(self) -> Iterator[dict]:
        with open(self.dir / "control.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                path = self.dir / CONTROL
                try:
                    state = json.loads(path.read_text())
                except FileNotFoundError:
                    state = {"next_epoch": 1, "changes": []}
                before = json.dumps(state, sort_keys=True)
                yield state
                if json.dumps(state, sort_keys=True) != before:
                    _write_atomic(path, state)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)


def _write_atomic(path: Path, value: object) -> None:
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temp.write_text(json.dumps(value, sort_keys=True))
    os.replace(temp, path)
