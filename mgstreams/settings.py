"""Where the application's defaults live: the host's address, its token, its state directory, its sinks.

The CLI, the client, the host, the host launcher and `mgstreams backfill` read
these names and values from here and nowhere else. Two copies stay outside by
necessity: the query module (`query_modules/streams.py`, stdlib-only, loaded by
Memgraph) and `spark_bridge.source_options` (a library below the application);
`tests/test_settings.py` checks that they agree with this module.
"""
from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from stream_registry.errors import ConfigError
from stream_registry.safe_paths import owner_name

# -- the host's address ----------------------------------------------------------------
DEFAULT_LISTEN = "127.0.0.1:8765"
DEFAULT_URL = f"http://{DEFAULT_LISTEN}"
URL_ENV = "MGSTREAMS_URL"                 # where clients (CLI, query module, demo) find the host

# -- the API token ---------------------------------------------------------------------
TOKEN_ENV = "MGSTREAMS_TOKEN"
TOKEN_FILE_ENV = "MGSTREAMS_TOKEN_FILE"   # where clients (CLI, query module) read the token from
TOKEN_FILE_NAME = "api-token"             # the token a host given none generates, in its state directory
TOKEN_FD_ENV = "MGSTREAMS_TOKEN_FD"       # a pipe a host re-executed without $MGSTREAMS_TOKEN reads it from

# -- the host's state and streams ------------------------------------------------------
STATE_DIR_ENV = "MGSTREAMS_STATE_DIR"
STATE_DIR_NAME = "mgstreams"              # under $XDG_STATE_HOME (~/.local/state)
DEFAULT_SINK_ENV = "MGSTREAMS_DEFAULT_SINK"
DEFAULT_SINK = "bolt://localhost:7687"    # the sink of a stream created without one
LOG_LEVEL_ENV = "MGSTREAMS_LOG_LEVEL"

# -- backfill ------------------------------------------------------------------------------
SINK_PASSWORD_ENV = "MGSTREAMS_SINK_PASSWORD"   # the Bolt password of `mgstreams backfill --sink-username`
SPARK_REMOTE_ENV = "MGSTREAMS_SPARK_REMOTE"


def state_dir_candidates() -> list[Path]:
    """The default state directory, best first: $MGSTREAMS_STATE_DIR alone when set, else
    $XDG_STATE_HOME/mgstreams (~/.local/state/mgstreams), then a per-user directory in the temp dir."""
    configured = os.environ.get(STATE_DIR_ENV)
    if configured:
        return [Path(configured)]
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return [Path(base) / STATE_DIR_NAME, Path(tempfile.gettempdir()) / f"mgstreams-{os.getuid()}"]


def default_state_dir() -> Path:
    """$MGSTREAMS_STATE_DIR, else $XDG_STATE_HOME/mgstreams (~/.local/state/mgstreams), else a private tmp dir.

    A fallback directory is created 0700 and used only while it is private: a
    directory (not a symlink) owned by this user and writable by no one else.
    Otherwise ConfigError naming it and its owner: in a shared /tmp another user
    could have made it first, to read the streams' secrets or plant state.
    """
    candidates = state_dir_candidates()
    if len(candidates) == 1:
        return candidates[0]
    candidate, fallback = candidates
    try:
        candidate.parent.mkdir(parents=True, exist_ok=True)
        usable = _private_dir(candidate)
    except OSError:
        usable = False
    if usable:
        return candidate
    try:
        _private_dir(fallback)
    except OSError as exc:
        raise ConfigError(f"state_dir: cannot create {str(fallback)!r}: {exc.strerror}; "
                          f"pass --state-dir or set {STATE_DIR_ENV}") from None
    return fallback


def _private_dir(path: Path) -> bool:
    """Create `path` 0700 if missing; True once it is a private directory of ours, False if we cannot write it.

    OSError if it cannot be created; ConfigError if it exists and is not private.
    """
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        kind = "a symlink" if stat.S_ISLNK(info.st_mode) else "not a directory"
        raise ConfigError(f"state_dir: {str(path)!r} is {kind} (owner {owner_name(info.st_uid)}); refusing it as "
                          f"the default state directory: pass --state-dir or set {STATE_DIR_ENV}")
    if info.st_uid != os.getuid():
        raise ConfigError(f"state_dir: {str(path)!r} is owned by {owner_name(info.st_uid)}, not by "
                          f"{owner_name(os.getuid())}; refusing it as the default state directory: pass --state-dir "
                          f"or set {STATE_DIR_ENV}")
    if info.st_mode & 0o022:
        raise ConfigError(f"state_dir: {str(path)!r} (owner {owner_name(info.st_uid)}) is group- or world-writable "
                          f"(mode {stat.S_IMODE(info.st_mode):04o}); refusing it as the default state directory: "
                          f"chmod 700 it, pass --state-dir or set {STATE_DIR_ENV}")
    return os.access(path, os.W_OK | os.X_OK)
