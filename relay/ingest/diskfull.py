"""A full data_dir (ENOSPC, EDQUOT) is not a network fault: reconnecting would download the same
bytes to the same full disk again and again.  Ingest pauses (serving goes on), waits for space,
then resumes where the last whole group ended."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import trio

from .status import UpstreamStatus

log = logging.getLogger("relay.upstream")  # one logger for the upstream side, as before its split

ER_DISK_FULL = 1021  # what a MariaDB server reports for the same ("Disk full (%s); waiting for someone...")
DISK_FULL_POLL_SECONDS = 1.0
ROOM_TO_RESUME = 64 << 20  # growth of free space (or a tenth of a smaller file system) before ingest resumes


async def wait_for_space(data_dir: Path, status: UpstreamStatus, exc: OSError) -> None:
    """Called after the partial group was cut (Upstream._lost): the space that freed is not enough
    (the group did not fit in it), so ingest resumes only once free space grew past it by a margin."""
    status.last_error = f"data_dir full: {exc.strerror}"
    status.last_errno, status.last_error_time = ER_DISK_FULL, time.time()
    status.disk_full = True
    status.disk_full_pauses += 1
    free, size = disk_space(data_dir)
    wanted = free + min(ROOM_TO_RESUME, size // 10)
    log.error("upstream: %s is full (%s); ingest paused until %d MiB are free (%d MiB now), serving goes on",
              data_dir, exc.strerror, wanted >> 20, free >> 20)
    while disk_space(data_dir)[0] < wanted:
        await trio.sleep(DISK_FULL_POLL_SECONDS)
    status.disk_full = False
    log.warning("upstream: %s has space again; resuming ingest", data_dir)


def disk_space(path: Path) -> tuple[int, int]:
    """(bytes free to this process, size) of the file system holding ``path``."""
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize, stats.f_blocks * stats.f_frsize
