"""Exclusive ownership of a state directory: one hosting registry at a time.

Two registries running the same streams would be two consumers of one group,
every write doubled. An advisory `flock` on `<state dir>/host.lock` makes the
second one fail at once, naming the holder; the kernel drops the lock when the
holder dies, however it dies, so a SIGKILLed host never blocks its successor.
"""
from __future__ import annotations

import fcntl
import os
from pathlib import Path

from ...errors import StreamStateError

LOCK_FILE = "host.lock"


class StateLock:
    def __init__(self, state_dir: str | os.PathLike, holder: str):
        self.path = Path(state_dir) / LOCK_FILE
        try:
            Path(state_dir).mkdir(parents=True, exist_ok=True, mode=0o700)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise StreamStateError(f"state_dir: cannot use {str(state_dir)!r}: {exc.strerror}") from None
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            current = os.pread(self._fd, 4096, 0).decode(errors="replace").strip() or "another process"
            os.close(self._fd)
            raise StreamStateError(f"state_dir: {str(state_dir)!r} is already hosted by {current}; "
                                   f"one host per state directory") from None
        self.describe(holder)

    def describe(self, holder: str) -> None:
        """Say who holds the lock (shown to the next one that tries)."""
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, holder.encode() + b"\n", 0)

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = -1
