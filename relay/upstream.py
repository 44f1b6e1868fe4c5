"""The replica client: connect to the primary, log in, register, dump, store; reconnect.

This is the trio shell around ``protocol.client.ClientConnection`` (the conversation)
and ``replication.stream.IngestStream`` (the event stream).  It moves bytes and decides when
to retry; everything it parses is parsed by those sans-IO objects.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import math
import os
import random
import ssl
import sys
import termios
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import trio

from .binlog import events as ev
from .binlog.names import next_file_name
from .candidates import (
    RELAY_VERSION_COMMENT,
    BehindWaits,
    CandidateFacts,
    CandidateRefused,
    check_history,
    check_writable,
    parse_binlog_state,
)
from .errors import FatalError, RetryableError
from .gtid.gtid import BinlogState, format_gtid_position
from .protocol.client import NEED_DATA, ClientConnection, Connected, StartTLS
from .protocol.packets import OkPacket, ProtocolError, ServerError
from .protocol.resultset import ResultSet
from .replication.semisync import Ack, SemiSyncDeframer, build_ack
from .replication.stream import MIXED_HISTORIES, IngestStream, ResumePoint, Segment, StreamError
from .replication.translate import TranslatingStream
from .storage.gtidindex import GtidIndex
from .storage.relaylog import RelayLog

log = logging.getLogger(__name__)

RECEIVE_SIZE = 1 << 20
# MariaDB reads flag 0x02 as "send ANNOTATE_ROWS" (kept, so stored files stay identical); MySQL
# (rpl_binlog_sender.cc) as USE_HEARTBEAT_EVENT_V2, which a MySQL 8.0.26+ replica asks for too.
DUMP_FLAG_SEND_ANNOTATE_ROWS = 0x02
DUMP_FLAG_HEARTBEAT_V2 = 0x02
DUMP_FLAG_NON_BLOCK = 0x01  # EOF at the end of the binlog instead of waiting
MARIADB_CAPABILITY = 4  # receive GTID events as they are, not rewritten as BEGIN (docs/protocol.md 3.1)
ER_MASTER_FATAL_ERROR_READING_BINLOG = 1236


class FatalIngestError(FatalError):
    """Ingest cannot go on without an operator (wrong primary, corrupt data, bad position)."""


class ReplicaAcks(Protocol):
    """What the relay's semi-sync replicas acknowledged (downstream.registry.Registry)."""

    def acks_at_or_past(self, reached: Callable[[tuple[str, int]], bool]) -> int: ...

    async def wait_for_ack(self) -> None: ...


class NoCandidate(RetryableError):
    """No candidate primary can be followed now (unreachable or refused): tried again later."""


@dataclass(frozen=True)
class Candidate:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class UpstreamSettings:
    host: str
    port: int
    user: str
    password: str = field(repr=False)
    relay_server_id: int
    start_file: str | None = None
    heartbeat_period: float = 15.0
    connect_timeout: float = 10.0
    reconnect_initial_delay: float = 0.5
    reconnect_max_delay: float = 30.0
    ssl_mode: str = "disabled"
    ssl_ca: str | None = None
    ssl_cert: str | None = None
    ssl_key: str | None = None
    # upstream.hosts: the candidate primaries in order of preference (empty: host and port alone)
    candidates: tuple[Candidate, ...] = ()
    semi_sync: bool = False
    behind_wait: float = 0.0  # upstream.behind_wait
    server_public_key: bytes | None = field(default=None, repr=False)  # PEM, for caching_sha2 over RSA
    wait_for_replicas: int = 0  # semi_sync.wait_for_replicas
    replica_timeout: float = 10.0

    @property
    def all_candidates(self) -> tuple[Candidate, ...]:
        return self.candidates or (Candidate(self.host, self.port),)


