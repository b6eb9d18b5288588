"""Are the owner's calls answered while processes without the token load the host?

Through a real host (`mgstreams serve`, a child process, loopback only): the
attack of issue 44. `--connections` connections spread over `--addresses`
loopback addresses (127.0.0.2, 127.0.0.3, ...) each send `GET /health` every
`--interval` seconds on a kept-alive connection and reconnect at once when the
host closes them, for `--seconds`. Meanwhile the owner makes `--calls`
authenticated `GET /streams` calls, each on a new connection (as a CLI does).
The same calls are timed first with no load, in the same run.

    .venv/bin/python bench/unauthenticated_load.py [--connections 800] [--addresses 49] [--seconds 16]

Prints the owner's failures (the figure: 0), the attack's requests and reconnections, and
`ratio: X` = the owner's median latency under the load / without it.
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mgstreams.host.connections import MAX_CONNECTIONS_ENV  # noqa: E402
from mgstreams.host_process import HostProcess  # noqa: E402

TOKEN = "bench-owner-token-" + "x" * 32


@dataclass
class Attack:
    requests: int = 0
    connections: int = 0
    refused: int = 0
    stop: threading.Event = field(default_factory=threading.Event)


async def _one(port: int, source: str, interval: float, attack: Attack) -> None:
    request = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    while not attack.stop.is_set():
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
        except OSError:
            attack.refused += 1
            await asyncio.sleep(0.05)
            continue
        attack.connections += 1
        try:
            while not attack.stop.is_set():
                writer.write(request)
                await writer.drain()
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
                length = int(next((line.split(b":")[1] for line in head.split(b"\r\n")
                                   if line.lower().startswith(b"content-length:")), b"0"))
                await reader.readexactly(length)
                attack.requests += 1
                await asyncio.sleep(interval)
        except (TimeoutError, OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass
        finally:
            writer.close()


def run_attack(port: int, connections: int, addresses: int, interval: float, attack: Attack) -> threading.Thread:
    """The attackers on an event loop of their own thread, until `attack.stop` is set."""
    async def main() -> None:
        sources = [f"127.0.0.{2 + i % addresses}" for i in range(connections)]
        tasks = [asyncio.create_task(_one(port, source, interval, attack)) for source in sources]
        while not attack.stop.is_set():
            await asyncio.sleep(0.1)
        await asyncio.wait(tasks, timeout=15)
    thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    thread.start()
    return thread


def owner_calls(url: str, calls: int, pause: float = 0.2) -> tuple[list[float], list[str]]:
    """`calls` authenticated calls, each on a new connection: (latencies of those answered 200, failures)."""
    seconds, failures = [], []
    for _ in range(calls):
        started = time.monotonic()
        try:
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as http:
                status = http.get("/streams").status_code
        except httpx.HTTPError as exc:
            failures.append(type(exc).__name__)
        else:
            if status == 200:
                seconds.append(time.monotonic() - started)
            else:
                failures.append(f"HTTP {status}")
        time.sleep(pause)
    return seconds, failures


def measure(host_url: str, *, connections: int, addresses: int, interval: float, seconds: float, calls: int
            ) -> tuple[Attack, list[float], list[str]]:
    """Owner's calls under the attack (started, then `seconds` / 8 later the calls, until `seconds`)."""
    port = int(host_url.rsplit(":", 1)[1])
    attack = Attack()
    thread = run_attack(port, connections, addresses, interval, attack)
    deadline = time.monotonic() + seconds
    time.sleep(min(seconds / 8, 2.0))
    answered, failures = owner_calls(host_url, calls, pause=max(0.0, (deadline - time.monotonic()) / calls - 0.05))
    attack.stop.set()
    thread.join(20)
    return attack, answered, failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=800)
    parser.add_argument("--addresses", type=int, default=49)
    parser.add_argument("--interval", type=float, default=2.5)
    parser.add_argument("--seconds", type=float, default=16)
    parser.add_argument("--calls", type=int, default=25)
    parser.add_argument("--max-connections", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        host = HostProcess(Path(tmp) / "state", token=TOKEN,
                           env={MAX_CONNECTIONS_ENV: str(args.max_connections)}).start()
        try:
            quiet, quiet_failures = owner_calls(host.url, args.calls, pause=0.05)
            attack, loaded, failures = measure(host.url, connections=args.connections, addresses=args.addresses,
                                               interval=args.interval, seconds=args.seconds, calls=args.calls)
        finally:
            host.stop()
    print(f"attack: {args.connections} connections from {args.addresses} loopback addresses, GET /health every "
          f"{args.interval:g} s for {args.seconds:g} s: {attack.requests} requests answered, {attack.connections} "
          f"connections opened, {attack.refused} connects failed")
    print(f"owner without load: {len(quiet)} of {args.calls} answered, median "
          f"{statistics.median(quiet) * 1000:.1f} ms")
    shown = f", median {statistics.median(loaded) * 1000:.1f} ms, max {max(loaded) * 1000:.1f} ms" if loaded else ""
    print(f"owner under load: {len(loaded)} of {args.calls} answered{shown}; failures: {len(failures)} "
          f"{sorted(set(failures))}")
    if quiet and loaded:
        print(f"ratio: {statistics.median(loaded) / statistics.median(quiet):.2f}")
    return 0 if not failures and not quiet_failures else 1


if __name__ == "__main__":
    sys.exit(main())
