"""Single key presses from a terminal, for live views (`mgstreams top`'s q)."""
from __future__ import annotations

import os
import select
import sys
import time


class Keys:
    """Single key presses from a terminal (cbreak mode, restored on exit); without one, only the clock."""

    def __enter__(self) -> Keys:
        self._fd: int | None = None
        self._restore_fd: int | None = None
        self._saved = None
        if sys.stdin.isatty():
            import termios
            import tty
            self._fd = sys.stdin.fileno()
            self._saved = termios.tcgetattr(self._fd)
            tty.setcbreak(self._fd)
        self._restore_fd = self._fd
        return self

    def wait(self, timeout: float) -> str:
        """Keys pressed within `timeout` seconds ("" if none)."""
        if self._fd is None:
            time.sleep(timeout)
            return ""
        readable, _, _ = select.select([self._fd], [], [], timeout)
        data = os.read(self._fd, 64) if readable else b""
        if readable and not data:   # the terminal went away: no keys any more, only the clock
            self._fd = None
            time.sleep(timeout)
        return data.decode(errors="ignore")

    def __exit__(self, *exc) -> None:
        if self._saved is not None and self._restore_fd is not None:
            import termios
            termios.tcsetattr(self._restore_fd, termios.TCSADRAIN, self._saved)
