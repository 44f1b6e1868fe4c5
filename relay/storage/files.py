"""Stored files: what a stored binlog file is to retention, where a stored copy first differs from
its original, and small durable-file helpers (atomic replace, directory fsync, the data_dir lock)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard

from ..binlog.events import BINLOG_MAGIC, FLAGS_OFFSET, LOG_EVENT_BINLOG_IN_USE_F
from ..errors import FatalError

IN_USE_FLAG_OFFSET = len(BINLOG_MAGIC) + FLAGS_OFFSET  # the first event (the FDE) starts at 4
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
# Room kept in data_dir for the state files once the disk is full: a purge, the only way the relay
# frees space, first writes binlog.index and the replica book, and on a disk without a free block
# neither could be written, so nothing would ever be purged.
SPACE_RESERVE = "space-reserve"
SPACE_RESERVE_BYTES = 1 << 20

log = logging.getLogger(__name__)
_COMPARE_BLOCK = 8 << 20


@dataclass(frozen=True)
class StoredFile:
    name: str
    size: int
    modified: float  # when the last byte was written: the file's end of life on the primary


def first_difference(original: Path, copy: Path, active: bool) -> int | None:
    """The first offset where the files differ (None if they do not), reading in large blocks.
    With ``active``, the FDE's BINLOG_IN_USE flag is not compared: the primary clears it when it
    closes the file, so a copy of an open file differs there (docs/architecture.md, decision 1)."""
    with open(original, "rb") as left, open(copy, "rb") as right:
        offset = 0
        while True:
            a, b = left.read(_COMPARE_BLOCK), right.read(_COMPARE_BLOCK)
            if active and offset == 0:
                a, b = _without_in_use_flag(a), _without_in_use_flag(b)
            if a != b:
                return offset + next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            if not a:
                return None
            offset += len(a)


def _without_in_use_flag(block: bytes) -> bytes:
    if len(block) <= IN_USE_FLAG_OFFSET:
        return block
    raw = bytearray(block)
    raw[IN_USE_FLAG_OFFSET] &= ~LOG_EVENT_BINLOG_IN_USE_F & 0xFF
    return bytes(raw)


class DataDirError(FatalError):
    """The data directory is unusable (locked, unreadable, or inconsistent)."""


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_durable_dir(path: Path) -> None:
    """Create ``path`` and any missing parent, each new one flushed into its parent: a directory
    that exists only in the page cache vanishes at a power cut with everything in it."""
    missing = []
    while not path.exists():
        missing.append(path)
        path = path.parent
    for directory in reversed(missing):
        directory.mkdir(exist_ok=True)
        fsync_dir(directory.parent)


def is_disk_full(exc: BaseException) -> TypeGuard[OSError]:
    return isinstance(exc, OSError) and exc.errno in DISK_FULL


def atomic_write(path: Path, data: bytes, sync: bool = True, mode: int | None = None,
                 use_reserve: bool = False) -> None:
    """Write a temp file, fsync it, rename it over ``path``, fsync the directory: after a
    crash the file holds either the old or the new content, never a mix.  Without ``sync``
    (a cache that is rebuilt when damaged) nothing is flushed: readers still never see a mix.
    ``mode`` (0o600 for a secret): the file's permissions from its first byte on.
    ``use_reserve`` (the files a purge writes): on a full disk the directory's space reserve, if
    it has one, is given up and the write tried again."""
    try:
        _write_and_rename(path, data, sync, mode)
    except OSError as exc:
        if not (use_reserve and is_disk_full(exc) and release_space_reserve(path.parent)):
            raise
        _write_and_rename(path, data, sync, mode)


def release_space_reserve(directory: Path) -> bool:
    """Remove ``directory``'s space reserve; False if it had none."""
    try:
        (directory / SPACE_RESERVE).unlink()
    except FileNotFoundError:
        return False
    log.warning("%s is full: its space reserve (%d KiB) was given up so that the relay's state files can "
                "be written and files purged; it is made again once there is room", directory,
                SPACE_RESERVE_BYTES >> 10)
    return True


def keep_space_reserve(data_dir: Path) -> bool:
    """data_dir's space reserve, made if missing (incompressible bytes: a compressing file system
    would not keep the room for zeros); False if there is no room for it yet."""
    if (data_dir / SPACE_RESERVE).exists():
        return True
    try:
        atomic_write(data_dir / SPACE_RESERVE, os.urandom(SPACE_RESERVE_BYTES))
    except OSError as exc:
        if is_disk_full(exc):
            return False
        raise
    return True


def _write_and_rename(path: Path, data: bytes, sync: bool, mode: int | None) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666 if mode is None else mode)
    try:
        with os.fdopen(fd, "wb") as out:
            if mode is not None:
                os.fchmod(fd, mode)  # a temp file a crash left keeps its old mode through O_CREAT
            out.write(data)
            if sync:
                out.flush()
                os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        # On a full disk the part written would keep the last free blocks from the writes that
        # free space (the replica book before a purge): a failed write leaves no temp file.
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if sync:
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
