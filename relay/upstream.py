"""The replica client: connect to the primary, log in, register, dump, store; reconnect.

This is the trio shell around ``protocol.client.ClientConnection`` (the conversation)
and ``replication.stream.IngestStream`` (the event stream).  It moves bytes and decides when
to retry; everything it parses is parsed by those sans-IO objects.  Each concern of the upstream
side is a module of ``relay/ingest/`` (choosing a candidate, starting a dump, semi-sync ACKs, a
full disk, damaged files fetched again, what is retried); ``Upstream`` runs them, connection
after connection.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable

import trio

from .ingest.acks import Acknowledger, ReplicaAcks, StoredEnd, semi_sync_receiver
from .ingest.choosing import CandidateChooser
from .ingest.connection import RECEIVE_SIZE, PrimaryConnection
from .ingest.diskfull import wait_for_space
from .ingest.dumpstart import DumpStarter
from .ingest.errors import FATAL, RETRYABLE, FatalIngestError, describe, error_number
from .ingest.repoint import UpstreamRefused, forget_upstream, save_upstream, saved_or_yaml, vet_new_upstream
from .ingest.settings import Candidate, EffectiveUpstream, UpstreamChange, UpstreamSettings
from .ingest.status import UpstreamStatus
from .protocol.codes import ER_MASTER_FATAL_ERROR_READING_BINLOG, ER_MASTER_INFO
from .protocol.packets import ServerError
from .replication.semisync import Ack
from .replication.stream import IngestStream, Segment, StreamError
from .replication.translate import TranslatingStream
from .storage.files import is_disk_full
from .storage.gtidindex import GtidIndex
from .storage.relaylog import RelayLog
from .trio_run import lone_exceptions

log = logging.getLogger(__name__)


class Upstream:
    """Keeps the relay log in step with the primary, reconnecting for ever, but between STOP SLAVE
    and START SLAVE; CHANGE MASTER TO and RESET SLAVE change which upstream it follows."""

    def __init__(self, settings: UpstreamSettings, relay_log: RelayLog,
                 replica_acks: ReplicaAcks | None = None) -> None:
        self.yaml_settings = settings  # the configuration's upstream, followed again after RESET SLAVE
        self.relay_log = relay_log
        self.status = UpstreamStatus()
        self._gtid_index = GtidIndex(relay_log)
        self._replica_acks = replica_acks  # the relay's semi-sync replicas, for semi_sync.wait_for_replicas
        self._follow(saved_or_yaml(settings, relay_log.data_dir))
        self._resumed = trio.Event()  # set by START SLAVE
        self._session: trio.CancelScope | None = None  # what STOP SLAVE cancels
        self._session_ended = trio.Event()

    def _follow(self, settings: UpstreamSettings) -> None:
        self.settings = settings
        self._chooser = CandidateChooser(settings, self.relay_log, self.status, self._gtid_index)
        self._dumps = DumpStarter(settings, self.relay_log, self.status, self._gtid_index)
        self._acks = Acknowledger(settings, self.relay_log, self.status, self._replica_acks)

    def effective(self) -> EffectiveUpstream:
        """The upstream followed (or followed at START SLAVE): SHOW SLAVE STATUS and the log read it here."""
        return EffectiveUpstream.of(self.settings, self.status.current, not self.status.stopped)

    # ------------------------------------------------------------ runtime control (downstream/control.py)

    async def stop(self) -> None:
        """STOP SLAVE: the connection to the primary is closed and the partial group behind the
        stored whole ones cut (as after a lost connection) before this returns; dumps go on serving
        what is stored."""
        self.status.stopped = True
        self._resumed = trio.Event()
        if self._session is not None:
            self._session.cancel()
            await self._session_ended.wait()

    def start(self) -> None:
        """START SLAVE: connect again, from where the stored history ends."""
        self.status.stopped = False
        self.status.failing_since = time.monotonic()  # not connected yet: unready_after counts from now
        self._resumed.set()

    async def change_master(self, change: UpstreamChange) -> EffectiveUpstream:
        """CHANGE MASTER TO (ingest stopped): the new upstream is vetted (ingest/repoint.py), saved in
        data_dir and followed at START SLAVE; a refusal raises and leaves everything as it was."""
        now = self.effective()
        settings = change.applied_to(self.settings, Candidate(now.host, now.port))
        await vet_new_upstream(settings, self.relay_log, self._gtid_index)
        try:
            save_upstream(settings, self.yaml_settings, self.relay_log.data_dir)
        except OSError as exc:
            raise UpstreamRefused(ER_MASTER_INFO, f"Could not save the new upstream in {self.relay_log.data_dir}: "
                                  f"{exc.strerror or exc}") from None
        self._follow(settings)
        return self.effective()

    def reset_slave(self) -> None:
        """RESET SLAVE [ALL] (ingest stopped): forget CHANGE MASTER TO; the YAML's upstream is followed
        at START SLAVE.  The stored history stays: the relay never forgets where it is."""
        if forget_upstream(self.relay_log.data_dir) or self.settings.repointed:
            log.info("upstream: RESET SLAVE: following the YAML's upstream again from START SLAVE")
        self._follow(self.yaml_settings)

    # ------------------------------------------------------------ running

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.relay_log.run_committer)
            await self._replicate_between_stops()

    async def _replicate_between_stops(self) -> None:
        while True:
            if self.status.stopped:
                await self._resumed.wait()
                continue
            self._session_ended = trio.Event()
            with trio.CancelScope() as self._session:
                await self._replicate_for_ever()
            self._session = None
            self._halted()
            self._session_ended.set()

    def _halted(self) -> None:
        self.status.connected = False
        self.status.connected_event = trio.Event()
        self.status.failing_since = None  # stopped on purpose: not failing
        self.relay_log.keep_whole_groups()
        log.info("upstream: ingest stopped (STOP SLAVE); replicas are served what is stored")

    async def _replicate_for_ever(self) -> None:
        delay = self.settings.reconnect_initial_delay
        while True:
            try:
                await self._replicate_once()
            except FATAL as exc:
                self._failed(exc, str(exc))
                log.error("upstream: ingest stopped: %s", exc)
                if isinstance(exc, StreamError):  # what the primary sent cannot be stored: an operator must act
                    raise FatalIngestError(str(exc)) from exc
                raise
            except RETRYABLE as exc:
                if is_disk_full(exc):
                    # Not a network fault: reconnecting would download the same bytes to the same full
                    # disk again and again. Wait for space, then resume where the last group ended.
                    self._lost()
                    await wait_for_space(self.relay_log.data_dir, self.status, exc)
                    continue
                self._failed(exc, describe(exc))
                if self.status.connected:
                    delay = self.settings.reconnect_initial_delay  # it worked for a while
                self._lost()
                wait = delay * random.uniform(0.5, 1.0)
                log.warning("upstream %s: %s; reconnecting in %.1fs", self.status.current or "(none)",
                            self.status.last_error, wait)
                await trio.sleep(wait)
                delay = min(delay * 2, self.settings.reconnect_max_delay)
                self.status.reconnects += 1

    def _failed(self, exc: BaseException, message: str) -> None:
        """What SHOW SLAVE STATUS shows as Last_IO_Errno / Last_IO_Error, and readiness reads."""
        self.status.last_error = message
        self.status.last_errno = error_number(exc, self.status.connected)
        self.status.last_error_time = time.time()

    def _lost(self) -> None:
        if self.status.failing_since is None:
            self.status.failing_since = time.monotonic()
        self.status.connected = False
        self.status.connected_event = trio.Event()
        self.relay_log.keep_whole_groups()

    async def _replicate_once(self) -> None:
        conn, facts = await self._chooser.choose()
        try:
            checksum_alg = await self._dumps.prepare(conn)
            stream = await self._dumps.start(conn, checksum_alg, facts)
            self.relay_log.repairs_tried()  # what could be fetched again was: waiting dumps start
            self.status.stream = stream
            self.status.unread_bytes = conn.unread_bytes
            self.status.connected = True
            self.status.failing_since = None
            self.status.connected_event.set()
            await self._ingest(conn, stream)
        finally:
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(conn.stream)

    async def _ingest(self, conn: PrimaryConnection, stream: IngestStream | TranslatingStream) -> None:
        if not self.status.semi_sync:
            await self._receive_and_store(conn, stream.receive)
            return
        # Semi-sync: the plain stream goes to ``stream``; each transaction the primary waits on is
        # acknowledged by another task once it is committed (fsynced, with storage.sync: commit),
        # so a slow disk delays the primary's commit, never the receiving.
        to_ack, acks = trio.open_memory_channel[tuple[StoredEnd, Ack]](math.inf)
        with lone_exceptions():  # trio >= 0.25 wraps them in groups: the retry loop needs their kind
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._acks.acknowledge, conn, acks)
                await self._receive_and_store(conn, semi_sync_receiver(stream, to_ack))

    async def _receive_and_store(self, conn: PrimaryConnection,
                                 receive_segments: Callable[[bytes | bytearray], list[Segment]]) -> None:
        silence_limit = 2 * self.settings.heartbeat_period
        receive = conn.stream.receive_some
        relay_log = self.relay_log
        while True:
            data = None
            with trio.move_on_after(silence_limit):
                data = await receive(RECEIVE_SIZE)
            if data is None:
                raise ConnectionError(f"no event or heartbeat from the primary for {silence_limit:.0f}s")
            if not data:
                raise ConnectionError("the primary closed the connection")
            self.status.bytes_received += len(data)
            try:
                segments = receive_segments(data)
            except ServerError as exc:
                if exc.code == ER_MASTER_FATAL_ERROR_READING_BINLOG:
                    raise FatalIngestError(f"the primary refused the binlog dump: {exc.message}") from exc
                raise
            if segments:
                relay_log.apply(segments)
            else:
                relay_log.sync_if_due()

