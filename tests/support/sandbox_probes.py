"""Transformations that attack their host from inside a stream process (issue 44), and say what they got.

Each message's payload is a JSON map naming one attempt; the transformation answers one statement per message,
`RETURN $attack, $outcome`, where outcome is `ok <detail>` or the exception's class name. A stream's cypherl
file, or a `check` preview, shows them.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys


def _read(path: str) -> str:
    with open(path, "rb") as handle:
        return f"ok {len(handle.read())} bytes"


def _write(path: str) -> str:
    with open(path, "w") as handle:
        handle.write("planted")
    return "ok written"


def _scan_memory(pid: int, needle: str) -> str:
    """Read the process's writable memory through /proc/<pid>/mem, as the attack of issue 44 did; the count of
    `needle` found (the test knows the token; the attacker found it by its shape)."""
    found = 0
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for line in maps:
            span, perms = line.split()[:2]
            if "rw" not in perms:
                continue
            start, end = (int(x, 16) for x in span.split("-"))
            try:
                mem.seek(start)
                found += mem.read(min(end - start, 64 << 20)).count(needle.encode())
            except OSError:
                continue
    return f"ok {found} found"


def _signal(pid: int) -> str:
    os.kill(pid, 0)
    return "ok may signal"


def _spawn_sleeper(marker: str) -> str:
    """Start a process that outlives this call, and write its pid to stdout of the statement."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return f"ok pid {child.pid} {marker}"


_ATTACKS = {
    "read": lambda a: _read(a["path"]),
    "write": lambda a: _write(a["path"]),
    "mem": lambda a: _scan_memory(os.getppid(), a["needle"]),
    "environ": lambda a: _read(f"/proc/{os.getppid()}/environ"),
    "signal": lambda a: _signal(os.getppid()),
    "spawn": lambda a: _spawn_sleeper(a.get("marker", "")),
    "allocate": lambda a: f"ok {len(b'x' * (int(a['mib']) << 20)) >> 20} MiB",
}


def attack(messages):
    out = []
    for i in range(messages.total_messages()):
        wanted = json.loads(messages.message_at(i).payload())
        try:
            outcome = _ATTACKS[wanted["kind"]](wanted)
        except MemoryError:
            raise   # the stream's to handle, as any transformation's
        except Exception as exc:  # what the sandbox answered
            outcome = type(exc).__name__
        out.append({"query": "RETURN $attack, $outcome",
                    "parameters": {"attack": wanted.get("name", wanted["kind"]), "outcome": outcome}})
    return out


def outcomes(statements: list[str]) -> dict[str, str]:
    """{attack: outcome} from a cypherl file's statement lines."""
    found = {}
    for line in statements:
        match = re.fullmatch(r'RETURN "(.*)", "(.*)";', line)   # parameters rendered inline
        if match:
            found[match.group(1).replace("\\'", "'")] = match.group(2)
    return found


