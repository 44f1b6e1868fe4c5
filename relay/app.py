"""The relay process: storage, the upstream task, the replica listener and metrics in one trio nursery."""

from __future__ import annotations

import logging
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from .config import Config
from .downstream.listener import Downstream
from .downstream.registry import Registry
from .errors import RelayError
from .httpserver import HttpServer, Readiness
from .ingest.settings import Candidate, UpstreamSettings
from .metrics import Metrics
from .storage.files import SPACE_RESERVE_BYTES, DataDirError, keep_space_reserve
from .storage.relaylog import RelayLog
from .storage.replicabook import ReplicaBook
from .storage.retention import RetentionKeeper, RetentionPolicy
from .storage.shelf import ArchiveShelf
from .upstream import Upstream

if TYPE_CHECKING:
    from .archive.archiver import Archiver, ArchiveSettings

log = logging.getLogger(__name__)

RETENTION_CHECK_SECONDS = 2.0  # a stat() per stored file: cheap enough to keep purges prompt


def configured_primaries(config: Config) -> tuple[Candidate, ...]:
    """upstream.hosts, or upstream.host and port as the one primary."""
    upstream = config.upstream
    if upstream.hosts:
        return tuple(Candidate(entry.host, entry.port) for entry in upstream.hosts)
    return (Candidate(upstream.host or "", upstream.port),)


def upstream_settings(config: Config) -> UpstreamSettings:
    upstream = config.upstream
    first = configured_primaries(config)[0]
    candidates = configured_primaries(config) if upstream.hosts else ()
    return UpstreamSettings(
        host=first.host,
        port=first.port,
        candidates=candidates,
        semi_sync=upstream.semi_sync,
        behind_wait=upstream.behind_wait,
        wait_for_replicas=config.semi_sync.wait_for_replicas,
        replica_timeout=config.semi_sync.replica_timeout,
        user=upstream.user,
        password=upstream.password.reveal() if upstream.password is not None else "",
        relay_server_id=config.server_id,
        start_file=upstream.start.file if upstream.start else None,
        start_gtid=upstream.start.gtid if upstream.start else None,
        heartbeat_period=upstream.heartbeat_period,
        connect_timeout=upstream.connect_timeout,
        reconnect_initial_delay=upstream.reconnect.initial_delay,
        reconnect_max_delay=upstream.reconnect.max_delay,
        ssl_mode=upstream.ssl.mode,
        ssl_ca=upstream.ssl.ca,
        ssl_cert=upstream.ssl.cert,
        ssl_key=upstream.ssl.key,
        server_public_key=Path(upstream.server_public_key).read_bytes() if upstream.server_public_key else None,
    )


def archive_settings(config: Config) -> ArchiveSettings | None:
    archive = config.archive
    if archive.url is None:
        return None
    # The archive's libraries (boto3, zstandard, cryptography's AES) are loaded by a relay that has
    # one only: they took half the start-up of every relay, the time a restart is down.
    from .archive.archiver import ArchiveSettings
    from .archive.keys import read_keks
    from .archive.store import StoreConfig

    store = StoreConfig(archive.url, endpoint_url=archive.endpoint_url, region=archive.region,
                        access_key_id_file=Path(archive.access_key_id_file) if archive.access_key_id_file else None,
                        secret_access_key_file=(Path(archive.secret_access_key_file)
                                                if archive.secret_access_key_file else None))
    return ArchiveSettings(store, read_keks(archive.encryption_key_file, archive.old_encryption_key_files),
                           archive.compression_level, archive.retention.max_age, archive.retention.max_files,
                           read_back=archive.verify_uploads == "read-back",
                           upstream=tuple(str(primary) for primary in configured_primaries(config)),
                           writer_lease=archive.writer_lease)


def open_relay_log(config: Config) -> RelayLog:
    relay_log = RelayLog(config.data_dir, config.storage.sync, config.storage.sync_interval_ms / 1000,
                         index_interval=config.storage.index_interval)
    relay_log.open()
    return relay_log


