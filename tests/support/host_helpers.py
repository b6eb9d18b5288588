"""A real stream host for tests: the product's HostProcess, with tests/support importable in the child, and an
HTTP client of it.

The child and its stream processes import `stream_helpers` (the recording transformations the tests use, allowed
by MGSTREAMS_TRANSFORM_PACKAGES in tests/conftest.py) from tests/support, which their PYTHONPATH names; in the
test process pyproject.toml's pytest `pythonpath` puts it on sys.path.
"""
from __future__ import annotations

import os

import httpx
from paths import ROOT, SUPPORT

from mgstreams.host_process import HostProcess as _HostProcess
from stream_registry.sandbox import WRITE_PATHS_ENV


def standin_files(journal: str | os.PathLike) -> str:
    """The pymgclient stand-in's journal and its lock, made now so that a sandboxed stream process may write
    them (stream_registry.sandbox grants existing files by name): $MGSTREAMS_SANDBOX_WRITE_PATHS' value."""
    paths = [os.fspath(journal), f"{os.fspath(journal)}.lock"]
    for path in paths:
        open(path, "a").close()
    return os.pathsep.join(paths)


class HostProcess(_HostProcess):
    """`generated_token=False` (the default) serves without a token (`--no-token`) when none is given, so tests
    of other things can use plain HTTP clients; the security tests use the product's default (a generated token)."""

    def __init__(self, state_dir: str | os.PathLike, *, token: str | None = None, env: dict | None = None,
                 extra_args: tuple[str, ...] = (), generated_token: bool = False):
        if token is None and not generated_token and "--token-file" not in extra_args:
            extra_args = ("--no-token", *extra_args)
        env = {"PYTHONPATH": f"{SUPPORT}{os.pathsep}{ROOT}", **(env or {})}
        journal = env.get("MGCLIENT_STANDIN_JOURNAL")
        if journal:   # the Bolt stand-in's database is a file the sandboxed stream processes write
            env.setdefault(WRITE_PATHS_ENV, standin_files(journal))
        super().__init__(state_dir, token=token, extra_args=extra_args, cwd=ROOT, env=env)


def http(host: _HostProcess | str, token: str | None = None, *, timeout: float = 30, **headers: str) -> httpx.Client:
    """An HTTP client of a host (or its URL). Bodies go as JSON, raw ones too: the host refuses any other content
    type (415) before reading them. `token` is sent as a bearer token; `headers` add to or replace these."""
    auth = {"Authorization": f"Bearer {token}"} if token else {}
    url = host if isinstance(host, str) else host.url
    return httpx.Client(base_url=url, headers={"Content-Type": "application/json", **auth, **headers},
                        timeout=timeout)
