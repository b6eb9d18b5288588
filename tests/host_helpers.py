"""A real stream host (`mgstreams serve`) in a child process, for tests that cross its boundary."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from mgstreams.client import HostClient

ROOT = Path(__file__).resolve().parent.parent
_READY = re.compile(r"serving at (http://\S+)")


class HostProcess:
    """`python -m mgstreams serve` on a free loopback port; `url` once it serves."""

    def __init__(self, state_dir: str | os.PathLike, *, token: str | None = None, env: dict | None = None,
                 extra_args: tuple[str, ...] = ()):
        self.state_dir = Path(state_dir)
        self.token = token
        self.env = {**os.environ, "PYTHONPATH": f"{ROOT / 'tests'}{os.pathsep}{ROOT}", **(env or {})}
        if token:
            self.env["MGSTREAMS_TOKEN"] = token
        self.extra_args = extra_args
        self.proc: subprocess.Popen | None = None
        self.url: str | None = None
        self.log_path = self.state_dir.parent / f"{self.state_dir.name}-host.log"

    def start(self, timeout: float = 30.0) -> "HostProcess":
        self.state_dir.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mgstreams", "serve", "--state-dir", str(self.state_dir),
             "--listen", "127.0.0.1:0", *self.extra_args],
            stdout=subprocess.PIPE, stderr=self._log, env=self.env, cwd=ROOT)
        deadline = time.monotonic() + timeout
        line = b""
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            match = _READY.search(line.decode())
            if match:
                self.url = match.group(1)
                return self
        code = self.proc.poll()
        raise AssertionError(f"host did not start (exit {code}): {self.log()}")

    def client(self, **kwargs) -> HostClient:
        return HostClient(self.url, token=self.token, **kwargs)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def terminate(self, timeout: float = 60.0) -> int:
        """SIGTERM; wait for the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        try:
            self.terminate()
        except subprocess.TimeoutExpired:
            self.kill()
        if self.proc is not None and self.proc.stdout:
            self.proc.stdout.close()
        if getattr(self, "_log", None):
            self._log.close()