@dataclass
class UpstreamStatus:
    """Live figures for logs and metrics."""

    connected: bool = False
    reconnects: int = 0
    last_error: str | None = None
    server_version: str | None = None
    server_id: int | None = None
    checksum_alg: int | None = None
    stream: IngestStream | TranslatingStream | None = None
    events_received: int = 0
    bytes_received: int = 0
    connected_event: trio.Event = field(default_factory=trio.Event)
    current: Candidate | None = None  # the candidate replicated from (or last tried)
    semi_sync: bool = False  # the current dump is semi-sync: the primary waits for the relay's ACKs
    semi_sync_acks: int = 0
    clock_difference: float = 0.0  # this machine's clock minus the primary's, taken at connect
    # bytes the primary sent that wait unread on this machine (the current connection's receive queue)
    unread_bytes: Callable[[], int] = lambda: 0
    disk_full: bool = False  # ingest is paused: data_dir has no space
    disk_full_pauses: int = 0
    # time.monotonic() when ingest last stopped working (or the relay started), None while it works
    failing_since: float | None = field(default_factory=time.monotonic)
    replica_ack_timeouts: int = 0  # ACKs sent without the replicas' after semi_sync.replica_timeout
    switches: int = 0  # times ingest moved to another candidate than the one before
    refusals: dict[str, int] = field(default_factory=dict)  # candidates refused, by reason


class _Connection:
    """One login to the primary: a stream plus the sans-IO client conversation."""

    def __init__(self, stream: trio.abc.Stream, protocol: ClientConnection) -> None:
        self.stream = stream
        self.protocol = protocol

    def unread_bytes(self) -> int:
        """Bytes received from the primary that the relay has not read yet: the kernel's receive
        queue (FIONREAD), plus decrypted bytes TLS holds back.  For the lag metric."""
        stream: trio.abc.Stream | None = self.stream
        held = 0
        while not isinstance(stream, trio.SocketStream):
            if isinstance(stream, trio.SSLStream):
                held += stream.pending()
            stream = getattr(stream, "transport_stream", None)
            if stream is None:
                return held
        fd = stream.socket.fileno()
        if fd < 0:  # closed
            return held
        return held + int.from_bytes(fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"), sys.byteorder)

    async def flush(self) -> None:
        data = self.protocol.data_to_send()
        if data:
            await self.stream.send_all(data)

    async def next_event(self) -> object:
        while True:
            event = self.protocol.next_event()
            if event is not NEED_DATA:
                return event
            await self.flush()
            data = await self.stream.receive_some(RECEIVE_SIZE)
            if not data:
                raise ConnectionError("the primary closed the connection")
            self.protocol.receive_data(data)

    async def command(self) -> ResultSet | OkPacket:
        await self.flush()
        return await self.next_event()  # type: ignore[return-value]

    async def query(self, sql: str) -> ResultSet | OkPacket:
        self.protocol.query(sql)
        return await self.command()

    async def rows(self, sql: str) -> list[tuple[str | None, ...]]:
        result = await self.query(sql)
        if not isinstance(result, ResultSet):
            raise ProtocolError(f"expected rows from {sql!r}")
        return list(result.rows)

    async def dict_rows(self, sql: str) -> list[dict[str, str | None]]:
        result = await self.query(sql)
        if not isinstance(result, ResultSet):
            raise ProtocolError(f"expected rows from {sql!r}")
        return result.dicts()


def _tls_context(settings: UpstreamSettings) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=settings.ssl_ca)
    if settings.ssl_cert:
        context.load_cert_chain(settings.ssl_cert, settings.ssl_key)
    if settings.ssl_mode in ("preferred", "required"):
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif settings.ssl_mode == "verify_ca":
        context.check_hostname = False
    return context


async def connect(settings: UpstreamSettings, candidate: Candidate | None = None) -> _Connection:
    """Open a connection to ``candidate`` (default: the first) and log in; ready for queries."""
    candidate = candidate or settings.all_candidates[0]
    with trio.fail_after(settings.connect_timeout):
        stream: trio.abc.Stream = await trio.open_tcp_stream(candidate.host, candidate.port)
        protocol = ClientConnection(settings.user, settings.password, tls=settings.ssl_mode,
                                    server_public_key=settings.server_public_key)
        conn = _Connection(stream, protocol)
        while True:
            event = await conn.next_event()
            if isinstance(event, StartTLS):
                await conn.flush()
                conn.stream = trio.SSLStream(conn.stream, _tls_context(settings),
                                             server_hostname=candidate.host)
                await conn.stream.do_handshake()
                protocol.tls_started()
            elif isinstance(event, Connected):
                return conn


