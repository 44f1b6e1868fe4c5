"""Archived binlog files as objects of a store: upload one verified, read any range of one back,
list and delete them.  Every function blocks (the store's calls, reading the file): the trio shell
runs them in worker threads.

Keys, relative to the archive's URL (``s3://bucket/prefix``)::

    binlogs/<name>.zst         the object (relay/archive/objectformat.py: seekable zstd frames)
    binlogs/<name>.meta.json   its meta document: written last, it is the commit record

An object without its meta is an upload that did not finish (the relay was killed between the two
PUTs, or the verification failed): it is not archived, the next upload replaces it.  A listing of
the archive is therefore a listing of the metas.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TypeVar

from ..binlog import events as ev
from ..errors import Refusal
from ..gtid.mysqlgtid import previous_gtids
from .objectformat import (
    DEFAULT_CHUNK_SIZE,
    DEFAULT_LEVEL,
    TRAILER_PROBE,
    ArchiveDamaged,
    ArchiveError,
    FrameEntry,
    Kek,
    ObjectLayout,
    ObjectMeta,
    ObjectReader,
    ObjectWriter,
    trailer_length,
)
from .store import ListedObject, ObjectMissing, ObjectStore, PutResult

log = logging.getLogger(__name__)

OBJECT_DIR = "binlogs/"
OBJECT_SUFFIX = ".zst"
META_SUFFIX = ".meta.json"
ENCODE_WORKERS = min(4, os.cpu_count() or 1)  # chunks of a file compressed at once
VERIFY_RANGE = 8 << 20  # bytes of the object per ranged GET while verifying an upload
READ_CONCURRENCY = 4  # ranged GETs at once, verifying an upload
# Fetching a whole file back: the object cut into at least FETCH_CONCURRENCY runs of frames, of at
# most FETCH_RUN_BYTES each, a streamed ranged GET each, FETCH_CONCURRENCY at once and in order (the
# copy is read as it grows from its start); memory: a frame per GET in flight, whatever the size.
FETCH_CONCURRENCY = 3
FETCH_RUN_BYTES = 16 << 20
START_READ = 1 << 16  # a file's first bytes, where its GTID_LIST or PREVIOUS_GTIDS is


T = TypeVar("T")
R = TypeVar("R")


def object_key(name: str) -> str:
    return f"{OBJECT_DIR}{name}{OBJECT_SUFFIX}"


def meta_key(name: str) -> str:
    return f"{OBJECT_DIR}{name}{META_SUFFIX}"


@dataclass(frozen=True)
class ArchivedFile:
    """One archived binlog file, as its meta document tells it."""

    name: str
    file_size: int
    object_size: int
    encrypted: bool
    archived_at: float  # when its meta was stored (Unix time): archive.retention's clock
    # the GTID_LIST at the file's start (the binlog state before it, "domain-server-seq" each; () for
    # a file without one): where a GTID dump may start.  None: not read yet (listed from the store)
    start_state: tuple[str, ...] | None = None
    # the header times of its first and last commits (the index's summary when it was archived; None:
    # not known): which archived files a search by time must read
    commit_lo: int | None = None
    commit_hi: int | None = None

    # a MySQL-flavoured file's PREVIOUS_GTIDS (every GTID before it, as text); None: a MariaDB
    # file, one without it, or not read yet (start_state None)
    previous_gtids: str | None = None

    @classmethod
    def of(cls, meta: ObjectMeta, archived_at: float, start: FileStartGtids | None = None) -> ArchivedFile:
        commit_lo, commit_hi = meta.commit_times or (None, None)
        return cls(meta.name, meta.file_size, meta.object_size, meta.encryption is not None, archived_at,
                   start.gtid_list if start else None, commit_lo, commit_hi,
                   previous_gtids=start.previous_gtids if start else None)


@dataclass(frozen=True)
class FileStartGtids:
    """What a binlog file's first events say came before it: MariaDB's GTID_LIST ("domain-server-seq"
    each; () for a file without one) or MySQL's PREVIOUS_GTIDS (text; None without one)."""

    gtid_list: tuple[str, ...]
    previous_gtids: str | None


