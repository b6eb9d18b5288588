"""Transformations are code in a sandbox: what a stream process (or a `check` preview) may touch.

A stream process runs its caller's transformation. Before any of that code is
imported, the process confines itself for good (`confine`):

- Landlock (`landlock`): it may read and execute Python, its libraries, the
  transformation directories and the system's shared files (/usr, /etc, ...),
  read its own /proc entry, and write only its sink's directory and /dev/null.
  The host's state directory (api-token, the SQLite store and its WAL with the
  streams' credentials) and everything no rule names are denied, even when a
  granted directory contains them. The domain also keeps it from signalling or
  ptracing (/proc/<pid>/mem) processes outside it.
- a memory limit the kernel enforces: RLIMIT_DATA (private writable memory:
  the heap, thread stacks, librdkafka's queues) at the stream's cap plus the
  footprint of the interpreter when it confined itself plus LIBRDKAFKA_HEADROOM.
  An allocation past it fails at once (MemoryError) instead of growing until
  a poll notices. RLIMIT_AS is not used: glibc reserves 64 MiB of address space
  per thread arena, so address space says little about memory used.
- a process group of its own: the host kills the group when the stream's
  process ends, so a process the transformation started ends with its stream.

The host itself is made not dumpable (`harden_host`): a process of the same
user cannot read its memory through /proc/<pid>/mem. Where the kernel lacks
Landlock the host says so at start and in /health (`status`).
"""
from __future__ import annotations

import ctypes
import logging
import os
import re
import resource
import signal
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from . import landlock

log = logging.getLogger("mgstreams.sandbox")

STATE_DIR_ENV = "MGSTREAMS_SANDBOX_STATE_DIR"   # set by the host for its children: the directory they never see
WRITE_PATHS_ENV = "MGSTREAMS_SANDBOX_WRITE_PATHS"   # the operator's: files and directories streams may also write
LIBRDKAFKA_HEADROOM_MB = 256    # thread stacks (8 MiB each) and fetch queues of a consumer and its producer
PR_SET_DUMPABLE = 4
# Also the files /etc often links elsewhere (systemd-resolved's resolv.conf under /run): their targets are granted.
SYSTEM_READ = ("/usr", "/lib", "/lib32", "/lib64", "/etc", "/opt", "/sys/devices/system/cpu",
               "/dev/urandom", "/dev/random", "/dev/zero", "/etc/resolv.conf", "/etc/hosts", "/etc/localtime",
               "/etc/nsswitch.conf", "/etc/ssl/certs/ca-certificates.crt")
SYSTEM_WRITE = ("/dev/null",)


@dataclass(frozen=True)
class Confinement:
    """What `confine` did: the Landlock ABI in force (0: none) and the memory limit in bytes (None: none)."""
    landlock_abi: int
    data_limit: int | None


def harden_host() -> bool:
    """Make this process not dumpable (its /proc/<pid>/mem unreadable by other processes of its user);
    whether the kernel agreed."""
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0


def status() -> dict[str, object]:
    """The sandbox as /health shows it: the kernel's Landlock ABI, and a warning where there is none."""
    abi = landlock.abi()
    shown: dict[str, object] = {"landlock_abi": abi}
    if abi < 1:
        shown["warning"] = ("this kernel has no Landlock: transformations are not confined to their files "
                            "(they can read the state directory)")
    return shown


def confine(*, write: Iterable[str] = (), read: Iterable[str] = (), walk: Iterable[str] = (),
            memory_mb: int | None = None, environ: Mapping[str, str] | None = None) -> Confinement:
    """Confine this process (see the module docstring): read Python, its libraries and `read`; write `write`;
    list the directories beneath `walk` (names, not contents); never the host's state directory's files.
    Without Landlock in the kernel, only the memory limit applies."""
    env: Mapping[str, str] = os.environ if environ is None else environ
    data_limit = _limit_memory(memory_mb) if memory_mb else None
    state_dir = env.get(STATE_DIR_ENV) or None
    abi = landlock.abi()
    if abi < 1:
        return Confinement(0, data_limit)
    excluded = os.path.realpath(state_dir) if state_dir else None
    rules: list[tuple[str, int]] = []
    granted_write = [os.path.realpath(p) for p in write]
    for path in _read_paths(read):
        rules += [(p, landlock.READ) for p in _except(path, excluded, granted_write)]
    rules += [(q, landlock.WRITE) for p in granted_write for q in _except(p, excluded, [])]
    rules += [(p, landlock.READ | landlock.WRITE_FILE) for p in SYSTEM_WRITE]
    rules += [(os.path.realpath(p), landlock.READ_DIR) for p in walk]
    rules.append((f"/proc/{os.getpid()}", landlock.READ_FILE | landlock.READ_DIR))
    return Confinement(landlock.restrict_self(rules), data_limit)