class Upstream:
    """Keeps the relay log in step with the primary, reconnecting for ever."""

    def __init__(self, settings: UpstreamSettings, relay_log: RelayLog,
                 replica_acks: ReplicaAcks | None = None) -> None:
        self.settings = settings
        self.relay_log = relay_log
        self.replica_acks = replica_acks  # the relay's semi-sync replicas, for semi_sync.wait_for_replicas
        # After the replicas missed replica_timeout: the last position acknowledged without them
        self._acked_alone: tuple[str, int] | None = None
        self.status = UpstreamStatus()
        self._replica_uuid = str(uuid.uuid5(uuid.NAMESPACE_OID, f"binlog-relay-{settings.relay_server_id}"))
        self._gtid_index = GtidIndex(relay_log)
        self._behind_waits = BehindWaits(settings.behind_wait)

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.relay_log.run_committer)
            await self._replicate_for_ever()

    async def _replicate_for_ever(self) -> None:
        delay = self.settings.reconnect_initial_delay
        while True:
            try:
                await self._replicate_once()
            except FatalError as exc:
                self.status.last_error = str(exc)
                log.error("upstream: ingest stopped: %s", exc)
                raise
            except _RETRYABLE as exc:
                if isinstance(exc, OSError) and exc.errno in _DISK_FULL:
                    # Not a network fault: reconnecting would download the same bytes to the same full
                    # disk again and again. Wait for space, then resume where the last group ended.
                    self._lost()
                    await self._wait_for_space(exc)
                    continue
                self.status.last_error = _describe(exc)
                if self.status.connected:
                    delay = self.settings.reconnect_initial_delay  # it worked for a while
                self._lost()
                wait = delay * random.uniform(0.5, 1.0)
                log.warning("upstream %s: %s; reconnecting in %.1fs", self.status.current or "(none)",
                            self.status.last_error, wait)
                await trio.sleep(wait)
                delay = min(delay * 2, self.settings.reconnect_max_delay)
                self.status.reconnects += 1

    async def _wait_for_space(self, exc: OSError) -> None:
        """Called after _lost() cut the partial group: the space that freed is not enough (the group
        did not fit in it), so ingest resumes only once free space grew past it by a margin."""
        data_dir = self.relay_log.data_dir
        self.status.last_error = f"data_dir full: {exc.strerror}"
        self.status.disk_full = True
        self.status.disk_full_pauses += 1
        free, size = _disk_space(data_dir)
        wanted = free + min(ROOM_TO_RESUME, size // 10)
        log.error("upstream: %s is full (%s); ingest paused until %d MiB are free (%d MiB now), serving goes on",
                  data_dir, exc.strerror, wanted >> 20, free >> 20)
        while _disk_space(data_dir)[0] < wanted:
            await trio.sleep(DISK_FULL_POLL_SECONDS)
        self.status.disk_full = False
        log.warning("upstream: %s has space again; resuming ingest", data_dir)

    def _lost(self) -> None:
        if self.status.failing_since is None:
            self.status.failing_since = time.monotonic()
        self.status.connected = False
        self.status.connected_event = trio.Event()
        self.relay_log.keep_whole_groups()

    async def _replicate_once(self) -> None:
        conn, facts = await self._choose_candidate()
        try:
            checksum_alg = await self._prepare(conn)
            own = self.relay_log.state.own_files_from is not None
            stream: IngestStream | TranslatingStream
            if own or not self._mirrors(facts):
                stream = await self._start_gtid_dump(conn, checksum_alg, facts)
            else:
                stream = await self._start_mirror_dump(conn, checksum_alg)
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

    async def _choose_candidate(self) -> tuple[_Connection, CandidateFacts]:
        """The first candidate that is a primary the relay may follow; each refusal is logged."""
        reasons = []
        for index, candidate in enumerate(self.settings.all_candidates):
            conn = None
            try:
                conn = await connect(self.settings, candidate)
                facts = await self._vet(conn)
                earlier = [str(c) for c in self.settings.all_candidates[:index]]
                if (waited := self._behind_waits.waiting_for(earlier, time.monotonic())) is not None:
                    raise NoCandidate(f"{candidate} could be followed, but {waited}, before it in upstream.hosts, "
                                      f"is behind and is waited for up to {self.settings.behind_wait:.0f}s")
            except CandidateRefused as refusal:
                self._behind_waits.refused(str(candidate), refusal.reason, time.monotonic())
                self.status.refusals[refusal.reason] = self.status.refusals.get(refusal.reason, 0) + 1
                log.warning("upstream: candidate %s refused (%s): %s", candidate, refusal.reason, refusal)
                reasons.append(f"{candidate}: {refusal.reason}")
            except _RETRYABLE as exc:
                if len(self.settings.all_candidates) == 1:  # one primary: its own error, as it is
                    if conn is not None:
                        await trio.aclose_forcefully(conn.stream)
                    raise
                log.warning("upstream: candidate %s: %s", candidate, _describe(exc))
                reasons.append(f"{candidate}: {_describe(exc)}")
            except BaseException:
                if conn is not None:
                    await trio.aclose_forcefully(conn.stream)
                raise
            else:
                self._behind_waits.accepted(str(candidate))
                break
            if conn is not None:
                await trio.aclose_forcefully(conn.stream)
        else:
            raise NoCandidate("no candidate primary can be followed now: " + "; ".join(reasons))
        if self.status.current is not None and self.status.current != candidate:
            self.status.switches += 1
            log.warning("upstream: switching from %s to %s", self.status.current, candidate)
        self.status.current = candidate
        return conn, facts

    async def _vet(self, conn: _Connection) -> CandidateFacts:
        greeting = conn.protocol.greeting
        assert greeting is not None
        server_id = await self._server_id(conn, greeting.is_mariadb)
        self._check_identity(server_id, greeting.server_version)
        if len(self.settings.all_candidates) == 1 and self.relay_log.state.own_files_from is None:
            # One upstream, as configured: followed as it is (a chain of relays, a replica on purpose).
            return CandidateFacts(server_id, False, "", False, None)
        rows = await conn.rows("SELECT @@GLOBAL.read_only, @@version_comment")
        read_only, comment = (rows[0] if rows else ("0", ""))
        replicating = False
        if comment != RELAY_VERSION_COMMENT:  # (SHOW SLAVE STATUS would need SLAVE MONITOR)
            running = await conn.rows("SHOW GLOBAL STATUS LIKE 'Slaves_running'")
            replicating = bool(running) and (running[0][1] or "0") != "0"
        binlog_state = None
        if greeting.is_mariadb and comment != RELAY_VERSION_COMMENT:
            state_rows = await conn.rows("SELECT @@GLOBAL.gtid_binlog_state")
            binlog_state = parse_binlog_state(state_rows[0][0] or "") if state_rows else BinlogState()
        facts = CandidateFacts(server_id, str(read_only).upper() in ("1", "ON"), comment or "", replicating,
                               binlog_state)
        check_writable(facts)
        if binlog_state is not None:
            check_history(self._gtid_index.binlog_state(), binlog_state)
        return facts

    def _mirrors(self, facts: CandidateFacts) -> bool:
        """File/position resume keeps the primary's coordinates: only from the server that wrote the
        stored files, or a relay serving them; any other primary is followed by GTID."""
        origin = self.relay_log.resume_point().origin_server_id
        return origin is None or facts.server_id == origin or facts.is_relay or facts.binlog_state is None

    async def _start_mirror_dump(self, conn: _Connection, checksum_alg: int) -> IngestStream:
        resume = self.relay_log.resume_point()
        file = resume.file or await self._first_file(conn)
        await self._check_history(conn, resume.file, resume.position)
        if self.relay_log.damaged:
            await self._fetch_damaged_again({row[0] for row in await conn.rows("SHOW BINARY LOGS")})
        stream = IngestStream(resume, checksum_alg)
        conn.protocol.register_slave(self.settings.relay_server_id)
        await conn.command()
        conn.protocol.binlog_dump(file, resume.request_position, self.settings.relay_server_id, _dump_flags(conn))
        await conn.flush()
        log.info("upstream: dumping from %s:%d", file, resume.request_position)
        return stream

    async def _fetch_damaged_again(self, primary_has: set[str | None]) -> None:
        """Closed stored files found cut short at start-up are fetched again from the primary that
        wrote them, on a connection of their own, and put in place if the stored whole events are
        a prefix of the primary's copy; otherwise they stay as they are (served up to the damage)."""
        for name in [name for name in self.relay_log.damaged if name in primary_has]:
            candidate = self.status.current
            try:
                conn = await connect(self.settings, candidate)
                try:
                    repaired = await self._download_file(conn, name)
                finally:
                    await trio.aclose_forcefully(conn.stream)
                self.relay_log.replace_damaged(name, repaired)
            except (*_RETRYABLE, FatalError) as exc:
                log.warning("upstream: could not fetch %s again from %s: %s; it is served up to the damage",
                            name, candidate, _describe(exc))

    async def _download_file(self, conn: _Connection, name: str) -> Path:
        """The primary's ``name``, whole, into a temporary file beside the stored ones."""
        stream = IngestStream(ResumePoint(name, 4), await self._dump_variables(conn))
        conn.protocol.binlog_dump(name, 4, self.settings.relay_server_id, _dump_flags(conn) | DUMP_FLAG_NON_BLOCK)
        await conn.flush()
        target = self.relay_log.data_dir / f"{name}.fetched"
        try:
            with open(target, "wb") as out:
                out.write(ev.BINLOG_MAGIC)
                while True:
                    with trio.fail_after(2 * self.settings.heartbeat_period):
                        data = await conn.stream.receive_some(RECEIVE_SIZE)
                    if not data:
                        raise ConnectionError("the primary closed the connection")
                    for segment in stream.receive(data):
                        if segment.file != name:  # the next file begins: this one is whole
                            return target
                        if segment.start != out.tell():
                            raise StreamError(f"{name}: the primary sent {segment.start}, expected {out.tell()}")
                        out.writelines(segment.chunks)
        except BaseException:
            target.unlink(missing_ok=True)
            raise

    async def _start_gtid_dump(self, conn: _Connection, checksum_alg: int, facts: CandidateFacts) -> TranslatingStream:
        """Follow a primary whose coordinates are not the stored ones, from the relay's GTID state
        (strict: a hole is an error), into the relay's own files (replication.translate)."""
        relay_log = self.relay_log
        if facts.binlog_state is None or relay_log.committed is None:
            raise FatalIngestError("the relay can follow another primary only by MariaDB GTID, from stored history")
        state = self._gtid_index.binlog_state()
        connect_state = format_gtid_position(state.most_recent())
        file, end = relay_log.committed
        own_from = relay_log.state.own_files_from
        last_event = relay_log.resume_point().last_event
        ends_with_rotate = last_event is not None and last_event[4] == ev.ROTATE_EVENT
        # The primary's events go to a file the relay opens (its FDE and a GTID_LIST of the relay's
        # state first) unless the current file is already one of the relay's own and open. A crash
        # may leave a switch or a rotation half done: the first own file not created yet, or
        # empty, or the current file closed by its ROTATE and the next one not created.
        switching = own_from is None or own_from not in relay_log.files or end == 4 or ends_with_rotate
        if own_from is None:
            relay_log.begin_own_coordinates(file if end == 4 else next_file_name(file))
        await conn.query(f"SET @slave_connect_state = '{connect_state}'")
        await conn.query("SET @slave_gtid_strict_mode = 1")
        conn.protocol.register_slave(self.settings.relay_server_id)
        await conn.command()
        conn.protocol.binlog_dump("", 4, self.settings.relay_server_id, DUMP_FLAG_SEND_ANNOTATE_ROWS)
        await conn.flush()
        log.info("upstream: following server_id %d by GTID from %s%s", facts.server_id, connect_state,
                 " into a new file of the relay's own" if switching else "")
        return TranslatingStream(file, end, checksum_alg, state if switching else None, ends_with_rotate)

    async def _prepare(self, conn: _Connection) -> int:
        """The replica's opening queries (docs/protocol.md 3.1 / 3.2); returns the checksum algorithm."""
        greeting = conn.protocol.greeting
        assert greeting is not None
        self.status.server_version = greeting.server_version
        alg = await self._dump_variables(conn)
        clock = await conn.rows("SELECT UNIX_TIMESTAMP()")
        if clock and clock[0][0] and clock[0][0].split(".")[0].isdigit():
            # as a replica's clock_diff_with_master: event timestamps are in the primary's time
            self.status.clock_difference = time.time() - int(clock[0][0].split(".")[0])
        self.status.checksum_alg = alg
        self.status.semi_sync = self.settings.semi_sync and await self._ask_for_semi_sync(conn, greeting.is_mariadb)
        return alg

    async def _dump_variables(self, conn: _Connection) -> int:
        """Heartbeat period, checksum and capability, as a replica sets them before its dump."""
        greeting = conn.protocol.greeting
        assert greeting is not None
        period_ns = int(self.settings.heartbeat_period * 1e9)
        if greeting.is_mariadb:
            await conn.query(f"SET @master_heartbeat_period= {period_ns}")
            await conn.query("SET @master_binlog_checksum= @@global.binlog_checksum")
            rows = await conn.rows("SELECT @master_binlog_checksum")
            await conn.query(f"SET @mariadb_slave_capability= {MARIADB_CAPABILITY}")
        else:
            await conn.query(f"SET @master_heartbeat_period = {period_ns}, @source_heartbeat_period = {period_ns}")
            await conn.query("SET @master_binlog_checksum = @@global.binlog_checksum, "
                             "@source_binlog_checksum = @@global.binlog_checksum")
            rows = await conn.rows("SELECT @source_binlog_checksum")
            await conn.query(f"SET @slave_uuid = '{self._replica_uuid}', @replica_uuid = '{self._replica_uuid}'")
        checksum = (rows[0][0] or "NONE").upper() if rows else "NONE"
        return ev.CHECKSUM_CRC32 if checksum == "CRC32" else ev.CHECKSUM_OFF

    async def _ask_for_semi_sync(self, conn: _Connection, is_mariadb: bool) -> bool:
        """Announce the relay as a semi-sync replica where the primary can run semi-sync (an
        empty answer means it cannot: replication stays asynchronous, and the log says so)."""
        if not is_mariadb:
            log.warning("upstream: semi_sync is implemented for MariaDB primaries; replicating asynchronously")
            return False
        if not await conn.rows("SHOW VARIABLES LIKE 'rpl_semi_sync_master_enabled'"):
            log.warning("upstream: the primary has no semi-sync; replicating asynchronously")
            return False
        await conn.query("SET @rpl_semi_sync_slave = 1")
        log.info("upstream: semi-sync: each transaction the primary waits on is acknowledged once on disk")
        return True

    async def _server_id(self, conn: _Connection, is_mariadb: bool) -> int:
        if is_mariadb:
            rows = await conn.rows("SHOW VARIABLES LIKE 'server_id'")
            value = rows[0][1] if rows else None
        else:
            rows = await conn.rows("SELECT @@GLOBAL.SERVER_ID")
            value = rows[0][0] if rows else None
        if value is None or not value.isdigit():
            raise ProtocolError("the primary did not report its server_id")
        return int(value)

    def _check_identity(self, server_id: int, version: str) -> None:
        """The upstream's own server_id only has to differ from the relay's.  It need not be the one
        that wrote the stored history: a relay of the primary, or a sibling relay, serves the same
        history under its own id; the history check is on the events (their writer and bytes at
        the resume point, see IngestStream) and on the file sizes (_check_history)."""
        if server_id == self.settings.relay_server_id:
            raise FatalIngestError(
                f"the primary's server_id is {server_id}, the same as the relay's own server_id; "
                "give the relay a server_id no other server uses")
        self.status.server_id = server_id
        state = self.relay_log.state
        if state.upstream_server_id != server_id or state.upstream_version != version:
            self.relay_log.remember_upstream(server_id, version)

    async def _first_file(self, conn: _Connection) -> str:
        if self.settings.start_file:
            return self.settings.start_file
        rows = await conn.rows("SHOW BINARY LOGS")
        if not rows:
            raise FatalIngestError("the primary has no binary logs (is log_bin enabled?)")
        return rows[0][0] or ""

    async def _check_history(self, conn: _Connection, resume_file: str | None, position: int) -> None:
        """The primary must still hold the file we resume, at least as long as what we stored,
        and closed files both sides have must be the same size: a stored one that is shorter was cut
        short (a power cut with storage.sync: none) and is fetched again if it is a prefix of the
        primary's (_fetch_damaged_again); a longer one is another history."""
        if resume_file is None:
            return
        try:
            primary_sizes = {name: int(size or 0) for name, size, *_ in await conn.rows("SHOW BINARY LOGS")}
        except ServerError as exc:
            log.warning("upstream: cannot list the primary's binlogs (%s); skipping the size check", exc)
            return
        if resume_file not in primary_sizes:
            raise FatalIngestError(
                f"the primary no longer has {resume_file}, where the relay must resume at {position} "
                f"(purged before the relay fetched it, or {MIXED_HISTORIES})")
        if primary_sizes[resume_file] < position:
            raise FatalIngestError(
                f"the primary's {resume_file} is {primary_sizes[resume_file]} bytes, shorter than the "
                f"{position} bytes the relay stored: {MIXED_HISTORIES}")
        for name in self.relay_log.files[:-1]:
            if name not in primary_sizes or name in self.relay_log.damaged:  # damage was reported at start-up
                continue
            stored_size = self.relay_log.path(name).stat().st_size
            if stored_size < primary_sizes[name]:  # cut short here, or another history: the re-fetch tells
                self.relay_log.mark_cut_short(name, primary_sizes[name])
            elif primary_sizes[name] != stored_size:
                raise FatalIngestError(f"the primary's {name} is {primary_sizes[name]} bytes, the stored copy "
                                       f"{stored_size}: {MIXED_HISTORIES}")

    async def _ingest(self, conn: _Connection, stream: IngestStream | TranslatingStream) -> None:
        if not self.status.semi_sync:
            await self._receive_and_store(conn, stream.receive)
            return
        # Semi-sync: the plain stream goes to ``stream``; each transaction the primary waits on is
        # acknowledged by another task once it is committed (fsynced, with storage.sync: commit),
        # so a slow disk delays the primary's commit, never the receiving.
        deframer = SemiSyncDeframer(stream.checksum_alg)
        to_ack, acks = trio.open_memory_channel[tuple[tuple[str, int], Ack]](math.inf)

        def receive(data: bytes | bytearray) -> list[Segment]:
            segments: list[Segment] = []
            for piece, ack in deframer.feed(data):
                segments += stream.receive(piece)
                if ack is not None:
                    to_ack.send_nowait(((stream.file or "", stream.position), ack))
            return segments

        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._acknowledge, conn, acks)
            await self._receive_and_store(conn, receive)

    async def _acknowledge(self, conn: _Connection, acks: trio.MemoryReceiveChannel) -> None:
        async for stored_end, ack in acks:
            while not self.relay_log.committed_past(*stored_end):
                await self.relay_log.wait_for_commit(self.relay_log.committed)
            if self.settings.wait_for_replicas and self.replica_acks is not None:
                await self._wait_for_replicas(stored_end)
            await conn.stream.send_all(build_ack(ack))
            self.status.semi_sync_acks += 1

    async def _wait_for_replicas(self, stored_end: tuple[str, int]) -> None:
        """Until semi_sync.wait_for_replicas of the relay's semi-sync replicas acknowledged
        ``stored_end``.  Past replica_timeout the relay acknowledges alone, as a primary falls back
        to asynchronous replication, until the replicas have acknowledged what it acknowledged
        alone (they caught up)."""
        acks = self.replica_acks
        assert acks is not None

        def acknowledged(file: str, position: int) -> bool:
            reached = acks.acks_at_or_past(lambda acked: self.relay_log.at_or_past(acked, file, position))
            return reached >= self.settings.wait_for_replicas

        if self._acked_alone is not None:
            if not acknowledged(*self._acked_alone):
                self._acked_alone = stored_end
                return
            log.info("upstream: semi-sync: the relay's replicas caught up; waiting for their ACKs again")
            self._acked_alone = None
        with trio.move_on_after(self.settings.replica_timeout):
            while not acknowledged(*stored_end):
                await acks.wait_for_ack()
            return
        self._acked_alone = stored_end
        self.status.replica_ack_timeouts += 1
        log.warning("upstream: semi-sync: fewer than %d replicas of the relay acknowledged %s:%d within %.1fs; "
                    "acknowledging without them until they catch up", self.settings.wait_for_replicas,
                    *stored_end, self.settings.replica_timeout)

    async def _receive_and_store(self, conn: _Connection,
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


def _dump_flags(conn: _Connection) -> int:
    """MariaDB reads 0x02 as "send ANNOTATE_ROWS", MySQL as "heartbeat v2": the stored files hold
    annotations, and the relay parses heartbeat v2 (docs/protocol.md 3.3)."""
    return DUMP_FLAG_SEND_ANNOTATE_ROWS if conn.protocol.greeting.is_mariadb else DUMP_FLAG_HEARTBEAT_V2  # type: ignore[union-attr]


_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
DISK_FULL_POLL_SECONDS = 1.0
ROOM_TO_RESUME = 64 << 20  # growth of free space (or a tenth of a smaller file system) before ingest resumes


def _disk_space(path: Path) -> tuple[int, int]:
    """(bytes free to this process, size) of the file system holding ``path``."""
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize, stats.f_blocks * stats.f_frsize


_RETRYABLE = (RetryableError, OSError, trio.TooSlowError, trio.BrokenResourceError, ssl.SSLError)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, trio.TooSlowError):
        return "timed out connecting"
    if isinstance(exc, trio.BrokenResourceError) and isinstance(exc.__cause__, ssl.SSLError):
        return f"TLS with the primary failed: {exc.__cause__}"
    return str(exc) or type(exc).__name__