def file_start_gtids(head: bytes) -> FileStartGtids:
    """Where a GTID dump may start, from the first bytes of a binlog file (the magic number included)."""
    offset = len(ev.BINLOG_MAGIC)
    checksum_alg = ev.CHECKSUM_OFF
    while offset + ev.HEADER_LEN <= len(head):
        length = int.from_bytes(head[offset + 9:offset + 13], "little")
        if length < ev.HEADER_LEN or offset + length > len(head):
            break
        event = memoryview(head)[offset:offset + length]
        if event[4] == ev.FORMAT_DESCRIPTION_EVENT:
            checksum_alg = ev.parse_format_description(event).checksum_alg
        elif event[4] == ev.GTID_LIST_EVENT:
            return FileStartGtids(tuple(f"{g.domain_id}-{g.server_id}-{g.seq_no}" for g in ev.parse_gtid_list(event)),
                                  None)
        elif event[4] == ev.PREVIOUS_GTIDS_LOG_EVENT:
            return FileStartGtids((), str(previous_gtids(event, checksum_alg)).replace("\n", ""))
        elif event[4] != ev.START_ENCRYPTION_EVENT:
            break
        offset += length
    return FileStartGtids((), None)


class FetchStopped(Refusal):
    """A copy of an archived file was stopped halfway: its readers went away."""


class UploadMismatch(ArchiveDamaged):
    """What the store holds after an upload is not what was sent: the upload is not committed."""


def upload(store: ObjectStore, path: Path, name: str, *, kek: Kek | None = None, level: int = DEFAULT_LEVEL,
           chunk_size: int = DEFAULT_CHUNK_SIZE, workers: int = ENCODE_WORKERS, read_back: bool = False,
           chunks: Callable[[int], Iterable[bytes]] | None = None,
           commit_times: Callable[[], tuple[int, int] | None] = lambda: None,
           may_commit: Callable[[], None] = lambda: None) -> ArchivedFile:
    """Archive the closed binlog file at ``path`` (already verified by the caller) as ``name``:
    stream it into its object (``workers`` chunks compressed at once), check that the store holds
    exactly what was sent (verify_upload), then store the meta document, which commits it, with
    ``commit_times()`` (asked once the file is whole: its index's).  ``chunks(chunk_size)``, if
    given, is where the file's bytes come from instead, as it is still written
    (archive/growing.py): the object is completed once that ends.  ``may_commit()`` is asked just
    before the meta is stored (and before a committed meta of the same file is taken away), and
    raises if this relay may no longer write the archive."""
    writer = ObjectWriter(name, chunk_size=chunk_size, level=level, kek=kek)
    source = chunks(chunk_size) if chunks is not None else _file_chunks(path, chunk_size)
    if store.head(meta_key(name)) is not None:
        # committed by an upload whose answer was lost: the object it names is never written over,
        # the meta leaves first (a kill between the two PUTs then leaves the file unarchived)
        may_commit()
        store.delete(meta_key(name))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="archive-encode") as pool:
        sent = store.put(object_key(name), _object_frames(source, writer, pool, workers))
    meta = writer.meta
    assert meta is not None  # set by finish(), which _object_frames called
    how = verify_upload(store, meta, sent, [kek] if kek is not None else [], read_back)
    log.debug("archive: %s verified by the %s", name, how)
    meta = replace(meta, commit_times=commit_times())
    may_commit()
    store.put(meta_key(name), [meta.to_json()])
    with open(path, "rb") as stream:
        head = stream.read(START_READ)
    # by the store's clock, as a listed file's Last-Modified: archive.retention compares them
    return ArchivedFile.of(meta, store.clock.now(), file_start_gtids(head))


