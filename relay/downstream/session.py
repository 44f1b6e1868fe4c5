"""One downstream connection: login, the command phase, and a binlog dump (the trio shell).

All parsing and reply building is in ``protocol.server``, ``downstream.queries`` and
``binlog.outbound``; this module moves bytes, reads stored files and waits for commits.
"""

from __future__ import annotations

import logging
import os
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import trio

from ..binlog import events as ev
from ..binlog.outbound import DumpOptions, DumpRefused, OutboundStream, frame_block
from ..protocol import server as proto
from ..binlog.gtid import GtidError, parse_gtid_position
from ..storage.gtidindex import GtidIndex, GtidLookupError
from ..storage.relaylog import RelayLog
from ..storage.retention import PurgeRefused, RetentionKeeper
from ..storage.scan import BLOCK_SIZE, read_batch
from . import queries
from .registry import DumpState, Registry, Replica

log = logging.getLogger(__name__)

RECEIVE_SIZE = 1 << 16
DUMP_FLAG_NON_BLOCK = 0x01
DUMP_FLAG_SEND_ANNOTATE_ROWS = 0x02
ER_MASTER_FATAL_ERROR_READING_BINLOG = 1236


@dataclass
class SessionContext:
    """What every session shares: storage, the registry, configuration-derived facts."""

    relay_log: RelayLog
    registry: Registry
    relay_server_id: int
    ignore_server_ids: frozenset[int]
    lookup_user: Callable[[str], proto.Credentials | None]
    facts: Callable[[], queries.ServerFacts]
    handshake_timeout: float
    tls_context: ssl.SSLContext | None
    tls_required: bool
    next_connection_id: Callable[[], int]
    gtid_index: GtidIndex
    retention: RetentionKeeper
    is_admin: Callable[[str], bool]


