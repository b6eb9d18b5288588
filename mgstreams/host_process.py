"""A stream host in a child process: `python -m mgstreams serve` on a free loopback port.

For programs that own the host they drive (the demo, benchmarks, tests): the
child is a real process boundary, as in production. It is a client of the host,
not part of it, so it lives beside the client rather than in `host/`. `spawn()` returns at once,
so the caller can work while the host imports and binds; `wait_ready()` reads
the URL from the host's ready line; `terminate()` sends SIGTERM and returns the
exit status, which a clean shutdown makes 0. Given no token, the child makes one
in its state directory; `token` holds it once the child serves.
"""
from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import BinaryIO

from stream_registry.errors import StreamError

from .client import HostClient
from .settings import TOKEN_ENV, TOKEN_FILE_NAME
from .tokens import read_token_file

_READY = re.compile(rb"serving at (http://\S+)")


class HostProcess:
    """One `mgstreams serve --state-dir DIR --listen 127.0.0.1:0` child; stderr (its log) goes to `log_path`."""

    def __init__(self, state_dir: str | os.PathLike, *, log_path: str | os.PathLike | None = None,
                 token: str | None = None, env: Mapping[str, str] | None = None,
                 extra_args: Sequence[str] = (), cwd: str | os.PathLike | None = None):
        self.state_dir = Path(state_dir)
        self.log_path = Path(log_path) if log_path else self.state_dir.parent / f"{self.state_dir.name}-host.log"
        self.token = token
        self.env = {**os.environ, **(env or {})}
        if token:
            self.env[TOKEN_ENV] = token
        self.extra_args = tuple(extra_args)
        self.cwd = cwd
        self.proc: subprocess.Popen | None = None
        self.url: str | None = None
        self._log: BinaryIO | None = None

    # -- lifecycle -------------------------------------------------------------------
    def spawn(self) -> HostProcess:
        """Start the child without waiting for it to serve."""
        self.state_dir.parent.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mgstreams", "serve", "--state-dir", str(self.state_dir),
             "--listen", "127.0.0.1:0", *self.extra_args],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self._log, env=self.env, cwd=self.cwd)
        return self

    def wait_ready(self, timeout: float = 30.0) -> str:
        """The host's URL once it serves; StreamError (with its log's tail) if it exits or stays silent."""
        if self.url:
            return self.url
        proc = self.proc if self.proc is not None else self.spawn().proc
        assert proc is not None and proc.stdout is not None
        fd = proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        seen = b""
        while (remaining := deadline - time.monotonic()) > 0:
            readable, _, _ = select.select([fd], [], [], remaining)
            if not readable:
                break
            chunk = os.read(fd, 4096)
            if not chunk:
                break                       # the child closed stdout: it exited
            seen += chunk
            match = _READY.search(seen)
            if match:
                self.url = match.group(1).decode()
                self.token = self.token or self._served_token()
                # Keep draining stdout so a chatty host can never block on a full pipe.
                threading.Thread(target=self._drain, daemon=True, name="mgstreams-host-stdout").start()
                return self.url
        code = proc.poll()
        tail = " | ".join(self.log().strip().splitlines()[-3:])
        self.stop()
        state = f"exited with status {code}" if code is not None else f"did not serve within {timeout:g} s"
        raise StreamError(f"host: `mgstreams serve` {state}; log {self.log_path}: {tail or '(empty)'}")

    def start(self, timeout: float = 30.0) -> HostProcess:
        self.spawn()
        self.wait_ready(timeout)
        return self

    def terminate(self, timeout: float = 60.0) -> int:
        """SIGTERM (finish batches, commit, close consumers); the exit status. Raises TimeoutExpired."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self, timeout: float = 60.0) -> int | None:
        """terminate(), falling back to SIGKILL; releases the pipe and the log. The exit status."""
        try:
            code = self.terminate(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            code = None
        if self.proc is not None and self.proc.stdout:
            self.proc.stdout.close()
        if self._log is not None:
            self._log.close()
            self._log = None
        return code

    def __enter__(self) -> HostProcess:
        return self.start() if self.proc is None else self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- use ---------------------------------------------------------------------------
    def client(self, **kwargs) -> HostClient:
        return HostClient(self.wait_ready(), token=self.token, **kwargs)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def _served_token(self) -> str | None:
        """The token the child serves with when none was given: its --token-file, or the one it generated."""
        args = list(self.extra_args)
        if "--no-token" in args:
            return None
        path = args[args.index("--token-file") + 1] if "--token-file" in args else self.state_dir / TOKEN_FILE_NAME
        return read_token_file(path, "token_file")

    def _drain(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        try:
            while os.read(fd, 4096):
                pass
        except OSError:
            pass                            # closed by stop()