def verify_upload(store: ObjectStore, meta: ObjectMeta, sent: PutResult, keks: Iterable[Kek],
                  read_back: bool = False) -> str:
    """That the object just stored is the one sent, UploadMismatch if not; how it was told.  The
    store's own CRC32 of the object, when it keeps one (S3 checks each part against the CRC32 sent
    with it, and refuses it if they differ): one HEAD.  Otherwise, or with ``read_back``, the
    object is read back, its size and CRC32 compared with what was sent and its trailer parsed
    against the meta."""
    key = object_key(meta.name)
    head = store.head(key)
    if head is None:
        raise UploadMismatch(key, "the store has no object there right after storing it")
    if head.size != sent.size:
        raise UploadMismatch(key, f"the store holds {head.size} bytes, {sent.size} were sent")
    if not read_back and sent.checksums and head.checksum is not None and head.checksum.startswith("CRC32:"):
        if head.checksum not in sent.checksums:
            raise UploadMismatch(key, f"the store's checksum is {head.checksum}, the bytes sent have "
                                      f"{' or '.join(sorted(sent.checksums))}")
        return "store's checksum"
    back = _read_back_digest(store, meta, keks)
    if (back.size, back.crc32) != (sent.size, sent.crc32):
        raise UploadMismatch(key, f"read back it is {back.size} bytes of CRC32 {back.crc32:08x}, "
                                  f"{sent.size} bytes of {sent.crc32:08x} were sent")
    return "read-back"


class _Digest:
    def __init__(self) -> None:
        self.size = 0
        self.crc32 = 0

    def update(self, data: bytes | bytearray | memoryview) -> None:
        self.size += len(data)
        self.crc32 = zlib.crc32(data, self.crc32)


def in_order(pool: Executor, work: Callable[[T], R], items: Iterable[T], ahead: int) -> Iterator[R]:
    """``work(item)`` for each item, done in ``pool``, the results in the items' order: at most
    ``ahead`` items are taken beyond the result being waited for, so memory stays bounded; a result
    is given as soon as those before it are, not held until more items come (they may come slowly:
    a file still written)."""
    pending: collections.deque[Future[R]] = collections.deque()
    for item in items:
        pending.append(pool.submit(work, item))
        while pending and (len(pending) > ahead or pending[0].done()):
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()


def _file_chunks(path: Path, chunk_size: int) -> Iterator[bytes]:
    with open(path, "rb") as stream:
        yield from iter(lambda: stream.read(chunk_size), b"")


def _object_frames(chunks: Iterable[bytes], writer: ObjectWriter, pool: Executor, ahead: int) -> Iterator[bytes]:
    """The object's bytes: the file's chunks encoded in ``pool``, ``ahead`` of the upload."""
    for frame in in_order(pool, lambda numbered: writer.encode(*numbered), enumerate(chunks), ahead):
        yield writer.add(frame)
    yield writer.finish()


def _read_back_digest(store: ObjectStore, meta: ObjectMeta, keks: Iterable[Kek]) -> _Digest:
    """Size and CRC32 of the object as the store gives it back, fetched in ranges several at once;
    its trailer is parsed and checked against the meta on the way (open_reader)."""
    open_reader(store, meta, keks)
    key = object_key(meta.name)
    ranges = [(start, min(start + VERIFY_RANGE, meta.object_size))
              for start in range(0, meta.object_size, VERIFY_RANGE)]
    digest = _Digest()
    with ThreadPoolExecutor(max_workers=READ_CONCURRENCY, thread_name_prefix="archive-verify") as pool:
        for data in in_order(pool, lambda span: _get(store, key, *span), ranges, READ_CONCURRENCY):
            digest.update(data)
    return digest


def _get(store: ObjectStore, key: str, start: int, end: int) -> bytes:
    data = store.get_range(key, start, end)
    if len(data) != end - start:
        raise ArchiveDamaged(key, f"bytes {start}..{end} asked, {len(data)} got: the object is cut short")
    return data


# ------------------------------------------------------------------------------------ reading


def read_meta(store: ObjectStore, name: str) -> ObjectMeta:
    """The meta document of the archived file ``name``; ObjectMissing when it has none."""
    key = meta_key(name)
    try:
        document = store.get(key)
    except ObjectMissing:
        raise ObjectMissing(f"{name} is not in the archive (no {key})") from None
    meta = ObjectMeta.from_json(document, key)
    if meta.name != name:
        raise ArchiveDamaged(key, f"it describes {meta.name}, not {name}")
    return meta


