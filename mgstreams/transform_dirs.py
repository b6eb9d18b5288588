"""Where a host finds transformations, recorded in its state directory, so that `mgstreams backfill --stream`
finds the transformations the host finds, from any shell.

A host loads transformations from the bundled query modules, the directories of its own
$MGSTREAMS_QUERY_MODULES_DIR (relative ones from its working directory) and the packages of
$MGSTREAMS_TRANSFORM_PACKAGES. A backfill runs elsewhere: another shell, another working directory, without the
host's environment. The host writes its directories, made absolute, to `<state dir>/transform-dirs.json` at
every start; a backfill of a registered stream adds them to its own. The state directory is private to its
owner (the host refuses one others can write), so the list is the operator's own.
"""
from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

from stream_registry.graph.transform import QUERY_MODULES_ENV
from stream_registry.safe_paths import check_private_dir

FILE_NAME = "transform-dirs.json"
OWN_DIR_NAME = "transformations"   # <state dir>/transformations: the host's own, searched by default


def allow_own_dir(state_dir: str | os.PathLike) -> Path:
    """Create `<state dir>/transformations` (private, as the state directory is) if missing, and add it to this
    process's $MGSTREAMS_QUERY_MODULES_DIR, which the host's stream processes inherit: a `<module>.py` dropped there
    is found by the next create or start, without a restart (the loader looks for the file at each call). The
    operator's own directories stay as they set them, searched after this one."""
    own = Path(state_dir).resolve() / OWN_DIR_NAME
    check_private_dir(own, OWN_DIR_NAME)
    own.mkdir(mode=0o700, exist_ok=True)
    listed = [d.strip() for d in re.split(r"[:,]", os.environ.get(QUERY_MODULES_ENV, "")) if d.strip()]
    os.environ[QUERY_MODULES_ENV] = os.pathsep.join(dict.fromkeys([str(own), *listed]))
    return own


def host_dirs(environ: dict[str, str] | None = None) -> list[str]:
    """The query modules directories a host started now searches, absolute: the bundled one, then
    $MGSTREAMS_QUERY_MODULES_DIR's (comma or colon separated)."""
    from stream_registry.registry.runners.runner import query_module_dirs

    environ = os.environ if environ is None else environ
    listed = [d.strip() for d in re.split(r"[:,]", environ.get(QUERY_MODULES_ENV, "")) if d.strip()]
    return list(dict.fromkeys(str(Path(d).resolve()) for d in [*query_module_dirs(), *listed]))


def record(state_dir: str | os.PathLike) -> None:
    """Write host_dirs() to the state directory (0600, replaced whole)."""
    fd, temporary = tempfile.mkstemp(dir=state_dir, prefix=f".{FILE_NAME}.")
    try:
        with os.fdopen(fd, "w") as out:
            json.dump({"query_modules_dirs": host_dirs()}, out)
        os.replace(temporary, Path(state_dir) / FILE_NAME)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def recorded(state_dir: str | os.PathLike) -> list[str]:
    """The directories the host of `state_dir` last recorded; [] when it recorded none (an older host)."""
    try:
        data = json.loads((Path(state_dir) / FILE_NAME).read_text())
    except (OSError, ValueError):
        return []
    dirs = data.get("query_modules_dirs") if isinstance(data, dict) else None
    return [d for d in dirs if isinstance(d, str) and os.path.isabs(d)] if isinstance(dirs, list) else []