class _Session:
    def __init__(self, stream: trio.abc.Stream, context: SessionContext, peer: str) -> None:
        self.stream = stream
        self.context = context
        self.peer = peer
        self.connection_id = context.next_connection_id()
        facts = context.facts()
        self.conn = proto.ServerConnection(
            server_version=facts.version, connection_id=self.connection_id, peer_host=peer.rsplit(":", 1)[0],
            lookup_user=context.lookup_user, tls_available=context.tls_context is not None,
            tls_required=context.tls_required)
        self.variables = queries.SessionVariables()
        self.user = ""
        self.registered_server_id: int | None = None

    async def flush(self) -> None:
        data = self.conn.data_to_send()
        if data:
            await self.stream.send_all(data)

    async def next_event(self) -> object:
        while True:
            event = self.conn.next_event()
            if event is not proto.NEED_DATA:
                return event
            await self.flush()
            data = await self.stream.receive_some(RECEIVE_SIZE)
            if not data:
                return proto.Quit()
            self.conn.receive_data(data)

    async def login(self) -> bool:
        with trio.move_on_after(self.context.handshake_timeout) as timer:
            while True:
                event = await self.next_event()
                if isinstance(event, proto.StartTLS):
                    await self.flush()
                    assert self.context.tls_context is not None
                    transport = _PrefixedStream(self.stream, self.conn.take_unparsed())
                    self.stream = trio.SSLStream(transport, self.context.tls_context, server_side=True)
                    await self.stream.do_handshake()
                    self.conn.tls_started()
                elif isinstance(event, proto.LoggedIn):
                    self.user = event.user
                    await self.flush()
                    return True
                elif isinstance(event, proto.LoginRefused):
                    await self.flush()
                    log.warning("downstream %s: login refused for user %r: %s", self.peer, event.user, event.message)
                    self.context.registry.auth_failures += 1
                    return False
                elif isinstance(event, proto.Quit):
                    return False
        if timer.cancelled_caught:
            log.info("downstream %s: no login within %.0fs, closing", self.peer, self.context.handshake_timeout)
            self.context.registry.protocol_error("handshake_timeout")
        return False

    async def serve_commands(self) -> None:
        while True:
            event = await self.next_event()
            if isinstance(event, proto.Quit):
                return
            if isinstance(event, proto.Query):
                self._answer(event.sql)
            elif isinstance(event, (proto.Ping, proto.InitDB)):
                self.conn.send_ok()
            elif isinstance(event, proto.RegisterSlave):
                self._register(event)
            elif isinstance(event, proto.BinlogDump):
                await self.dump(event.file, event.position, event.flags, event.server_id)
                return
            elif isinstance(event, proto.BinlogDumpGtid):
                self.conn.send_error(ER_MASTER_FATAL_ERROR_READING_BINLOG,
                                     "COM_BINLOG_DUMP_GTID needs a MySQL-flavored upstream")
            else:
                self.context.registry.protocol_error("unknown_command")
                self.conn.send_error(proto.ER_UNKNOWN_COM_ERROR, "Unknown command", "08S01")

    def _answer(self, sql: str) -> None:
        purge = queries.parse_purge(sql)
        reply = self._purge(purge) if purge is not None else queries.answer(
            sql, self.variables, self.context.facts(), self.connection_id, self.user)
        if isinstance(reply, queries.Rows):
            self.conn.send_result_set(reply.columns, list(reply.rows))
        elif isinstance(reply, queries.Ok):
            self.conn.send_ok()
        else:
            log.debug("downstream %s: %s -> ERROR %d %s", self.peer, sql[:200], reply.code, reply.message)
            self.conn.send_error(reply.code, reply.message, reply.sqlstate)

    def _purge(self, request: queries.PurgeRequest | queries.Error) -> queries.Reply:
        if isinstance(request, queries.Error):
            return request
        if not self.context.is_admin(self.user):
            return queries.Error(queries.ER_SPECIFIC_ACCESS_DENIED, "Access denied; you need (at least one of) "
                                 "the SUPER, BINLOG ADMIN privilege(s) for this operation", "42000")
        retention = self.context.retention
        try:
            if request.to_file is not None:
                purged = retention.purge_to(request.to_file)
            else:
                purged = retention.purge_before(request.before or 0.0)
        except PurgeRefused as refusal:
            return queries.Error(refusal.code, str(refusal))
        log.info("downstream %s: user %s purged %d binlog files", self.peer, self.user, len(purged))
        return queries.Ok()

    def _register(self, event: proto.RegisterSlave) -> None:
        if event.server_id == self.context.relay_server_id:
            self.conn.send_error(ER_MASTER_FATAL_ERROR_READING_BINLOG, _same_id_message(event.server_id))
            return
        host = event.host or self.peer.rsplit(":", 1)[0]
        self.context.registry.register(Replica(event.server_id, host, event.port, self.user))
        self.registered_server_id = event.server_id
        self.conn.send_ok()

    # ------------------------------------------------------------ the dump

    async def dump(self, file: str, position: int, flags: int, server_id: int) -> None:
        if server_id == self.context.relay_server_id:
            await self._refuse_dump(_same_id_message(server_id))
            return
        state = DumpState(server_id, self.peer, trio.CancelScope())
        options = self._dump_options(flags, server_id)
        connect_state = self.variables.values.get("slave_connect_state")
        gtid_start = None
        if connect_state is not None and self.context.facts().is_mariadb:
            try:
                plan = self.context.gtid_index.plan_dump(
                    parse_gtid_position(str(connect_state)), self._flag("slave_gtid_strict_mode"),
                    self._flag("slave_gtid_ignore_duplicates"))
            except GtidLookupError as refusal:
                await self._refuse_dump(str(refusal))
                return
            except GtidError as malformed:
                await self._refuse_dump(str(malformed), malformed.code)
                return
            gtid_start = plan.start
            file, position = plan.file, 4
        blocking = not (flags & DUMP_FLAG_NON_BLOCK) and server_id != 0
        self.conn.semi_sync = self._wants_semi_sync()
        registry = self.context.registry
        registry.start_dump(state)
        log.info("downstream %s: dump for server_id %d from %s:%d%s", self.peer, server_id, file or "(first)", position,
                 f" (GTID position {connect_state})" if gtid_start is not None else "")
        try:
            with state.cancel_scope:
                outbound = OutboundStream(options, skipped=registry.groups_filtered, gtid_start=gtid_start)
                sender = _DumpSender(self, outbound, state, blocking, self._heartbeat_period())
                await sender.run(file, position)
            if state.cancel_scope.cancelled_caught:
                log.info("downstream %s: dump of server_id %d ended: the same server_id connected again",
                         self.peer, server_id)
        except DumpRefused as refusal:
            await self._refuse_dump(str(refusal))
        finally:
            registry.end_dump(state)

    def _dump_options(self, flags: int, server_id: int) -> DumpOptions:
        variables = self.variables.values
        checksum = variables.get("master_binlog_checksum", variables.get("source_binlog_checksum"))
        return DumpOptions(
            relay_server_id=self.context.relay_server_id,
            # Only a registered replica is "the replica itself" for the loop filter: tools such as
            # mariadb-binlog dump as server_id 1 by default, often the primary's own id.
            replica_server_id=server_id if server_id == self.registered_server_id else None,
            checksum_declared="master_binlog_checksum" in variables or "source_binlog_checksum" in variables,
            first_rotate_crc=str(checksum).upper() == "CRC32",
            ignore_server_ids=self.context.ignore_server_ids,
            send_annotate_rows=bool(flags & DUMP_FLAG_SEND_ANNOTATE_ROWS),
            replica_capability=self._replica_capability())

    def _replica_capability(self) -> int:
        """@mariadb_slave_capability: 0 (nothing understood) when unset or not a number."""
        value = self.variables.values.get("mariadb_slave_capability")
        return int(value) if isinstance(value, (int, float)) else 0

    def _wants_semi_sync(self) -> bool:
        return self._flag("rpl_semi_sync_slave") or self._flag("rpl_semi_sync_replica")

    async def _refuse_dump(self, message: str, code: int = ER_MASTER_FATAL_ERROR_READING_BINLOG) -> None:
        log.warning("downstream %s: dump refused: %s", self.peer, message)
        self.conn.send_dump_error(code, message)
        await self.flush()

    def _flag(self, name: str) -> bool:
        """A replica's boolean user variable (@slave_gtid_strict_mode ...): set and not 0."""
        return str(self.variables.values.get(name, 0)) not in ("0", "None", "False", "")

    def _heartbeat_period(self) -> float | None:
        for name in ("master_heartbeat_period", "source_heartbeat_period"):
            value = self.variables.values.get(name)
            if isinstance(value, (int, float)) and value > 0:
                return value / 1e9
        return None