def read_layout(store: ObjectStore, name: str) -> ObjectLayout:
    """The checked seek table of the object of ``name``: its trailer fetched with the object's
    size (one GET from the end; a second for a very long seek table)."""
    key = object_key(name)
    try:
        tail, size = store.get_tail(key, TRAILER_PROBE)
    except ObjectMissing:
        raise ArchiveDamaged(key, "its meta document is there, the object is not") from None
    needed = trailer_length(tail, size, key)
    if needed > len(tail):
        tail = _get(store, key, size - needed, size)
    return ObjectLayout.parse(tail, size, key)


def open_reader(store: ObjectStore, meta: ObjectMeta, keks: Iterable[Kek],
                layout: ObjectLayout | None = None) -> ObjectReader:
    """The verified reader of the object ``meta`` describes: its seek table (``layout``, or read
    here) checked against the meta, the key unwrapped."""
    layout = layout or read_layout(store, meta.name)
    if layout.object_size != meta.object_size:
        raise ArchiveDamaged(object_key(meta.name), f"{layout.object_size} bytes, its meta document says "
                                                    f"{meta.object_size}")
    return ObjectReader(layout, meta, keks)


class ArchivedFileReader:
    """Ranges of one archived file, fetched and decoded frame by frame: at most one ranged GET
    and one decoded frame (chunk_size bytes) in memory at a time, whatever the file's size."""

    def __init__(self, store: ObjectStore, name: str, keks: Iterable[Kek]) -> None:
        self.store = store
        self.name = name
        # The meta and the object's trailer at once: two requests in the time of one (a store's
        # latency, not its bandwidth, is what a first read waits for).
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="archive-open") as pool:
            layout = pool.submit(read_layout, store, name)
            self.meta = read_meta(store, name)  # its error first: a file that is not archived at all
            self._reader = open_reader(store, self.meta, keks, layout.result())
        self._key = object_key(name)
        self._cached: tuple[int, bytes] | None = None  # the last frame decoded: reads are sequential

    @property
    def size(self) -> int:
        return self.meta.file_size

    def read(self, offset: int, length: int) -> bytes:
        """File bytes [offset, offset+length), fewer at the end of the file."""
        pieces = []
        for frame in self._reader.layout.frames_for(offset, length):
            pieces.append(frame.piece(self._chunk(frame.index), offset, length))
        return b"".join(pieces)

    def copy_to(self, target: Path, stop: Callable[[], bool] = lambda: False,
                progress: Callable[[int], None] = lambda end: None) -> None:
        """Write the whole file to ``target``: the object in runs of consecutive frames, in order,
        each streamed from one ranged GET (a store's cost is per request, and moto's grows with the
        object's size), FETCH_CONCURRENCY at once, each frame decoded into its place in the file as
        it arrives (in pieces: a chunk is seldom whole in memory); ``target`` has the file's size
        from the start, its holes filled as frames arrive.  ``progress(end)``, one call at a time,
        says that the file's bytes [0, end) are written; ``stop()`` is asked before each
        frame: True ends the copy with FetchStopped."""
        frames = self._reader.layout.frames
        runs = _runs(frames, FETCH_CONCURRENCY, FETCH_RUN_BYTES)
        failed = threading.Event()
        written = _Prefix(frames, progress)

        def halted() -> bool:
            return failed.is_set() or stop()

        def fetch(run: tuple[FrameEntry, ...]) -> None:
            try:
                self._fetch_run(run, out.fileno(), halted, written.add)
            except BaseException:
                failed.set()  # the other runs stop at their next frame
                raise

        with open(target, "wb") as out, ThreadPoolExecutor(max_workers=FETCH_CONCURRENCY,
                                                            thread_name_prefix="archive-fetch") as pool:
            os.ftruncate(out.fileno(), self.size)  # a reader of the growing copy maps it once
            outcomes = [pool.submit(fetch, run) for run in runs]
            errors = [error for error in (outcome.exception() for outcome in outcomes) if error is not None]
        # a run's own failure rather than another's FetchStopped that it caused
        errors.sort(key=lambda error: isinstance(error, FetchStopped))
        if errors:
            raise errors[0]

    def _fetch_run(self, run: tuple[FrameEntry, ...], fd: int, halted: Callable[[], bool],
                   wrote: Callable[[FrameEntry], None]) -> None:
        """Consecutive frames from one streamed ranged GET, decoded and written at their offsets.
        The GET is sent only when the first frame is still wanted, so a copy stopped during the open
        (its client left at the rotate that led the dump to it) costs the store no request."""
        sizes = [frame.compressed_size for frame in run]
        pieces = self.store.get_pieces(self._key, run[0].object_start, sizes)
        try:
            for frame in run:
                if halted():
                    raise FetchStopped(f"the copy of {self.name} was stopped (nobody waits for it any more)")
                # decoded into the copy as it comes (a short or missing piece, the object cut short,
                # is told as damage)
                self._reader.decode_frame_to(frame.index, next(pieces, b""), _writer_at(fd, frame.file_start))
                wrote(frame)
        finally:
            pieces.close()

    def chunks(self) -> Iterator[tuple[int, bytes]]:
        """The file's chunks in order, each with its offset in the file: a GET and a decode each."""
        for frame in self._reader.layout.frames:
            yield frame.file_start, self._chunk(frame.index)

    def _chunk(self, index: int) -> bytes:
        if self._cached is not None and self._cached[0] == index:
            return self._cached[1]
        chunk = self._fetch(index)
        self._cached = (index, chunk)
        return chunk

    def _fetch(self, index: int) -> bytes:
        """Frame ``index``, fetched and decoded."""
        frame = self._reader.layout.frames[index]
        return self._reader.decode_frame(index, _get(self.store, self._key, frame.object_start, frame.object_end))