class Relay:
    """Everything one ``binlog-relay run`` owns."""

    def __init__(self, config: Config) -> None:
        self.config = config
        settings = archive_settings(config)
        self.archiver: Archiver | None = None
        if settings is not None:
            from .archive.archiver import Archiver, seed_from_archive

            try:  # an empty data_dir stands up again from the archive
                seed_from_archive(settings, Path(config.data_dir))
            except RelayError as exc:  # (the store down, a damaged object): not from the primary's purged files
                raise DataDirError(f"{config.data_dir} holds no binlog and the archive could not seed it: {exc}") \
                    from exc
        self.relay_log = open_relay_log(config)
        if not keep_space_reserve(Path(config.data_dir)):
            log.warning("%s has no room for its %d KiB space reserve yet: on a full disk a purge could not be "
                        "written until space is freed", config.data_dir, SPACE_RESERVE_BYTES >> 10)
        self.registry = Registry()
        self.upstream = Upstream(upstream_settings(config), self.relay_log, self.registry)
        if settings is not None:
            archiver = self.archiver = Archiver(settings, self.relay_log, files_in_use=self.registry.files_in_use)
            self.relay_log.shelf = ArchiveShelf(Path(config.data_dir), lambda: archiver.files, archiver.fetch_file)
        retention = config.storage.retention
        self.replica_book = ReplicaBook(Path(config.data_dir), retention.replica_grace)
        self.replica_book.load()
        self._book_lock = trio.Lock()
        self.retention = RetentionKeeper(self.relay_log, RetentionPolicy(
            retention.max_size, retention.max_age, retention.min_files), self.registry.files_in_use,
            self.replica_book.needed, self.archiver.archived_names if self.archiver else None)
        self.downstream = Downstream(config, self.relay_log, self.upstream, self.registry, self.retention)
        self.metrics = Metrics(self.upstream.status, self.relay_log, self.registry, self.archiver)
        self.readiness = Readiness(self.upstream.status, self.relay_log, config.upstream.unready_after)
        self.http = HttpServer(self.metrics.render, self.readiness.check)

    async def run(self, task_status: trio.TaskStatus[Relay] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(self.downstream.serve)
                if self.config.metrics.enabled:
                    await nursery.start(self.http.serve, self.config.metrics.host, self.config.metrics.port)
                nursery.start_soon(self.upstream.run)
                nursery.start_soon(self.relay_log.history.index_stored_files)
                nursery.start_soon(self._sync_timer)
                nursery.start_soon(self._retention_timer)
                nursery.start_soon(self._book_new_replicas)
                if self.archiver is not None:
                    nursery.start_soon(self.archiver.run)
                task_status.started(self)
        finally:
            self.relay_log.close()
            log.info("relay stopped; state written")

    async def _retention_timer(self) -> None:
        data_dir = Path(self.config.data_dir)
        while True:
            await trio.sleep(RETENTION_CHECK_SECONDS)
            try:  # made again once a full disk has room (given up, it let a purge be written)
                await trio.to_thread.run_sync(keep_space_reserve, data_dir)
            except OSError as exc:
                log.error("retention: cannot make data_dir's space reserve: %s", exc)
            now = time.time()
            try:
                await self._book_replicas(now)
            except OSError as exc:  # written again at the next round; no purge before it protects them
                log.error("retention: cannot write the replica book, nothing purged until it is written: %s", exc)
                continue
            try:
                self.retention.enforce(now)
            except (OSError, DataDirError) as exc:  # retried on the next round, never fatal
                log.error("retention: purge failed: %s", exc)

    async def _book_new_replicas(self) -> None:
        """A replica is in the book as soon as its dump starts, not at the next retention round: a
        relay that dies (or loses power) in between would not know, once back, which files the
        replica comes back for, and could purge them."""
        while True:
            await self.registry.wait_for_new_dump()
            try:
                await self._book_replicas(time.time())
            except OSError as exc:  # written again at the next round
                log.error("retention: cannot write the replica book: %s", exc)

    async def _book_replicas(self, now: float) -> None:
        """The book written in a worker thread: its fsyncs would hold up every dump (a replica's
        first event among them), one write at a time."""
        async with self._book_lock:
            for dump in list(self.registry.all_dumps):
                self.replica_book.seen(dump.server_id, dump.file, now)
            document = self.replica_book.to_write(now)
            if document is not None:
                await trio.to_thread.run_sync(self.replica_book.write, document)

    async def _sync_timer(self) -> None:
        # With sync: interval an idle upstream sends no more writes, so flush on a clock too.
        period = self.config.storage.sync_interval_ms / 1000
        while True:
            await trio.sleep(period)
            self.relay_log.sync_if_due()


async def run_until_signalled(config: Config) -> None:
    relay = Relay(config)
    async with trio.open_nursery() as nursery:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            await nursery.start(relay.run)
            log.info("binlog-relay running: server_id %d, data_dir %s, upstream %s, replicas on port %d",
                     config.server_id, config.data_dir, relay.upstream.effective(), relay.downstream.port)
            async for signum in signals:
                log.info("received %s, stopping", signal.Signals(signum).name)
                nursery.cancel_scope.cancel()
                break
