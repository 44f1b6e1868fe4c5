"""One downstream connection: login and the command phase (the trio shell).

Parsing and reply building are in ``protocol.server``, ``downstream.queries`` and
``downstream.purge``; a dump is ``downstream.dump``'s.  This module moves bytes and routes commands.
"""

from __future__ import annotations

import contextlib
import logging

import trio

from ..protocol import events as proto_events
from ..protocol import server as proto
from ..protocol.auth import CACHING_SHA2_PASSWORD, NATIVE_PASSWORD
from ..protocol.codes import ER_MASTER_FATAL_ERROR_READING_BINLOG, ER_UNKNOWN_COM_ERROR
from ..protocol.packets import PacketTooLarge
from . import queries
from .context import SessionContext
from .controlsql import without_passwords
from .dump import DumpRequest, same_id_message, serve_dump
from .globalstatus import command_of
from .registry import Replica

log = logging.getLogger(__name__)

RECEIVE_SIZE = 1 << 16
_HUNG_UP = proto_events.Quit()  # the client closed the connection without a COM_QUIT


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
            tls_required=context.tls_required, max_packet=context.max_packet,
            # a MySQL-flavoured history is served as MySQL 8 serves: caching_sha2_password first
            auth_plugin=CACHING_SHA2_PASSWORD if not facts.is_mariadb else NATIVE_PASSWORD,
            sha2_cache=context.sha2_cache, rsa_key_pair=context.rsa_key_pair)
        self.variables = queries.SessionVariables()
        self.user = ""
        self.registered_server_id: int | None = None

    async def flush(self) -> None:
        data = self.conn.data_to_send()
        if data:
            self.context.registry.network_bytes_sent += len(data)
            await self.stream.send_all(data)

    async def next_event(self) -> object:
        while True:
            event = self.conn.next_event()
            if event is not proto_events.NEED_DATA:
                return event
            await self.flush()
            data = await self.stream.receive_some(RECEIVE_SIZE)
            if not data:
                return _HUNG_UP
            self.context.registry.network_bytes_received += len(data)
            self.conn.receive_data(data)

    async def _receive(self) -> bytes | bytearray:
        return await self.stream.receive_some(RECEIVE_SIZE)

    async def login(self) -> bool:
        with trio.move_on_after(self.context.handshake_timeout) as timer:
            while True:
                event = await self.next_event()
                if isinstance(event, proto_events.StartTLS):
                    await self.flush()
                    assert self.context.tls_context is not None
                    transport = _PrefixedStream(self.stream, self.conn.take_unparsed())
                    self.stream = trio.SSLStream(transport, self.context.tls_context, server_side=True)
                    await self.stream.do_handshake()
                    self.conn.tls_started()
                elif isinstance(event, proto_events.LoggedIn):
                    self.user = event.user
                    await self.flush()
                    return True
                elif isinstance(event, proto_events.LoginRefused):
                    await self.flush()
                    log.warning("downstream %s: login refused for user %r: %s", self.peer, event.user, event.message)
                    self.context.registry.auth_failures += 1
                    return False
                elif isinstance(event, proto_events.Quit):
                    return False
        if timer.cancelled_caught:
            log.info("downstream %s: no login within %.0fs, closing", self.peer, self.context.handshake_timeout)
            self.context.registry.protocol_error("handshake_timeout")
        return False

    async def serve_commands(self) -> None:
        while True:
            event = await self.next_event()
            self._count(event)
            if isinstance(event, proto_events.Quit):
                return
            if isinstance(event, proto_events.Query):
                await self._answer(event.sql)
            elif isinstance(event, (proto_events.Ping, proto_events.InitDB)):
                self.conn.send_ok()
            elif isinstance(event, proto_events.RegisterSlave):
                self._register(event)
            elif isinstance(event, proto_events.BinlogDump) or (
                    isinstance(event, proto_events.BinlogDumpGtid) and not self.context.facts().is_mariadb):
                gtid_set = event.gtid_data if isinstance(event, proto_events.BinlogDumpGtid) else None
                request = DumpRequest(event.file, event.position, event.flags, event.server_id,
                                      self.registered_server_id, dict(self.variables.values), gtid_set,
                                      mysql_flavour=not self.context.facts().is_mariadb)
                await serve_dump(self.context, request, self.conn, self.flush, self.peer, self._receive)
                return
            else:
                self.context.registry.protocol_error("unknown_command")
                self.conn.send_error(ER_UNKNOWN_COM_ERROR, "Unknown command", "08S01")

    def _count(self, event: object) -> None:
        """SHOW GLOBAL STATUS's Questions: every command a client sends but COM_PING (MariaDB's
        CF_SKIP_QUESTIONS), COM_QUIT included; and the Com_ counter of each statement."""
        if event is _HUNG_UP or isinstance(event, proto_events.Ping):
            return
        registry = self.context.registry
        registry.questions += 1
        if isinstance(event, proto_events.Query):
            registry.count_command(command_of(event.sql))
        elif isinstance(event, proto_events.InitDB):
            registry.count_command("change_db")

    async def _answer(self, sql: str) -> None:
        reply = (await self.context.control.answer(sql, self.user) or self.context.purge.answer(sql, self.user)
                 or queries.answer(sql, self.variables, self.context.facts(), self.connection_id, self.user))
        # A statement that raises a condition replaces SHOW WARNINGS' list; one that raises none leaves
        # it (MariaDB clears it before statements that use tables, and the relay has none).
        self.variables.warnings = queries.conditions_of(reply) or self.variables.warnings
        if isinstance(reply, queries.StreamedRows):
            await self._stream(reply)
        elif isinstance(reply, queries.Rows):
            self.conn.send_result_set(reply.columns, list(reply.rows), reply.types)
        elif isinstance(reply, queries.Ok):
            self.conn.send_ok(warnings=len(reply.warnings))
        else:
            log.debug("downstream %s: %s -> ERROR %d %s", self.peer, without_passwords(sql)[:200], reply.code,
                      without_passwords(reply.message))
            self.conn.send_error(reply.code, reply.message, reply.sqlstate)

    async def _stream(self, reply: queries.StreamedRows) -> None:
        """A result set sent as it is read: the column definitions first (a primary sends them
        before it opens the file), each batch as it comes, then EOF, or the ERR that ends it."""
        self.conn.send_result_head(reply.columns)
        async with contextlib.aclosing(reply.batches) as batches:
            async for batch in batches:
                if isinstance(batch, queries.Error):
                    log.debug("downstream %s: result set ended by ERROR %d %s", self.peer, batch.code, batch.message)
                    self.conn.send_error(batch.code, batch.message, batch.sqlstate)
                    return
                self.conn.send_rows(batch)
                await self.flush()
        self.conn.send_eof()

    def _register(self, event: proto_events.RegisterSlave) -> None:
        if event.server_id == self.context.relay_server_id:
            self.conn.send_error(ER_MASTER_FATAL_ERROR_READING_BINLOG, same_id_message(event.server_id))
            return
        host = event.host or self.peer.rsplit(":", 1)[0]
        variables = self.variables.values
        uuid = str(variables.get("replica_uuid", variables.get("slave_uuid", "")) or "")
        self.context.registry.register(Replica(event.server_id, host, event.port, self.user, uuid))
        self.registered_server_id = event.server_id
        self.conn.send_ok()


class _PrefixedStream(trio.abc.Stream):
    """A stream that first returns bytes already read from it (the start of a TLS handshake)."""

    def __init__(self, inner: trio.abc.Stream, prefix: bytes) -> None:
        self._inner = inner
        self._prefix = prefix

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
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
    except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError) as exc:
        log.info("downstream %s: connection lost: %s", peer, exc or type(exc).__name__)
    except PacketTooLarge as exc:
        context.registry.protocol_error("packet_too_large")
        log.warning("downstream %s: %s; closing", peer, exc)
        with trio.move_on_after(1):  # the ERR 1153 the connection queued; a client not reading is not waited for
            try:
                await session.flush()
            except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
                pass  # the client is gone already: nothing to tell it
    except proto.ProtocolError as exc:
        context.registry.protocol_error("malformed")
        log.warning("downstream %s: protocol error: %s", peer, exc)
    finally:
        registry.session_state(state, None)
        await trio.aclose_forcefully(session.stream)
