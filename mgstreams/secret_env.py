"""No secret in a host's /proc/<pid>/environ: re-execute without it, the token handed over on a pipe.

`os.environ.pop` changes what children inherit, not the environment block the
kernel shows in /proc/<pid>/environ: that stays as the process was started, and
every process of the same user (a stream process running a transformation
included) can read it. So `mgstreams serve` started with a secret in its
environment (its token, or any $MGSTREAMS_* variable that looks secret) execs
itself again, at once, with the same arguments and an environment without them;
the token goes over a pipe whose read end the new image inherits
($MGSTREAMS_TOKEN_FD names it, a number and no secret) and reads once.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from stream_registry.errors import ConfigError
from stream_registry.redaction import is_secret_key

from .settings import TOKEN_ENV, TOKEN_FD_ENV


def secret_variables(environ: Mapping[str, str]) -> list[str]:
    """The host's own secrets in `environ`: $MGSTREAMS_* variables that look secret (a *_FILE names a file,
    $MGSTREAMS_TOKEN_FD a descriptor)."""
    return [k for k in environ if k.startswith("MGSTREAMS_") and is_secret_key(k.lower().replace("_", "."))
            and not k.endswith("_FILE") and k != TOKEN_FD_ENV]


def reexec_without_secrets(argv: list[str] | None = None) -> None:
    """If this process was started with secrets in its environment, replace it (same pid, same arguments,
    same standard streams) by one started without them; the token is handed over on a pipe. Returns only
    when there is nothing to remove."""
    environ = dict(os.environ)
    secrets = secret_variables(environ)
    if not secrets:
        return
    token = environ.get(TOKEN_ENV)
    clean = {k: v for k, v in environ.items() if k not in secrets and k != TOKEN_FD_ENV}
    if token:
        read_end, write_end = os.pipe()
        data = token.encode()
        if len(data) > 60000:   # more than a pipe holds without a reader
            raise ConfigError(f"{TOKEN_ENV}: {len(data)} bytes; a token is at most 60000")
        os.write(write_end, data)
        os.close(write_end)
        os.set_inheritable(read_end, True)
        clean[TOKEN_FD_ENV] = str(read_end)
    sys.stdout.flush()
    sys.stderr.flush()
    args = argv if argv is not None else [sys.executable, *sys.orig_argv[1:]]
    os.execve(sys.executable, args, clean)


def handed_over_token() -> str | None:
    """The token a re-executed host was handed on its pipe (read once, the pipe closed), else None."""
    text = os.environ.pop(TOKEN_FD_ENV, None)
    if text is None:
        return None
    if not text.isdigit():
        raise ConfigError(f"{TOKEN_FD_ENV}: expected a file descriptor number, got {text!r}")
    fd = int(text)
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    except OSError as exc:
        raise ConfigError(f"{TOKEN_FD_ENV}: cannot read descriptor {fd}: {exc.strerror}") from None
    finally:
        try:
            os.close(fd)
        except OSError:
            pass
    return b"".join(chunks).decode("utf-8", errors="replace").strip() or None