class _DumpSender:
    """Reads stored files and sends them through the session until the client goes away."""

    def __init__(self, session: _Session, outbound: OutboundStream, state: DumpState, blocking: bool,
                 heartbeat_period: float | None) -> None:
        self.session = session
        self.relay_log = session.context.relay_log
        self.outbound = outbound
        self.state = state
        self.blocking = blocking
        self.heartbeat_period = heartbeat_period
        self._block: memoryview | None = None  # read buffer of the fast path, reused

    async def run(self, file: str, position: int) -> None:
        file = await self._wait_for_first_file(file)
        if file not in self.relay_log.files:
            raise DumpRefused(_position_error("Could not find first log file name in binary log index file",
                                              file, position))
        self._check_start(file, position)
        self.session.conn.start_dump()
        first = True
        while True:
            await self._send_file(file, position, first)
            next_file = self._next_file(file)
            if next_file is None:
                return
            file, position, first = next_file, 4, False

    async def _wait_for_first_file(self, file: str) -> str:
        """A relay that just started, or is one rotation behind its primary, may be asked for a
        file it does not have yet but soon will: a blocking dump waits for it instead of failing
        (ERR 1236 would stop a replica's IO thread for good)."""
        while self.blocking:
            files = self.relay_log.files
            if files and (not file or file in files or file != _next_file_name(files[-1])):
                break
            await self.relay_log.wait_for_commit(self.relay_log.committed)
        files = self.relay_log.files
        return file or (files[0] if files else "")

    def _check_start(self, file: str, position: int) -> None:
        end = self.relay_log.file_end(file)
        if position < 4 or position > end:
            raise DumpRefused(_position_error(
                "Client requested master to start replication from impossible position", file, position))
        if position == end or position == 4:
            return
        with open(self.relay_log.path(file), "rb") as stored:
            stored.seek(position)
            header = stored.read(ev.HEADER_LEN)
        if len(header) < ev.HEADER_LEN:
            raise DumpRefused(_position_error("bogus data in log event", file, position))
        parsed = ev.EventHeader.parse(header)
        if parsed.event_length < ev.HEADER_LEN or parsed.start_pos & 0xFFFFFFFF != position & 0xFFFFFFFF:
            raise DumpRefused(_position_error(
                "Client requested master to start replication from impossible position (not the start of "
                "an event)", file, position))

    def _next_file(self, file: str) -> str | None:
        files = self.relay_log.files
        index = files.index(file)
        return files[index + 1] if index + 1 < len(files) else None

    async def _send_file(self, file: str, position: int, first: bool) -> None:
        path: Path = self.relay_log.path(file)
        with open(path, "rb") as stored:
            fde = read_batch(stored, 4, path.stat().st_size)[0]
            self.session.conn.send_events(self.outbound.file_start(file, position, bytes(fde), first))
            self.state.file, self.state.position = file, position
            position = max(position, 4 + len(fde)) if position == 4 else position
            self.outbound.position = position
            while True:
                # end and _is_current are read together, with no await between: a file that is
                # no longer current was finished before ``end`` was read, so ``end`` is its size
                end = self.relay_log.file_end(file)
                if position < end:
                    position = await self._send_run(stored, position, end)
                    continue
                if not self._is_current(file):
                    return
                if not self.blocking:
                    self.session.conn.send_eof()
                    await self.session.flush()
                    raise _DumpFinished()
                await self.session.flush()
                await self._wait_for_more(file, end)

    def _is_current(self, file: str) -> bool:
        committed = self.relay_log.committed
        return committed is not None and committed[0] == file

    async def _send_run(self, stored, position: int, end: int) -> int:  # type: ignore[no-untyped-def]
        if self.outbound.fast_path_allowed() and not self.session.conn.semi_sync:
            sent = await self._send_block(stored, position, end)
            if sent:
                return sent
        events = read_batch(stored, position, end)
        if not events:
            return end
        run_end = position + sum(map(len, events))
        to_send = self.outbound.filter(events, run_end)
        if to_send:
            self.session.conn.send_events(to_send)
            self._account(len(to_send), sum(map(len, to_send)), int.from_bytes(to_send[-1][0:4], "little"))
            await self.session.flush()
        self.state.position = run_end
        return run_end

    async def _send_block(self, stored, position: int, end: int) -> int:  # type: ignore[no-untyped-def]
        """Read a block into the dump's own buffer and frame it in one pass; 0 if the event
        at ``position`` does not fit in a block (the general path takes it)."""
        if self._block is None:
            self._block = memoryview(bytearray(BLOCK_SIZE))
        size = os.preadv(stored.fileno(), [self._block[: min(BLOCK_SIZE, end - position)]], position)
        conn = self.session.conn
        run = frame_block(self._block, size, conn.sequence_id, self.outbound.options.replica_server_id)
        if not run.events:
            return 0
        conn.send_framed(run.data, run.next_sequence_id)
        run_end = position + run.used
        self.outbound.position = run_end
        self._account(run.events, run.used, int.from_bytes(self._block[run.last_event : run.last_event + 4], "little"))
        await self.session.flush()
        self.state.position = run_end
        return run_end

    def _account(self, events: int, size: int, last_timestamp: int) -> None:
        registry = self.session.context.registry
        registry.events_sent += events
        registry.bytes_sent += size
        self.state.last_event_timestamp = last_timestamp

    async def _wait_for_more(self, file: str, end: int) -> None:
        seen = (file, end)  # the committed end last looked at: a commit since then returns at once
        if self.heartbeat_period is None:
            await self.relay_log.wait_for_commit(seen)
            return
        with trio.move_on_after(self.heartbeat_period):
            await self.relay_log.wait_for_commit(seen)
            return
        self.session.conn.send_events([self.outbound.heartbeat()])
        await self.session.flush()


