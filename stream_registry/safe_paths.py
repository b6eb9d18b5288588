"""Opening files beneath an allowed directory, with no symlink followed on the way.

A path checked and then opened by name can be redirected in between: any
directory on the way swapped for a symlink carries the open elsewhere
(`O_NOFOLLOW` guards only the last component). Here the walk holds a descriptor
of each directory and opens the next component relative to it with
`O_NOFOLLOW`, so what is opened is what lies beneath the root, or nothing.
The root itself must be a private directory: owned by this user and writable by
no one else, or someone else could plant the symlinks the walk refuses.
"""
from __future__ import annotations

import os
import pwd
import stat

from .errors import ConfigError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def owner_name(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def private_problem(info: os.stat_result) -> str | None:
    """Why a directory's stat makes it unfit to hold our files, or None."""
    if stat.S_ISLNK(info.st_mode):
        return "is a symlink"
    if not stat.S_ISDIR(info.st_mode):
        return "is not a directory"
    if info.st_uid != os.getuid():
        return f"is owned by {owner_name(info.st_uid)}, not by {owner_name(os.getuid())}"
    if info.st_mode & 0o022:
        return f"is writable by group or others (mode {stat.S_IMODE(info.st_mode):04o})"
    return None


def check_private_dir(path: str | os.PathLike, field: str) -> None:
    """ConfigError naming `field` unless `path` is a directory (not a symlink) of ours that no one else can write.
    A missing directory passes: it is created private when first needed."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ConfigError(f"{field}: cannot use {str(path)!r}: {exc.strerror}") from None
    problem = private_problem(info)
    if problem:
        raise ConfigError(f"{field}: {str(path)!r} {problem}; it must be a directory owned by the host's user and "
                          f"writable by no one else")


def open_beneath(root: str | os.PathLike, relative: str, flags: int, mode: int = 0o600, *,
                 dir_mode: int = 0o700, make_dirs: bool = False) -> int:
    """A descriptor for `root/relative`, opened one component at a time with no symlink followed.

    `root` must be a private directory (PermissionError otherwise); missing
    directories on the way are created `dir_mode` when `make_dirs`. OSError
    (ELOOP, ENOTDIR, ...) when a component is a symlink or not a directory.
    """
    parts = [p for p in relative.split("/") if p]
    if not parts or any(p in (".", "..") for p in parts):
        raise ValueError(f"{relative!r} does not name a file beneath a directory")
    fd = os.open(root, _DIR_FLAGS)
    try:
        problem = private_problem(os.fstat(fd))
        if problem:
            raise PermissionError(f"{str(root)!r} {problem}")
        for name in parts[:-1]:
            if make_dirs:
                try:
                    os.mkdir(name, dir_mode, dir_fd=fd)
                except FileExistsError:
                    pass
            next_fd = os.open(name, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = next_fd
        file_fd = os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=fd)
    finally:
        os.close(fd)
    if not stat.S_ISREG(os.fstat(file_fd).st_mode):
        os.close(file_fd)
        raise IsADirectoryError(f"{relative!r} is not a regular file")
    return file_fd