def differences_from_archived(store: ObjectStore, name: str, keks: Iterable[Kek], path: Path) -> str | None:
    """None if the archived ``name`` holds the bytes of the local file ``path``, else where they
    differ; read frame by frame (one frame and one local chunk in memory).  ObjectMissing if the
    file left the archive, ArchiveError if its object cannot be read.  Blocking."""
    try:
        reader = ArchivedFileReader(store, name, keks)
        size = path.stat().st_size
        if size != reader.size:
            return f"{size} bytes here, {reader.size} archived"
        with open(path, "rb") as local:
            for start, chunk in reader.chunks():
                if local.read(len(chunk)) != chunk:
                    return f"bytes {start}..{start + len(chunk)} differ"
    except ArchiveError:
        if store.head(meta_key(name)) is None:  # deleted by archive.retention while it was read
            raise ObjectMissing(f"{name} left the archive while it was compared") from None
        raise
    return None


def _writer_at(fd: int, at: int) -> Callable[[bytes, int], object]:
    """Writes a frame's pieces, given at their offset in its chunk, at the chunk's place ``at`` in ``fd``."""
    return lambda piece, offset: os.pwrite(fd, piece, at + offset)


class _Prefix:
    """Which frames of a copy are written, for ``progress``: the end of those written from the start."""

    def __init__(self, frames: tuple[FrameEntry, ...], progress: Callable[[int], None]) -> None:
        self._frames = frames
        self._progress = progress
        self._written = [False] * len(frames)
        self._count = 0  # frames written from the start, without a gap
        self._lock = threading.Lock()

    def add(self, frame: FrameEntry) -> None:
        with self._lock:
            self._written[frame.index] = True
            count = self._count
            while count < len(self._frames) and self._written[count]:
                count += 1
            if count > self._count:
                self._count = count
                self._progress(self._frames[count - 1].file_end)


