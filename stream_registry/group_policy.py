"""Which consumer groups a host's streams may join (create, alter and every start check it)."""
from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping
from dataclasses import dataclass

from .config import GROUP_PREFIX, StreamConfig, _shown_value
from .errors import ConfigError

ALLOWED_GROUPS_ENV = "MGSTREAMS_ALLOWED_GROUPS"


@dataclass(frozen=True)
class GroupPolicy:
    """Which consumer groups a stream may name: a group's commits are what set_stream_offset moves, so a
    caller naming another application's group could move that application. `patterns` (fnmatch, `*` for
    any) is checked at create, alter and every start (a stored stream read back)."""
    patterns: tuple[str, ...] = ("*",)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *, loopback: bool) -> GroupPolicy:
        """$MGSTREAMS_ALLOWED_GROUPS set: the host's prefix (mgstreams_*) plus its patterns (comma-separated).
        Unset: any group on a loopback listen (one machine, one operator), the prefix alone beyond it."""
        environ = os.environ if environ is None else environ
        extra = tuple(p.strip() for p in environ.get(ALLOWED_GROUPS_ENV, "").split(",") if p.strip())
        if extra:
            return cls((GROUP_PREFIX + "*", *extra))
        return cls() if loopback else cls((GROUP_PREFIX + "*",))

    def check(self, config: StreamConfig) -> None:
        group = config.group_id
        if not any(fnmatch.fnmatchcase(group, pattern) for pattern in self.patterns):
            raise ConfigError(f"consumer_group: {_shown_value(group)} is not a group this host's streams may use "
                              f"(allowed: {', '.join(self.patterns)}); leave it empty for {GROUP_PREFIX}<name>, "
                              f"or an operator allows it with ${ALLOWED_GROUPS_ENV}")