class _PrefixedStream(trio.abc.Stream):
    """A stream that first returns bytes already read from it (the start of a TLS handshake)."""

    def __init__(self, inner: trio.abc.Stream, prefix: bytes) -> None:
        self._inner = inner
        self._prefix = prefix

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self._prefix:
            data, self._prefix = self._prefix, b""
            return data
        return await self._inner.receive_some(max_bytes)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self._inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self._inner.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        await self._inner.aclose()


class _DumpFinished(Exception):
    """A non-blocking dump reached the end and sent EOF."""


def _next_file_name(name: str) -> str:
    base, _, number = name.rpartition(".")
    return f"{base}.{int(number) + 1:0{len(number)}d}" if number.isdigit() else ""


def _position_error(message: str, file: str, position: int) -> str:
    return (f"{message}; the first event '{file}' at {position}, the last event read from '{file}' at 4, "
            f"the last byte read from '{file}' at 4.")


def _same_id_message(server_id: int) -> str:
    return (f"A slave with the same server_id {server_id} as this binlog relay has connected; give the replica "
            "a server_id different from the relay's")


async def handle_connection(stream: trio.abc.Stream, context: SessionContext, peer: str) -> None:
    session = _Session(stream, context, peer)
    registry = context.registry
    registry.session_state(None, "login")
    state = "login"
    try:
        if not await session.login():
            return
        registry.session_state(state, "command")
        state = "command"
        await session.serve_commands()
    except _DumpFinished:
        pass
    except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError) as exc:
        log.info("downstream %s: connection lost: %s", peer, exc or type(exc).__name__)
    except proto.ProtocolError as exc:
        context.registry.protocol_error("malformed")
        log.warning("downstream %s: protocol error: %s", peer, exc)
    except Exception:  # one session's failure must never end the relay
        log.exception("downstream %s: session failed", peer)
    finally:
        registry.session_state(state, None)
        await trio.aclose_forcefully(session.stream)
