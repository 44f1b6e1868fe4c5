"""The newest stored file as an upload thread reads it while ingest still writes it.

The archiver's trio task tells a ``GrowingFile`` how far the file is committed and when it is
closed (ingest began the next file); the upload thread takes the file in whole chunks as they are
committed, so the object's frames are compressed and its parts sent while the file grows, and
what is left when the file closes is its last chunk, the events' check and the commit of the
object.  Only committed bytes are read: a stored file never changes below its committed end.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from ..errors import Refusal


class UploadStopped(Refusal):
    """The upload of a growing file was stopped before the file closed (the relay is stopping)."""


class FileChanged(Refusal):
    """The file is not the one whose bytes were uploaded (replaced or cut while it was read)."""


class GrowingFile:
    """``check(path, name)``: the closed file's events, checked before its object is completed (it
    raises if they fail)."""

    def __init__(self, name: str, path: Path, check: Callable[[Path, str], object]) -> None:
        self.name = name
        self.path = path
        self._check = check
        self._changed = threading.Condition()
        self._committed = 0
        self._closed = False
        self._stopped = False
        self._wanted = 0  # the end the upload thread waits for: it is woken only then
        self.closed_at: float | None = None  # time.monotonic() when told closed
        self.commit_times: tuple[int, int] | None = None  # the closed file's: its meta document carries them

    def grew(self, committed: int, closed: bool,
             commit_times: Callable[[], tuple[int, int] | None] = lambda: None) -> None:
        """From the trio side: the file is committed up to ``committed``, and closed or not;
        ``commit_times()`` is asked once, when it is first told closed."""
        if closed and self.closed_at is None:
            self.closed_at = time.monotonic()
            self.commit_times = commit_times()  # before the upload thread is woken to complete the object
        with self._changed:
            self._committed, self._closed = committed, closed
            if closed or committed >= self._wanted:
                # not at every commit: a thread woken thousands of times a second takes the GIL
                # from ingest as often (the benchmark's burst was archived 4.2 s in that way, 3.3 s
                # with a wake per chunk)
                self._changed.notify_all()

    def stop(self) -> None:
        with self._changed:
            self._stopped = True
            self._changed.notify_all()

    def chunks(self, chunk_size: int) -> Iterator[bytes]:
        """The file in chunks of ``chunk_size`` bytes, each once it is committed, the last one shorter;
        ends once the file is closed and its events pass ``check``: the object is not completed
        before that."""
        with open(self.path, "rb") as stream:
            offset = 0
            while True:
                committed, closed = self._wait_for(offset + chunk_size)
                if closed:
                    break
                while committed - offset >= chunk_size:
                    yield self._read(stream, offset, chunk_size)
                    offset += chunk_size
            size = os.fstat(stream.fileno()).st_size
            while offset < size:
                length = min(chunk_size, size - offset)
                yield self._read(stream, offset, length)
                offset += length
            self._check_same(stream, offset)
        self._check(self.path, self.name)

    def _wait_for(self, wanted: int) -> tuple[int, bool]:
        with self._changed:
            self._wanted = wanted
            self._changed.wait_for(lambda: self._stopped or self._closed or self._committed >= wanted)
            if self._stopped:
                raise UploadStopped(f"the upload of {self.name} was stopped before the file closed")
            return self._committed, self._closed

    def _read(self, stream: BinaryIO, offset: int, length: int) -> bytes:
        data = os.pread(stream.fileno(), length, offset)
        if len(data) != length:
            raise FileChanged(f"{self.name}: {len(data)} bytes at {offset} where {length} were committed: "
                              "the file was cut while it was uploaded")
        return data

    def _check_same(self, stream: BinaryIO, uploaded: int) -> None:
        """The closed file at ``path`` is the one read, and it was read whole."""
        opened = os.fstat(stream.fileno())
        try:
            now = os.stat(self.path)
        except FileNotFoundError:
            raise FileChanged(f"{self.name} was removed while it was uploaded") from None
        if (now.st_ino, now.st_dev) != (opened.st_ino, opened.st_dev) or now.st_size != uploaded:
            raise FileChanged(f"{self.name} was replaced or changed size while it was uploaded")
