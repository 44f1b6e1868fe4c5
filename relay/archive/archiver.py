"""The archiver: the trio tasks that upload every stored file to the archive, keep the list of what
is archived, and apply archive.retention.

The newest file is uploaded while ingest writes it (archive/growing.py) and its object completed
once it is closed and its events verify; a file that upload could not follow (the store down, the
relay started after it closed) is checked and uploaded whole once closed.

A file is archived once its meta document is in the store (relay/archive/objects.py), and it
leaves the local disk only once ``archive.json`` in data_dir lists it too (RetentionKeeper asks
``archived_names``).  The list is the store's (listed at start); archive.json keeps a copy, so a
relay whose store is down at start still knows what it may purge and serves every archived file
it no longer holds, and a restart fetches only the metas it lacks.  The
copy is rewritten whole, in a worker thread, once per burst of changes: it grows with the archive
(about 300 bytes a file), and written on the event loop after every upload it took 0.1 s a time at
4,000 files, which slowed the uploads of a backlog of small files to a third; each file's line is
kept from one write to the next (a write at 50,000 files: 0.05-0.07 CPU s, 0.33 encoding them all).
A copy behind the store (a crash or a failed write came between an upload and its line) makes a
relay whose store is down at start purge less until the store answers; it never lacks a file the
relay purged, which a replica would otherwise move past as if the history had none.  A write that
failed is tried again after a back-off, not only at the next upload; one that failed for want of
space lets the store's word alone free the local copies (only a purge can make room for the copy,
which is tried again every second).

Several relays of one primary may share an archive (archive/owner.py): one writes it, the others
read it.  A reader uploads nothing; it lists the archive every check to serve what the writer
archived, and a local file leaves its disk only once the archive holds it and the archived copy
equals its own, read back and compared (``checked``: a relay's own uploads are equal by making;
another relay's are compared once, by writer and reader alike, and the names kept in archive.json
so that a restart does not compare them again).  A copy that differs is kept and served, never
purged for the archive's: the same name with other bytes is another history.

The store being down never stops ingest or serving: uploads wait with a back-off (1 s doubling to
a minute), the backlog is counted (``lag``) and uploaded in order once the store answers again.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields, replace
from functools import partial
from pathlib import Path
from typing import Any

import trio

from ..binlog.names import next_file_name
from ..errors import RelayError
from ..storage.files import DataDirLock, atomic_write, fsync_dir, is_disk_full, make_durable_dir
from ..storage.history import INDEX_DIR as HISTORY_DIR
from ..storage.history import HistoryIndex
from ..storage.importer import BinlogImportError, check_file, import_binlogs
from ..storage.index import INDEX_NAME, read_index, write_index
from ..storage.relaylog import RelayLog
from ..storage.state import STATE_NAME
from ..trio_run import run_abandonable
from .growing import GrowingFile, UploadStopped
from .objectformat import DEFAULT_LEVEL, ArchiveDamaged, ArchiveError, ArchiveKeyError, Kek
from .objects import (
    OBJECT_DIR,
    ArchivedFile,
    ArchivedFileReader,
    FetchStopped,
    delete_archived,
    differences_from_archived,
    list_archive,
    read_file_starts,
    upload,
)
from .owner import (
    CHECKS_PER_LEASE,
    DEFAULT_WRITER_LEASE,
    ArchiveInUse,
    LeaseWatch,
    Owner,
    WrittenByPeer,
    check_same_history,
    claim,
    read_owner,
    relay_id,
)
from .store import ObjectMissing, ObjectStore, StoreConfig, open_store
from .storeclock import StoreClock

log = logging.getLogger(__name__)

CATALOG = "archive.json"
MIB = 1 << 20
CHECK_SECONDS = 0.5  # how often the closed files are looked at: a file waits about this long
MIN_BACKOFF, MAX_BACKOFF = 1.0, 60.0
# Closed files uploaded side by side: small files' uploads are mostly the store's latency; large
# ones go alone (each is compressed on several threads and sent in parts already), so memory stays
# that of one large upload.
UPLOADS_AT_ONCE = 4
BATCH_BYTES = 64 * MIB
# Another relay's uploads compared with the local copies: at most this many a round, this many at once.
COMPARE_BATCH = 32
COMPARES_AT_ONCE = 4
# A reader lists the files newer than its newest at each look (one request), and the whole archive
# (a request per thousand objects) at every this many, to see archive.retention's deletions.
WHOLE_LISTING_EVERY = 20
CATALOG_SAVE_SECONDS = 1.0  # archive.json during `binlog-relay archive`: a crash there loses only a copy


@dataclass(frozen=True)
class ArchiveSettings:
    store: StoreConfig
    keks: tuple[Kek, ...] = ()  # the first encrypts new uploads; all of them open old ones
    level: int = DEFAULT_LEVEL
    max_age: float | None = None  # archive.retention
    max_files: int | None = None
    read_back: bool = False  # archive.verify_uploads: read-back
    upstream: tuple[str, ...] = ()  # host:port of the primaries followed: the archive's owner record names them
    writer_lease: float = DEFAULT_WRITER_LEASE  # archive.writer_lease

    @property
    def check_seconds(self) -> float:
        """How often the writer renews its record and a reader looks at it (and lists the archive):
        a relay that lost the archive to another stops writing within this."""
        return self.writer_lease / CHECKS_PER_LEASE


@dataclass
class ArchiveStatus:
    """What the archiver did, for /metrics."""

    uploaded_files: int = 0
    uploaded_file_bytes: int = 0  # bytes of the binlog files archived
    uploaded_object_bytes: int = 0  # bytes of their objects: the ratio is file / object
    deleted_files: int = 0
    errors: dict[str, int] = field(default_factory=dict)  # by operation: list, upload, delete, read
    damaged_reads: int = 0
    served_bytes: int = 0
    store_ok: bool = False
    writing: bool = False  # this relay writes the archive (False: it reads one another relay writes)

    def failed(self, operation: str) -> None:
        self.errors[operation] = self.errors.get(operation, 0) + 1


class Archiver:
    def __init__(self, settings: ArchiveSettings, relay_log: RelayLog,
                 open_store_for: Callable[[StoreConfig], ObjectStore] = open_store,
                 files_in_use: Callable[[], set[str]] = set) -> None:
        self.settings = settings
        self.relay_log = relay_log
        self.files_in_use = files_in_use  # the files dumps read: archive.retention keeps them and what follows
        self.status = ArchiveStatus()
        self._open_store = open_store_for
        self.store: ObjectStore | None = None
        self.clock = StoreClock()  # the store's against this host's, from its answers: /metrics, retention
        self.url = str(settings.store.url)
        self.files: dict[str, ArchivedFile] = self._load_catalog()
        self._catalogued = frozenset(self.files)  # the names archive.json lists as last written
        # local files known to equal their archived copy: only these may leave the disk for the archive's
        self._checked: set[str] = load_checked(Path(relay_log.data_dir), self.url)
        self._differs: set[str] = set()  # local files whose archived copy is other bytes
        # ... or could not be read back (damaged, its key missing): compared again once the time comes
        self._unreadable_until: dict[str, float] = {}
        self._told_unconfirmed: set[str] = set()  # files the log said wait for the primary's size
        self._told_unreadable_start: set[str] = set()  # archived files whose first events could not be read
        self._catalog_disk_full = False  # its last write failed for want of space
        self._unverifiable: set[str] = set()  # local files whose events fail their checks: never uploaded
        self._growing: dict[str, GrowingFile] = {}  # the newest file, uploaded as ingest writes it
        self._not_followed: set[str] = set()  # whose upload while written failed: uploaded once closed
        self._backoff = MIN_BACKOFF
        self._catalog_changed = trio.Event()
        self._catalog_lines: CatalogLines = {}  # archive.json's lines as last encoded
        self._looked_at = 0.0  # time.monotonic() of the last look at the owner record
        self._lease = LeaseWatch(settings.writer_lease)
        self._renewed_at = 0.0  # time.monotonic() of the writer's last renewal of its record
        self._relay_id = ""  # read from data_dir at the first connect
        self._told_reading = False  # the log said this relay reads the archive
        self._uploads_from = 0.0  # time.monotonic(): after taking the archive over, the relay replaced may still
        # be uploading the same files until its next check
        self._list_before_uploads = False  # after that wait, what it finished is listed before uploading
        self._listed_at: float | None = None  # time.monotonic() of the last listing; None: none since connecting
        self._listings = 0

    # ------------------------------------------------------------ what is archived

    def archived_names(self) -> set[str]:
        """The files whose local copy may go: in the archive, and in archive.json, so that a relay
        restarted while the store is down still serves them from the archive.  On a full disk, in
        the archive alone: the copy can be written again only once a purge frees space.  Either way
        only those whose local copy is known to equal the archived one."""
        listed = self.files.keys() if self._catalog_disk_full else self.files.keys() & self._catalogued
        stored = set(self.relay_log.files)
        return {name for name in listed if name in self._checked or name not in stored}

    def pending(self) -> list[str]:
        """The closed stored files not archived yet, oldest first (the newest file is still written).
        Not a damaged one, nor one a power cut may have cut short at a group end until the upstream
        has compared it with the primary's: archived short, the primary's whole copy would be lost
        once it purges its own."""
        closed = self.relay_log.files[:-1]
        return [name for name in closed if name not in self.files and name not in self.relay_log.damaged
                and name not in self.relay_log.unconfirmed and name not in self._unverifiable]

    def _closed_to_upload(self) -> list[str]:
        """What the closed files' uploads take: the pending files but those whose upload followed
        them while they were written and is finishing."""
        for name in self.relay_log.unconfirmed - self._told_unconfirmed:
            self._told_unconfirmed.add(name)
            log.info("archive: %s is archived once compared with the primary's copy: it does not end with a "
                     "ROTATE (a primary that crashed, or a power cut that cut it short)", name)
        return [name for name in self.pending() if name not in self._growing]

    def lag(self) -> tuple[int, int]:
        """Files and bytes closed but not archived."""
        names = self.pending()
        return len(names), sum(self.relay_log.file_end(name) for name in names)

    # ------------------------------------------------------------ the task

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._keep_catalog)
            nursery.start_soon(self._follow_newest)
            nursery.start_soon(self._keep_looking_at_owner)
            await self._archive_closed_files()

    async def _keep_catalog(self) -> None:
        """archive.json rewritten as ``files`` changes: the changes made while it is written go into
        the next write; a write that failed is tried again after a back-off even if nothing changes
        (a relay restarted while the store is down knows only what the copy lists); the relay's
        stop writes it once more."""
        retry: float | None = None
        try:
            while True:
                with trio.move_on_after(math.inf if retry is None else retry):
                    await self._catalog_changed.wait()
                self._catalog_changed = trio.Event()
                failure = await trio.to_thread.run_sync(self._write_catalog, dict(self.files), self._local_checked())
                if failure is None:
                    retry = None
                    continue
                retry = MIN_BACKOFF if retry is None or self._catalog_disk_full else min(MAX_BACKOFF, retry * 2)
                log.error("archive: %s could not be written (%s); written again in %.0f s or at the next change",
                          CATALOG, failure, retry)
        finally:
            failure = self._write_catalog(self.files, self._local_checked())
            if failure is not None:
                log.error("archive: %s could not be written at stop (%s); the next start lists the store", CATALOG,
                          failure)

    def _local_checked(self) -> frozenset[str]:
        """The checked names still stored (a purged file's is of no more use)."""
        return frozenset(self._checked.intersection(self.relay_log.files))

    def _write_catalog(self, files: dict[str, ArchivedFile], checked: frozenset[str]) -> OSError | None:
        """Blocking: the copy written (None), or why not (the store lists them: it is only a copy)."""
        try:
            save_catalog(Path(self.relay_log.data_dir), self.url, files, self._catalog_lines, checked)
        except OSError as exc:
            self._catalog_disk_full = is_disk_full(exc)
            return exc
        self._catalogued, self._catalog_disk_full = frozenset(files), False
        return None

    async def _archive_closed_files(self) -> None:
        while True:
            try:
                if self.store is None:
                    await self._connect()
                await self._list_when_due()
                for batch in self._batches(self._closed_to_upload() if self._uploading() else []):
                    await self._archive(batch)
                if self._uploading():
                    await self._apply_retention()
                await self._compare_local()
                self._backoff = MIN_BACKOFF
                self.status.store_ok = True
                if not (self._uploading() and self._closed_to_upload()):  # files closed meanwhile go up at once
                    await trio.sleep(CHECK_SECONDS)
            except (RelayError, OSError) as exc:
                # The store is down, refuses us, or answered with damage: ingest and serving go on;
                # retried after a back-off, the message told once per failure.
                self.status.store_ok = False
                log.error("archive %s: %s; retrying in %.0f s", self.url, exc, self._backoff)
                await trio.sleep(self._backoff)
                self._backoff = min(MAX_BACKOFF, self._backoff * 2)

    async def _keep_looking_at_owner(self) -> None:
        """The owner record looked at every check, apart from the uploads and the listings (a long
        batch or a first listing of thousands of files must not let the writer's lease lapse, nor
        keep a reader from seeing it lapse)."""
        failing = False
        while True:
            await trio.sleep(max(0.0, self._looked_at + self.settings.check_seconds - time.monotonic()))
            store = self.store
            if store is None:  # not connected yet, or refused: the archiving loop connects
                self._looked_at = time.monotonic()
                continue
            try:
                await self._look_at_owner(store)
                failing = False
            except ArchiveInUse:
                pass  # refused: the archiving loop connects again and says why
            except (RelayError, OSError) as exc:
                self._lease.forget()  # an outage is no sign that the writer is gone
                if not failing:
                    log.warning("archive %s: the owner record could not be looked at (%s); tried again every "
                                "%.0f s", self.url, exc, self.settings.check_seconds)
                failing = True
                if self.status.writing and not self._lease_held():
                    self._step_down()

    async def _connect(self) -> None:
        try:
            store = await trio.to_thread.run_sync(self._open_store, self.settings.store)
            self.clock = store.clock  # a store that refuses us still tells its time
            await trio.to_thread.run_sync(store.check)
            self._relay_id = await trio.to_thread.run_sync(relay_id, Path(self.relay_log.data_dir))
            await self._look_at_owner(store)  # before the clean-up: another relay's uploads are not ours to abort
        except ArchiveInUse:
            raise  # counted as a failed claim
        except RelayError:
            self.status.failed("list")
            raise
        self.store = store
        self._listed_at = None  # the whole archive, before anything else

    async def _list_when_due(self) -> None:
        """The archive listed: whole after a connect, then by a reader every check (the files after
        its newest; the whole archive every WHOLE_LISTING_EVERY), and by a relay that took the archive
        over once its wait is done (what the relay replaced finished)."""
        store = self.store
        assert store is not None
        first = self._listed_at is None
        since = math.inf if self._listed_at is None else time.monotonic() - self._listed_at
        reading_due = not self.status.writing and since >= self.settings.check_seconds
        if not (first or reading_due or (self._uploading() and self._list_before_uploads)):
            return
        self._listings += 1
        await self._list(store, newer_only=not first and self._listings % WHOLE_LISTING_EVERY != 0)
        self._listed_at, self._list_before_uploads = time.monotonic(), False
        if first:
            log.info("archive %s: %d file(s) archived, %d to upload", self.url, len(self.files),
                     len(self.pending()) if self.status.writing else 0)

    async def _list(self, store: ObjectStore, newer_only: bool = False) -> None:
        """The archive listed again (the metas of files known already are not fetched again);
        ``newer_only``: only the files after the newest known (archive.retention's deletions are
        seen at the next whole listing)."""
        known = dict(self.files)
        newer_than = max(known) if newer_only and known else None
        try:
            listed = await trio.to_thread.run_sync(list_archive, store, known, newer_than)
            unread = [name for name, archived in listed.items() if archived.start_state is None]
            starts = await trio.to_thread.run_sync(read_file_starts, store, unread, self.settings.keks)
        except RelayError:
            self.status.failed("list")
            raise
        gone = set(known) - set(listed)
        if gone and self.status.writing:
            log.warning("archive %s: %d file(s) the local catalog lists are not in the archive (%s ...): "
                        "archived again if still stored", self.url, len(gone), min(gone))
        for name, start in starts.items():  # listed from the store: its first events are read once
            if isinstance(start, ArchiveError):
                self._unreadable_start(name, start)
                continue
            listed[name] = replace(listed[name], start_state=start.gtid_list, previous_gtids=start.previous_gtids)
        # uploaded meanwhile
        listed.update((name, archived) for name, archived in self.files.items() if name not in known)
        if listed != self.files:
            self.files = listed
            self._catalog_changed.set()

    def _unreadable_start(self, name: str, exc: ArchiveError) -> None:
        """An archived file whose first events cannot be read stays listed, its start unknown (a dump
        reaching it gets the error of its read); the listing and the other files go on."""
        if name in self._told_unreadable_start:
            return
        self._told_unreadable_start.add(name)
        self.status.failed("read")
        if isinstance(exc, (ArchiveDamaged, ArchiveKeyError)):
            self.status.damaged_reads += 1
        log.error("archive %s: the archived %s cannot be read: %s", self.url, name, exc)

    def _uploading(self) -> bool:
        """This relay writes the archive, has listed it since connecting, and waits for no relay it replaced."""
        return self.status.writing and self._listed_at is not None and time.monotonic() >= self._uploads_from

    async def _look_at_owner(self, store: ObjectStore) -> None:
        """Who writes the archive (archive/owner.py), looked at on connect and every check: the
        writer renews its record, or learns it has been replaced and reads from then on; a reader
        takes the archive over once the writer's record has not changed for a whole lease."""
        self._looked_at = time.monotonic()
        take_over = False
        if not self.status.writing:
            current = await trio.to_thread.run_sync(read_owner, store)
            if current is not None and current.relay_id != self._relay_id:
                try:
                    check_same_history(current, self.url, self.settings.upstream)
                except ArchiveInUse:
                    self._refused()
                    raise
                if not self._lease.observe(current, time.monotonic()):
                    self._reading(current)
                    return
                take_over = True
        try:
            previous = await trio.to_thread.run_sync(claim, store, self.url, Path(self.relay_log.data_dir),
                                                     self.settings.upstream, take_over)
        except WrittenByPeer as peer:
            self._reading(peer.owner)
            return
        except ArchiveInUse:
            self._refused()
            raise
        self._renewed_at = time.monotonic()
        if not self.status.writing:
            await self._writing(store, previous)

    def _lease_held(self) -> bool:
        """The writer renewed its record within half a lease: the other relays, which take the archive
        over once it has not changed for a whole lease, are still waiting."""
        return time.monotonic() - self._renewed_at < self.settings.writer_lease / 2

    def _step_down(self) -> None:
        """A writer that could not renew its record for half a lease (the store unreachable from
        here, or this process paused) writes nothing more until it has claimed the archive again:
        another relay may be taking it over."""
        self.status.writing = False
        self._stop_following()
        log.warning("archive %s: the owner record not renewed for %.0f s; this relay writes nothing more until it "
                    "claims the archive again (another relay of the primary may take it over)", self.url,
                    time.monotonic() - self._renewed_at)

    def _reading(self, owner: Owner) -> None:
        was_writing = self.status.writing
        self.status.writing = False
        self._lease.observe(owner, time.monotonic())
        if was_writing:
            self._stop_following()
            log.warning("archive %s: now written by %s; this relay reads it from now on", self.url, owner.describe())
        elif not self._told_reading:
            log.info("archive %s: written by %s; this relay reads it (serves its files, purges a local file once "
                     "the archived copy equals it) and writes it if that relay is silent for %.0f s", self.url,
                     owner.describe(), self.settings.writer_lease)
        self._told_reading = True

    async def _writing(self, store: ObjectStore, previous: Owner | None) -> None:
        if previous is not None:
            # the relay replaced may still be uploading the files this one would: it learns within a
            # check (set first: if the clean-up below fails, the next look claims with no "previous")
            self._uploads_from = time.monotonic() + 2 * self.settings.check_seconds
            self._list_before_uploads = True
            log.info("archive %s: taken over from %s; uploads begin in %.0f s, once it has stopped writing",
                     self.url, previous.describe(), 2 * self.settings.check_seconds)
        # The uploads nobody can commit any more are aborted before this relay counts as writing (so
        # before any upload of its own): those begun before now, by the store's clock (this host's may
        # be minutes off it: behind, it left a dead relay's upload in place).  After a takeover they
        # are the replaced relay's; on a (re)start, its own earlier runs'.
        aborted = await trio.to_thread.run_sync(store.abort_stale_uploads, OBJECT_DIR)
        if aborted:
            log.info("archive %s: %d upload(s) a previous run left unfinished aborted", self.url, aborted)
        self.status.writing, self._told_reading = True, False

    def _refused(self) -> None:
        """Another primary's archive: nothing written, nothing read (ArchiveInUse raised on)."""
        self.status.failed("claim")
        self.status.writing = False
        self.store = None
        self._stop_following()

    def _stop_following(self) -> None:
        for growing in self._growing.values():
            growing.stop()  # its upload ends; the file goes up once this relay writes the archive again

    def _batches(self, names: list[str]) -> list[list[str]]:
        """``names`` in order, cut into batches of at most UPLOADS_AT_ONCE files and BATCH_BYTES
        (a larger file alone)."""
        batches: list[list[str]] = []
        size = 0
        for name in names:
            end = self.relay_log.file_end(name)
            if not batches or len(batches[-1]) >= UPLOADS_AT_ONCE or size + end > BATCH_BYTES:
                batches.append([])
                size = 0
            batches[-1].append(name)
            size += end
        return batches

    async def _archive(self, names: list[str]) -> None:
        """Check and upload ``names`` at once (a small file's upload is mostly the store's latency),
        then record what went up, in order; the first failure is raised after the others are kept."""
        started = time.monotonic()
        times = {name: self._commit_times(name) for name in names}
        outcomes = await trio.to_thread.run_sync(self._check_and_upload, names, times)
        failure: BaseException | None = None
        for name, outcome in zip(names, outcomes, strict=True):
            if isinstance(outcome, ArchivedFile):
                self._record(name, outcome, f"{time.monotonic() - started:.1f} s")
            elif isinstance(outcome, BinlogImportError):
                self._unverified(name, outcome)
            elif isinstance(outcome, UploadStopped):
                log.info("archive: the upload of %s is left to the relay that writes the archive now", name)
            else:
                self.status.failed("upload")
                failure = failure or outcome
        self._catalog_changed.set()
        if failure is not None:
            raise failure

    # ------------------------------------------------------------ the newest file, as it grows

    async def _follow_newest(self) -> None:
        """Upload the newest stored file while ingest writes it: its chunks are compressed and its
        parts sent as they are committed, so a file is archived about as soon as it is closed, and
        an archive keeps up with an ingest burst as long as the two together fit the machine (the
        closed files' uploads would only begin after it).  Followed once the store answers; a
        follow that fails leaves the file to the closed files' uploads."""
        seen: tuple[str, int] | None = None
        async with trio.open_nursery() as nursery:
            while True:
                for growing in list(self._growing.values()):
                    self._tell(growing)
                newest = self.relay_log.files[-1] if self.relay_log.files else None
                if (self.store is not None and self._uploading() and newest is not None and newest not in self._growing
                        and newest not in self.files and newest not in self._not_followed):
                    growing = self._growing[newest] = GrowingFile(newest, self.relay_log.path(newest), check_file)
                    self._tell(growing)
                    nursery.start_soon(self._upload_growing, growing, self.store)
                seen = await self.relay_log.wait_for_commit(seen)

    def _tell(self, growing: GrowingFile) -> None:
        files = self.relay_log.files
        if growing.name not in files:  # taken away (never while not archived, but not ours to upload)
            growing.stop()
            return
        closed = growing.name != files[-1]
        try:
            growing.grew(self.relay_log.path(growing.name).stat().st_size if closed
                         else self.relay_log.file_end(growing.name), closed, partial(self._commit_times, growing.name))
        except OSError:
            growing.stop()  # and the file is uploaded once closed, if it is still there

    async def _upload_growing(self, growing: GrowingFile, store: ObjectStore) -> None:
        name = growing.name
        kek = self.settings.keks[0] if self.settings.keks else None
        try:
            archived = await run_abandonable(partial(upload, store, growing.path, name, kek=kek,
                                                     level=self.settings.level, read_back=self.settings.read_back,
                                                     chunks=growing.chunks, commit_times=lambda: growing.commit_times,
                                                     may_commit=self._may_commit))
        except trio.Cancelled:
            growing.stop()  # the thread aborts the upload
            raise
        except BinlogImportError as exc:
            self._unverified(name, exc)
        except (RelayError, OSError) as exc:
            self._not_followed.add(name)
            if not isinstance(exc, UploadStopped):
                self.status.failed("upload")
                log.warning("archive: the upload of %s while it was written failed (%s); it is uploaded again "
                            "once closed", name, exc)
        else:
            closed_at = growing.closed_at or time.monotonic()
            self._record(name, archived, f"{time.monotonic() - closed_at:.1f} s after it closed")
            self._catalog_changed.set()
        finally:
            del self._growing[name]

    # ------------------------------------------------------------ the closed files

    def _check_and_upload(self, names: list[str], times: dict[str, tuple[int, int] | None]
                          ) -> list[ArchivedFile | BaseException]:
        """Blocking: each file checked and uploaded in a thread of its own, with its commit times;
        what each came to."""
        store = self.store
        assert store is not None
        kek = self.settings.keks[0] if self.settings.keks else None

        def one(name: str) -> ArchivedFile | BaseException:
            path = self.relay_log.path(name)
            try:
                check_file(path, name)
                return upload(store, path, name, kek=kek, level=self.settings.level, read_back=self.settings.read_back,
                              commit_times=lambda: times[name], may_commit=self._may_commit)
            except (BinlogImportError, RelayError, OSError) as exc:
                return exc

        with ThreadPoolExecutor(max_workers=len(names), thread_name_prefix="archive-upload") as pool:
            return list(pool.map(one, names))

    def _may_commit(self) -> None:
        """Asked by an upload (in its thread) just before its meta commits it: an upload that began
        before another relay took the archive over must not commit over that relay's, nor one whose
        writer has not renewed its record for half a lease (paused, cut off from the store)."""
        if not self.status.writing:
            raise UploadStopped(f"this relay no longer writes the archive {self.url}")
        if not self._lease_held():
            raise UploadStopped(f"this relay has not renewed its claim on the archive {self.url} for "
                                f"{time.monotonic() - self._renewed_at:.0f} s")

    def _unverified(self, name: str, exc: BinlogImportError) -> None:
        self._unverifiable.add(name)
        self.status.failed("verify")
        log.error("archive: %s is not uploaded, its events fail their checks (%s); it stays on the local "
                  "disk until it is repaired", name, exc)

    def _commit_times(self, name: str) -> tuple[int, int] | None:
        return commit_times(self.relay_log.history, name)  # the file is still stored: its index tells

    def _record(self, name: str, archived: ArchivedFile, took: str) -> None:
        self.files[name] = archived
        self._checked.add(name)  # uploaded from this very copy
        self._not_followed.discard(name)
        self.status.uploaded_files += 1
        self.status.uploaded_file_bytes += archived.file_size
        self.status.uploaded_object_bytes += archived.object_size
        log.info("archive: %s uploaded and verified (%d bytes, %d stored, %s)", name, archived.file_size,
                 archived.object_size, took)

    # ------------------------------------------------------------ another relay's uploads

    async def _compare_local(self) -> None:
        """Each stored closed file the archive holds but this relay did not upload is read back once
        and compared with the local copy: equal, it may leave the disk; other bytes (another history
        under the same name), it stays and is served from here; an object that cannot be read, it
        stays until a comparison a lease later tells.  At most
        COMPARE_BATCH files a round, COMPARES_AT_ONCE at a time (each is mostly the store's round
        trips), so that a relay joining with a long local history still lists the archive meanwhile."""
        store = self.store
        assert store is not None
        now = time.monotonic()
        unchecked = [name for name in self.relay_log.files[:-1]
                     if name in self.files and name not in self._checked and name not in self._differs
                     and self._unreadable_until.get(name, now) <= now]
        batch = unchecked[:COMPARE_BATCH]
        if not batch:
            return
        outcomes = await trio.to_thread.run_sync(self._compare_batch, store, batch)
        for name, outcome in zip(batch, outcomes, strict=True):
            if isinstance(outcome, (ObjectMissing, FileNotFoundError)):
                continue  # left the archive (the next listing drops it) or purged meanwhile (not for the archive's)
            if isinstance(outcome, ArchiveError):
                # no verdict: the writer may upload it again (an upload cut short), a key may come back
                self.status.failed("read")
                if isinstance(outcome, (ArchiveDamaged, ArchiveKeyError)):
                    self.status.damaged_reads += 1
                self._unreadable_until[name] = time.monotonic() + self.settings.writer_lease
                log.error("archive: the archived %s cannot be read back (%s); the local copy stays and is served, "
                          "compared again in %.0f s", name, outcome, self.settings.writer_lease)
                continue
            if isinstance(outcome, BaseException):
                raise outcome  # the store is down: the round is retried after a back-off
            self._unreadable_until.pop(name, None)
            if outcome is None:
                self._checked.add(name)
                self._catalog_changed.set()
                continue
            self._differs.add(name)
            self.status.failed("compare")
            log.error("archive: the archived %s is not this relay's copy (%s); the local copy stays and is served, "
                      "never purged for the archive's", name, outcome)

    def _compare_batch(self, store: ObjectStore, names: list[str]) -> list[str | None | BaseException]:
        """Blocking: differences_from_archived of each of ``names``, or what it raised."""

        def one(name: str) -> str | None | BaseException:
            try:
                return differences_from_archived(store, name, self.settings.keks, self.relay_log.path(name))
            except (RelayError, OSError) as exc:
                return exc

        with ThreadPoolExecutor(max_workers=COMPARES_AT_ONCE, thread_name_prefix="archive-compare") as pool:
            return list(pool.map(one, names))

    async def _apply_retention(self) -> None:
        doomed = self.to_delete(self.clock.now())  # the files' times are the store's: Last-Modified, or as above
        store = self.store
        for name in doomed:
            assert store is not None
            if name in self._read_now():  # a dump came to it while the files before were deleted
                break
            try:
                await trio.to_thread.run_sync(delete_archived, store, name)
            except RelayError:
                self.status.failed("delete")
                raise
            del self.files[name]
            self._catalog_changed.set()
            self.status.deleted_files += 1
            log.info("archive: %s deleted (archive.retention)", name)

    def to_delete(self, now: float) -> list[str]:
        """archive.retention: the oldest archived files beyond max_files or older than max_age,
        never one still stored locally (it would only be archived again), nor one a dump or SHOW
        BINLOG EVENTS reads or the files after it (a primary's PURGE stops at a log in use too)."""
        names = sorted(self.files)
        kept = set(self.relay_log.files) | self._read_now()
        doomed = []
        for index, name in enumerate(names):
            too_many = self.settings.max_files is not None and len(names) - index > self.settings.max_files
            too_old = self.settings.max_age is not None and now - self.files[name].archived_at > self.settings.max_age
            if not (too_many or too_old) or name in kept:
                break  # oldest first, as the local retention
            doomed.append(name)
        return doomed

    def _read_now(self) -> set[str]:
        shelf = self.relay_log.shelf
        return self.files_in_use() | (shelf.in_use() if shelf is not None else set())

    # ------------------------------------------------------------ reading back

    def fetch_file(self, name: str, target: Path, stop: Callable[[], bool] = lambda: False,
                   progress: Callable[[int], None] = lambda end: None) -> None:
        """Write the archived ``name`` to ``target``, frame by frame, each verified (blocking: for
        a worker thread; relay/storage/shelf.py calls it for the dumps).  ``stop``, ``progress``:
        see copy_to."""
        store = self.store or self._open_store(self.settings.store)
        try:
            reader = ArchivedFileReader(store, name, self.settings.keks)
            reader.copy_to(target, stop, progress)
        except FetchStopped:
            raise  # its reader went away: nothing failed
        except ArchiveError as exc:
            self.status.failed("read")
            if isinstance(exc, (ArchiveDamaged, ArchiveKeyError)):
                self.status.damaged_reads += 1
            log.error("archive: %s cannot be read back: %s", name, exc)
            raise
        except RelayError:
            self.status.failed("read")
            raise
        self.status.served_bytes += reader.size

    def _load_catalog(self) -> dict[str, ArchivedFile]:
        return load_catalog(Path(self.relay_log.data_dir), self.url)


def commit_times(history: HistoryIndex, name: str) -> tuple[int, int] | None:
    """The lowest and highest header times of a closed file's commits, from its index (None: no
    commit, or not known: they only spare a search reading archived files, never stop an upload)."""
    try:
        summary = history.summary(name)
    except (OSError, RelayError) as exc:
        log.warning("archive: the commit times of %s are not known (%s); a search by time reads it", name, exc)
        return None
    if summary is None or summary.commit_lo is None or summary.commit_hi is None:
        return None
    return summary.commit_lo, summary.commit_hi


def load_catalog(data_dir: Path, url: str) -> dict[str, ArchivedFile]:
    """archive.json: the archived files as last listed ({} when missing, unreadable or another archive's)."""
    document = _catalog_document(data_dir, url)
    try:
        files = {}
        for entry in document.get("files", ()):
            state = entry.get("start_state")
            files[entry["name"]] = ArchivedFile(**{**entry, "start_state": None if state is None else tuple(state)})
        return files
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        log.warning("archive: %s unreadable (%s); the store's listing replaces it", data_dir / CATALOG, exc)
        return {}


def load_checked(data_dir: Path, url: str) -> set[str]:
    """archive.json's local files known to equal their archived copy.  A copy written before relays
    shared archives has no such list: all it lists was this relay's own upload (or seed) then."""
    document = _catalog_document(data_dir, url)
    try:
        if "checked" in document:
            return {str(name) for name in document["checked"]}
        return {str(entry["name"]) for entry in document.get("files", ())}
    except (TypeError, KeyError) as exc:
        log.warning("archive: %s unreadable (%s); its local files are compared with the archive again",
                    data_dir / CATALOG, exc)
        return set()


def _catalog_document(data_dir: Path, url: str) -> dict[str, Any]:
    """archive.json parsed ({} when missing, unreadable or another archive's)."""
    path = data_dir / CATALOG
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning("archive: %s unreadable (%s); the store's listing replaces it", path, exc)
        return {}
    if not isinstance(document, dict) or document.get("url") != url:
        return {}  # another archive's: the store's listing rebuilds it
    return document


_CATALOG_FIELDS = tuple(entry.name for entry in fields(ArchivedFile))


CatalogLines = dict[str, tuple[ArchivedFile, str]]


def save_catalog(data_dir: Path, url: str, files: dict[str, ArchivedFile], lines: CatalogLines | None = None,
                 checked: Iterable[str] = ()) -> None:
    """One file a line (dataclasses.asdict and an indented dump took six times as long).  ``lines``
    keeps each file's line from one write to the next of the same writer: the archiver writes the
    whole copy after every upload, and encoding 50,000 files took 0.33 CPU s a write.  ``checked``:
    the local files known to equal their archived copy."""
    cache: CatalogLines = {} if lines is None else lines
    encoded = []
    for name in sorted(files):
        archived = files[name]
        known = cache.get(name)
        if known is None or known[0] is not archived:
            known = cache[name] = (archived, json.dumps({key: getattr(archived, key) for key in _CATALOG_FIELDS}))
        encoded.append(known[1])
    for gone in cache.keys() - files.keys():
        del cache[gone]
    text = (f'{{"url": {json.dumps(url)}, "checked": {json.dumps(sorted(checked))}, "files": [\n'
            + ",\n".join(encoded) + "\n]}\n")
    atomic_write(data_dir / CATALOG, text.encode())


def seed_from_archive(settings: ArchiveSettings, data_dir: Path,
                      open_store_for: Callable[[StoreConfig], ObjectStore] = open_store) -> str | None:
    """A relay started on an empty data_dir with an archive stands up again from it: the newest
    archived file is fetched and imported (storage/importer.py: checked, indexed, the state
    written), so ingest resumes where the archive ends and every older file is served from the
    archive; the primary is never asked for what it may have purged.  Returns that file; None: the
    data_dir holds files already, or the archive is empty.  ArchiveInUse if the archive is another
    primary's.  The archive is not claimed here: the archiver writes it if no live relay does
    (archive/owner.py).  Blocking: for start-up."""
    marker = data_dir / SEEDING
    if marker.exists():
        _undo_seed(data_dir)
    elif read_index(data_dir):
        return None
    store = open_store_for(settings.store)
    archived = list_archive(store)
    if not archived:
        return None
    newest = max(archived)
    check_same_history(read_owner(store), str(settings.store.url), settings.upstream)
    make_durable_dir(data_dir)
    # the seed is several writes (the import's index, state and history, archive.json, the next
    # file): until the last is done, a start finds this marker and does it all again
    atomic_write(marker, f"{newest}\n".encode())
    with tempfile.TemporaryDirectory(prefix=SEED_TMP_PREFIX, dir=data_dir) as tmp:
        target = Path(tmp) / newest
        ArchivedFileReader(store, newest, settings.keks).copy_to(target)
        imported = import_binlogs(data_dir, [target]).imported[0]
    # dumps find the older files before the first listing; the imported copy is the archive's own
    save_catalog(data_dir, str(settings.store.url), archived, checked=[newest])
    # Ingest resumes at the file after it, which its ROTATE names, or which the server opened after
    # the STOP of a restart (as after a crash before the next file was stored): the primary may
    # have purged the archived one already.
    following = imported.next_file or (next_file_name(newest) if imported.stopped else None)
    if following is not None:
        write_index(data_dir, [*read_index(data_dir), following])
    marker.unlink()
    fsync_dir(data_dir)
    log.info("archive %s: an empty data_dir seeded with %s, the newest of its %d archived files; the older ones "
             "are served from the archive", settings.store.url, newest, len(archived))
    return newest


SEEDING = "seeding"  # in data_dir while a seed from the archive is under way
SEED_TMP_PREFIX = ".seed-"


def _undo_seed(data_dir: Path) -> None:
    """What a seed that did not finish (the relay killed meanwhile) wrote goes: it is done again."""
    log.warning("%s: a seed from the archive did not finish (the relay stopped meanwhile); it is done again",
                data_dir)
    for name in read_index(data_dir):
        (data_dir / name).unlink(missing_ok=True)
    for name in (INDEX_NAME, STATE_NAME, CATALOG):
        (data_dir / name).unlink(missing_ok=True)
    shutil.rmtree(data_dir / HISTORY_DIR, ignore_errors=True)
    for leftover in data_dir.glob(f"{SEED_TMP_PREFIX}*"):
        shutil.rmtree(leftover, ignore_errors=True)
    fsync_dir(data_dir)
    (data_dir / SEEDING).unlink()
    fsync_dir(data_dir)


@dataclass(frozen=True)
class BacklogResult:
    archived: tuple[str, ...]  # uploaded now
    already: int  # closed files the archive held before
    unverifiable: tuple[str, ...]  # closed files whose events fail their checks: not uploaded
    file_bytes: int


def archive_backlog(settings: ArchiveSettings, data_dir: Path, progress: Callable[[str], None],
                    open_store_for: Callable[[StoreConfig], ObjectStore] = open_store) -> BacklogResult:
    """``binlog-relay archive``: upload every closed stored file the archive lacks, oldest first,
    with a progress line after each (a relay's backlog archived the first time can be hours of
    uploads).  The relay must be stopped: this takes the data_dir's lock.  Blocking."""
    lock = DataDirLock(data_dir)
    lock.acquire()
    try:
        url = str(settings.store.url)
        store = open_store_for(settings.store)
        store.check()
        try:
            claim(store, url, data_dir, settings.upstream)
        except WrittenByPeer as peer:
            raise ArchiveInUse(f"archive {url}: written by {peer.owner.describe()}: only the relay writing an "
                               "archive uploads to it (if that relay is gone for good, start this one: it takes "
                               f"the archive over once that relay has been silent for {settings.writer_lease:.0f} s "
                               "and uploads its backlog)") from None
        store.abort_stale_uploads(OBJECT_DIR)  # before any upload of this command's
        archived = list_archive(store, load_catalog(data_dir, url))
        checked = load_checked(data_dir, url)
        stored = read_index(data_dir)
        closed = stored[:-1]
        pending = [name for name in closed if name not in archived]
        history = HistoryIndex(data_dir, lambda: stored, lambda name: (data_dir / name).stat().st_size,
                               writable=False)
        total = sum((data_dir / name).stat().st_size for name in pending)
        done_bytes, uploaded, skipped = 0, [], []
        started = time.monotonic()
        kek = settings.keks[0] if settings.keks else None
        saved_at = started
        lines: CatalogLines = {}
        try:
            for number, name in enumerate(pending, 1):
                path = data_dir / name
                try:
                    check_file(path, name)
                except BinlogImportError as exc:
                    skipped.append(name)
                    progress(f"{name} not archived: its events fail their checks ({exc})")
                    continue
                archived[name] = upload(store, path, name, kek=kek, level=settings.level, read_back=settings.read_back,
                                        commit_times=partial(commit_times, history, name))
                if time.monotonic() - saved_at >= CATALOG_SAVE_SECONDS:  # not once a file: it grows with each
                    save_catalog(data_dir, url, archived, lines, checked)
                    saved_at = time.monotonic()
                uploaded.append(name)
                checked.add(name)
                done_bytes += archived[name].file_size
                rate = done_bytes / max(time.monotonic() - started, 1e-6)
                left = (total - done_bytes) / rate if rate else 0.0
                progress(f"archived {number}/{len(pending)} files, {done_bytes / MIB:,.1f} of {total / MIB:,.1f} "
                         f"MiB, {rate / MIB:,.1f} MiB/s, about {left:,.0f} s left ({name})")
        finally:
            save_catalog(data_dir, url, archived, lines, checked & set(stored))
        return BacklogResult(tuple(uploaded), len(closed) - len(pending), tuple(skipped), done_bytes)
    finally:
        lock.release()