def _read_paths(extra: Iterable[str]) -> list[str]:
    """Python (prefixes, every sys.path entry, the interpreter's own file), the system's and `extra`."""
    paths = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, sys.executable,
             *(entry or os.getcwd() for entry in sys.path), *SYSTEM_READ, *extra]
    real = []
    for path in paths:
        for form in (os.path.abspath(path), os.path.realpath(path)):
            if form not in real and os.path.exists(form):
                real.append(form)
    return real


def _except(path: str, excluded: str | None, written: list[str]) -> list[str]:
    """`path`, or when it contains `excluded` (or a directory granted for writing, which gets its own rule) the
    entries beneath it that do not, recursively: Landlock only grants, so a denied directory inside a granted
    one is granted around."""
    inner = [p for p in ([excluded] if excluded else []) + written if _within(p, path)]
    if not inner:
        return [path]
    if path in inner or not os.path.isdir(path):
        return []
    kept = []
    for name in sorted(os.listdir(path)):
        kept += _except(os.path.join(path, name), excluded, written)
    return kept


def _within(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


def _limit_memory(memory_mb: int) -> int:
    """RLIMIT_DATA at the cap plus what this process uses now plus librdkafka's headroom; the limit in bytes."""
    limit = (memory_mb + LIBRDKAFKA_HEADROOM_MB) * 2**20 + data_in_use()
    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
    return limit


def data_in_use() -> int:
    """This process's private writable memory (VmData), what RLIMIT_DATA counts."""
    with open("/proc/self/status", "rb") as status_file:
        for line in status_file:
            if line.startswith(b"VmData:"):
                return int(line.split()[1]) * 1024
    return 0


# -- what a stream process and a preview may touch ------------------------------------------
def transformation_paths(environ: Mapping[str, str] | None = None) -> list[str]:
    """Where transformations and the files streams name are read from: the package's own tree (the bundled
    query modules), $MGSTREAMS_QUERY_MODULES_DIR and $MGSTREAMS_ALLOWED_FILE_DIRS."""
    from ..allowlists import ALLOWED_FILE_DIRS_ENV
    from ..graph.transform.loader import QUERY_MODULES_ENV

    env: Mapping[str, str] = os.environ if environ is None else environ
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    listed = [d.strip() for d in re.split(r"[:,]", env.get(QUERY_MODULES_ENV, "")) if d.strip()]
    files = [d.strip() for d in env.get(ALLOWED_FILE_DIRS_ENV, "").split(os.pathsep) if d.strip()]
    return [root, *(os.path.abspath(d) for d in listed), *files]


def sink_write_paths(sink: str, output: object) -> tuple[list[str], list[str]]:
    """(what a file sink writes: its file and the file's directory, what it walks down from: the directory the
    policy admitted it under); nothing for a sink that writes no file. The file and its directories are made
    first, as the sink would make them (one component at a time, no symlink followed), so that they can be
    granted by name, and a directory holding the state directory is granted around it."""
    from ..graph.sinks.cypherl import DIR_MODE, FILE_MODE, CypherlSettings
    from ..graph.sinks.schemes import parse_sink_uri
    from ..safe_paths import open_beneath

    _, settings = parse_sink_uri(sink, output)   # type: ignore[arg-type]
    if not isinstance(settings, CypherlSettings):
        return [], []
    top = settings.admitted_under or os.path.dirname(settings.path)
    try:
        os.makedirs(top, mode=DIR_MODE, exist_ok=True)
        os.close(open_beneath(top, os.path.relpath(settings.path, top), os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                              FILE_MODE, dir_mode=DIR_MODE, make_dirs=True))
    except (OSError, ValueError):
        pass   # the sink says why when it opens it
    return [os.path.dirname(settings.path), settings.path], [top]


def confine_stream(sink: str, output: object, memory_mb: int | None) -> Confinement:
    """A stream process's confinement, before its transformation is imported; logged once."""
    try:
        os.setpgid(0, 0)   # a group of its own: the host ends it with the stream (end_group)
    except OSError:
        pass
    write, walked = sink_write_paths(sink, output)
    write += [p.strip() for p in os.environ.get(WRITE_PATHS_ENV, "").split(os.pathsep) if os.path.isabs(p.strip())]
    done = confine(write=write, walk=walked, read=transformation_paths(), memory_mb=memory_mb)
    log.debug("confined: Landlock ABI %d, data limit %s", done.landlock_abi, done.data_limit)
    return done


def end_group(pid: int | None, grace: float = 5.0) -> None:
    """Once the process `pid` (a group leader made by confine_stream) has exited, kill what is left of its
    group: the processes its transformation started. Called by the process that spawned it, before reaping."""
    if pid is None:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is not None:
                break   # exited, not yet reaped: its pid still names the group
        except ChildProcessError:
            break       # reaped already (multiprocessing's cleanup): its group's members keep the id
        time.sleep(0.01)
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
