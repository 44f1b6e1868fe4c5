"""Stored files: what a stored binlog file is to retention, and small durable-file helpers
(atomic replace, directory fsync, the data_dir lock)."""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass
from pathlib import Path
from ..errors import FatalError


@dataclass(frozen=True)
class StoredFile:
    name: str
    size: int
    modified: float  # when the last byte was written: the file's end of life on the primary


class DataDirError(FatalError):
    """The data directory is unusable (locked, unreadable, or inconsistent)."""


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes) -> None:
    """Write a temp file, fsync it, rename it over ``path``, fsync the directory: after a
    crash the file holds either the old or the new content, never a mix."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


class DataDirLock:
    """An exclusive flock on data_dir/relay.lock, so two relays never share one data_dir."""

    def __init__(self, data_dir: Path) -> None:
        self._path = data_dir / "relay.lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DataDirError(f"{self._path.parent} is in use by another binlog-relay process") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
