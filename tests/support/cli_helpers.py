"""The `mgstreams` command line for tests, as users run it: in this process through click's runner (fast, for
what the command does with its arguments), or as a child process (exit status, stdout and stderr as a shell
sees them; `script=True` runs the installed console script rather than `python -m mgstreams`).

Pointed at a host (`host=`), the command finds it as an operator on that machine would: MGSTREAMS_URL, and for a
child process MGSTREAMS_STATE_DIR (where a generated token is).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import Any

from click.testing import CliRunner, Result
from paths import ROOT

from mgstreams.cli import cli


def console_script() -> str:
    """The path of the `mgstreams` console script the package installs (this venv's first)."""
    executable = shutil.which("mgstreams", path=os.path.dirname(sys.executable)) or shutil.which("mgstreams")
    assert executable, "the console script `mgstreams` is installed with the package"
    return executable


def mgstreams(*args: Any, host: Any = None, env: dict | None = None, stdin: str | None = None,
              timeout: float = 60, script: bool = False) -> subprocess.CompletedProcess:
    """`python -m mgstreams ARGS` (or the console script) as a child process in the repository's root, with this
    process's environment plus `env`."""
    where = {"MGSTREAMS_URL": host.url, "MGSTREAMS_STATE_DIR": str(host.state_dir)} if host is not None else {}
    command = [console_script()] if script else [sys.executable, "-m", "mgstreams"]
    return subprocess.run([*command, *map(str, args)], input=stdin, capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout, env={**os.environ, **where, **(env or {})})


def invoke(*args: Any, host: Any = None, env: dict | None = None) -> Result:
    """`mgstreams ARGS` in this process (exceptions propagate); with `host`, talking to it (its token, if any)."""
    where = {"MGSTREAMS_URL": host.url, "MGSTREAMS_TOKEN": host.token or ""} if host is not None else {}
    merged = {**where, **(env or {})}
    return CliRunner(env=merged or None).invoke(cli, [str(a) for a in args], catch_exceptions=False)
