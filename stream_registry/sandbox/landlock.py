"""Linux Landlock through ctypes: a process confines itself (and every process it starts) to the paths it names.

No privilege is needed. The ABI version is asked with
`landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)`; rules
grant rights beneath a path (a directory or one file); `restrict_self` applies
them, after `PR_SET_NO_NEW_PRIVS`, for good. What no rule grants is denied,
for file access of every kind the running ABI handles. From ABI 6 the domain
also keeps its processes from signalling processes outside it.
Numbers from the kernel's include/uapi/linux/landlock.h.
"""
from __future__ import annotations

import ctypes
import os
from collections.abc import Iterable

SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446   # the same on x86_64 and aarch64
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH = 1
PR_SET_NO_NEW_PRIVS = 38

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR, MAKE_REG = 1 << 4, 1 << 5, 1 << 6, 1 << 7, 1 << 8
MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1

READ = EXECUTE | READ_FILE | READ_DIR
WRITE = READ_FILE | READ_DIR | WRITE_FILE | TRUNCATE | MAKE_REG | REMOVE_FILE | MAKE_DIR
_FILE_ONLY = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV   # what a rule on a file (not a dir) may grant

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def abi() -> int:
    """The kernel's Landlock ABI version; 0 when it has none (or it is disabled)."""
    version = _libc.syscall(SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(CREATE_RULESET_VERSION))
    return max(int(version), 0)


def handled(version: int) -> int:
    """The file rights `version` handles (all denied unless granted)."""
    rights = (1 << 13) - 1
    if version >= 2:
        rights |= REFER
    if version >= 3:
        rights |= TRUNCATE
    if version >= 5:
        rights |= IOCTL_DEV
    return rights


def restrict_self(rules: Iterable[tuple[str, int]]) -> int:
    """Confine this process to `rules` (path, rights) for good; the ABI used. OSError when the kernel refuses.
    A path that does not exist is left out (nothing beneath it to grant)."""
    version = abi()
    if version < 1:
        raise OSError("Landlock is not available in this kernel")
    fs = handled(version)
    attr = _RulesetAttr(fs, 0, (SCOPE_SIGNAL | SCOPE_ABSTRACT_UNIX_SOCKET) if version >= 6 else 0)
    size = ctypes.sizeof(_RulesetAttr) if version >= 6 else 16 if version >= 4 else 8
    ruleset = _check(_libc.syscall(SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size),
                                   ctypes.c_uint32(0)), "create a ruleset")
    try:
        for path, rights in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                granted = rights & fs
                if not os.path.isdir(f"/proc/self/fd/{fd}"):
                    granted &= _FILE_ONLY
                rule = _PathBeneath(granted, fd)
                _check(_libc.syscall(SYS_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(RULE_PATH_BENEATH),
                                     ctypes.byref(rule), ctypes.c_uint32(0)), f"add a rule for {path}")
            finally:
                os.close(fd)
        _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "set no_new_privs")
        _check(_libc.syscall(SYS_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)), "restrict itself")
    finally:
        os.close(ruleset)
    return version


def _check(result: int, doing: str) -> int:
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"Landlock: cannot {doing}: {os.strerror(errno)}")
    return int(result)
