"""Where file sinks may write, for sinks named by untrusted callers (streams are created by any Cypher caller
or API client): under an allowed output directory, never through `..` or a symlink that leads elsewhere, never
into the state directory except its `output` subdirectory. $MGSTREAMS_OUTPUT_DIRS names the directories."""
from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import ConfigError
from ...safe_paths import check_private_dir
from .cypherl import CypherlSettings
from .uri import shown_uri

OUTPUT_DIRS_ENV = "MGSTREAMS_OUTPUT_DIRS"
OUTPUT_SUBDIR = "output"


@dataclass(frozen=True)
class OutputPolicy:
    """The directories file sinks may write under, for sinks named by untrusted callers.

    `dirs` are real paths (symlinks resolved). The state directory itself is
    never writable through a sink, except for its `output` subdirectory, even
    when an allowed directory contains it.
    """

    dirs: tuple[str, ...]
    state_dir: str | None = None

    @classmethod
    def for_state_dir(cls, state_dir: str | os.PathLike[str],
                      environ: Mapping[str, str] | None = None) -> OutputPolicy:
        """$MGSTREAMS_OUTPUT_DIRS (separated like PATH) if set, else `<state_dir>/output`."""
        environ = os.environ if environ is None else environ
        configured = [d.strip() for d in environ.get(OUTPUT_DIRS_ENV, "").split(os.pathsep) if d.strip()]
        for directory in configured:
            if not os.path.isabs(directory):
                raise ConfigError(f"{OUTPUT_DIRS_ENV}: {directory!r} is not an absolute path")
            check_private_dir(directory, OUTPUT_DIRS_ENV)   # someone else's directory could be swapped under us
        state = os.path.realpath(os.fspath(state_dir))
        dirs = configured or [os.path.join(state, OUTPUT_SUBDIR)]
        return cls(tuple(os.path.realpath(d) for d in dirs), state)

    def admit(self, settings: Any, uri: str) -> Any:
        """`settings` with the file's real path, or ConfigError naming `sink` and the URI; never creates."""
        if not isinstance(settings, CypherlSettings):
            return settings
        shown = shown_uri(uri)
        if settings.climbs:
            raise ConfigError(f"sink: {shown!r} contains '..'; name the file directly under an allowed output "
                              f"directory ({self._allowed()})")
        try:
            real = _real_path(settings.path)
        except OSError as exc:   # a component changed kind while it was resolved (a symlink swapped in or out)
            raise ConfigError(f"sink: {shown!r} cannot be resolved: {exc.strerror}") from None
        if not any(_is_within(real, d) for d in self.dirs) or self._in_state_dir(real):
            # where a symlink leads is said only for one inside an allowed directory: elsewhere it would map
            # the host's file system for the caller
            inside = any(_is_within(settings.path, d) for d in self.dirs)
            where = f" (it resolves to {real!r})" if real != settings.path and inside else ""
            raise ConfigError(f"sink: {shown!r} is outside the allowed output directories{where}; "
                              f"streams write files only under {self._allowed()} (set {OUTPUT_DIRS_ENV} "
                              f"on the host to change them)")
        if os.path.lexists(real) and not stat.S_ISREG(os.stat(real).st_mode):
            raise ConfigError(f"sink: {shown!r} exists and is not a regular file")
        return CypherlSettings(real, settings.fsync, admitted_under=self._root_of(real))

    def _in_state_dir(self, real: str) -> bool:
        if self.state_dir is None or not _is_within(real, self.state_dir):
            return False
        return not _is_within(real, os.path.join(self.state_dir, OUTPUT_SUBDIR)) or \
            real == os.path.join(self.state_dir, OUTPUT_SUBDIR)

    def _root_of(self, real: str) -> str:
        return max((d for d in self.dirs if _is_within(real, d)), key=len)

    def _allowed(self) -> str:
        return ", ".join(repr(d) for d in self.dirs)


def _real_path(path: str) -> str:
    """The real path of `path`: its deepest existing ancestor resolved (symlinks followed), the rest appended.

    A symlink anywhere on the way, dangling or not, is followed to where it
    leads, so it cannot carry a write outside the directory it sits in.
    """
    return os.path.realpath(path)


def _is_within(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)