def _runs(frames: tuple[FrameEntry, ...], at_least: int, most_bytes: int) -> list[tuple[FrameEntry, ...]]:
    """``frames`` cut into runs of consecutive frames of about equal bytes: ``at_least`` runs
    (fewer with fewer frames), more where a run would hold over ``most_bytes`` of the object."""
    if not frames:
        return []
    base = frames[0].object_start
    total = frames[-1].object_end - base
    count = min(len(frames), max(at_least, -(-total // most_bytes)))
    runs: dict[int, list[FrameEntry]] = {}
    for frame in frames:
        middle = frame.object_start - base + frame.compressed_size // 2
        runs.setdefault(middle * count // total, []).append(frame)
    return [tuple(run) for run in runs.values()]


def read_file_start_gtids(store: ObjectStore, name: str, keks: Iterable[Kek]) -> FileStartGtids:
    """What an archived file's first events say came before it, from its first frame (one ranged GET)."""
    reader = ArchivedFileReader(store, name, keks)
    return file_start_gtids(reader.read(0, min(reader.size, START_READ)))


# ------------------------------------------------------------------------------------ listing

# Metas and first frames fetched at once while listing: each is a round trip to the store, and a
# relay that was down while another wrote the archive lists hundreds of new files at its start.
LISTING_FETCHES = 8


def listed_metas(store: ObjectStore, after: str | None = None) -> Iterator[tuple[str, ListedObject]]:
    """(file name, listing) of every meta document in the store, whether it parses or not; those
    of the files whose names sort after ``after`` only, if given."""
    for listed in store.list(OBJECT_DIR, meta_key(after) if after is not None else ""):
        if listed.name.endswith(META_SUFFIX):
            yield listed.name[len(OBJECT_DIR):-len(META_SUFFIX)], listed


def list_archive(store: ObjectStore, known: dict[str, ArchivedFile] | None = None,
                 newer_than: str | None = None) -> dict[str, ArchivedFile]:
    """Every committed archived file (those with a meta document), by name; the metas of files in
    ``known`` are not fetched again (an archived object never changes).  ``newer_than``: only the
    files whose names sort after it are listed (a request, where the whole archive takes one per
    thousand objects), and ``known`` is taken as the rest."""
    known = known or {}
    found: dict[str, ArchivedFile] = dict(known) if newer_than is not None else {}
    new: list[tuple[str, ListedObject]] = []
    for name, listed in listed_metas(store, newer_than):
        if name in known:
            found[name] = known[name]
        else:
            new.append((name, listed))
    with ThreadPoolExecutor(max_workers=LISTING_FETCHES, thread_name_prefix="archive-list") as pool:
        metas = pool.map(partial(_listed_meta, store), [name for name, _ in new])
        for (name, listed), meta in zip(new, metas, strict=True):
            if meta is not None:
                when = listed.last_modified.timestamp() if listed.last_modified else 0.0
                found[name] = ArchivedFile.of(meta, when)
    return found


def _listed_meta(store: ObjectStore, name: str) -> ObjectMeta | None:
    """A listed file's meta; None if it is damaged (the file is not archived) or gone since."""
    try:
        return read_meta(store, name)
    except ArchiveDamaged as exc:
        log.error("archive: %s; the file is treated as not archived", exc)
    except ObjectMissing:
        pass  # deleted by archive.retention since the listing
    return None


def read_file_starts(store: ObjectStore, names: Iterable[str],
                     keks: Iterable[Kek]) -> dict[str, FileStartGtids | ArchiveError]:
    """read_file_start_gtids of each of ``names``, LISTING_FETCHES at once; for an object that
    cannot be read (damaged, its key missing), why: one such file must not hide the others."""
    keks = tuple(keks)
    names = list(names)

    def one(name: str) -> FileStartGtids | ArchiveError:
        try:
            return read_file_start_gtids(store, name, keks)
        except ArchiveError as exc:
            return exc

    with ThreadPoolExecutor(max_workers=LISTING_FETCHES, thread_name_prefix="archive-list") as pool:
        return dict(zip(names, pool.map(one, names), strict=True))


def delete_archived(store: ObjectStore, name: str) -> None:
    """The meta first: from then on the file is not archived, even if the object's delete fails."""
    store.delete(meta_key(name))
    store.delete(object_key(name))
