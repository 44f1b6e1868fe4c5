"""One login to a primary: a trio stream and the sans-IO client conversation
(``protocol.client.ClientConnection``), the variables a replica sets before its dump, and how many
bytes of the primary wait unread (for the lag metric)."""

from __future__ import annotations

import fcntl
import ssl
import sys
import termios

import trio

from ..binlog import events as ev
from ..protocol.client import NEED_DATA, ClientConnection, Connected, StartTLS
from ..protocol.codes import BINLOG_SEND_ANNOTATE_ROWS_EVENT, USE_HEARTBEAT_EVENT_V2
from ..protocol.handshake import Greeting
from ..protocol.packets import OkPacket, ProtocolError
from ..protocol.resultset import ResultSet
from .settings import Candidate, UpstreamSettings

RECEIVE_SIZE = 1 << 20
MARIADB_CAPABILITY = 4  # receive GTID events as they are, not rewritten as BEGIN (docs/protocol.md 3.1)


class PrimaryConnection:
    """One login to the primary: a stream plus the sans-IO client conversation."""

    def __init__(self, stream: trio.abc.Stream, protocol: ClientConnection) -> None:
        self.stream = stream
        self.protocol = protocol

    @property
    def greeting(self) -> Greeting:
        greeting = self.protocol.greeting
        assert greeting is not None
        return greeting

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

    async def set_dump_variables(self, settings: UpstreamSettings) -> int:
        """Heartbeat period, checksum and capability, as a replica sets them before its dump; returns
        the checksum algorithm of the primary's binlog."""
        period_ns = int(settings.heartbeat_period * 1e9)
        if self.greeting.is_mariadb:
            await self.query(f"SET @master_heartbeat_period= {period_ns}")
            await self.query("SET @master_binlog_checksum= @@global.binlog_checksum")
            rows = await self.rows("SELECT @master_binlog_checksum")
            await self.query(f"SET @mariadb_slave_capability= {MARIADB_CAPABILITY}")
        else:
            await self.query(f"SET @master_heartbeat_period = {period_ns}, @source_heartbeat_period = {period_ns}")
            await self.query("SET @master_binlog_checksum = @@global.binlog_checksum, "
                             "@source_binlog_checksum = @@global.binlog_checksum")
            rows = await self.rows("SELECT @source_binlog_checksum")
            await self.query(f"SET @slave_uuid = '{settings.replica_uuid}', @replica_uuid = '{settings.replica_uuid}'")
        checksum = (rows[0][0] or "NONE").upper() if rows else "NONE"
        return ev.CHECKSUM_CRC32 if checksum == "CRC32" else ev.CHECKSUM_OFF

    def dump_flags(self) -> int:
        """MariaDB reads 0x02 as "send ANNOTATE_ROWS" (kept, so stored files stay identical), MySQL
        (rpl_binlog_sender.cc) as "heartbeat v2", which a MySQL 8.0.26+ replica asks for too: the
        stored files hold annotations, and the relay parses heartbeat v2 (docs/protocol.md 3.3)."""
        return BINLOG_SEND_ANNOTATE_ROWS_EVENT if self.greeting.is_mariadb else USE_HEARTBEAT_EVENT_V2


def tls_context(settings: UpstreamSettings) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=settings.ssl_ca)
    if settings.ssl_cert:
        context.load_cert_chain(settings.ssl_cert, settings.ssl_key)
    if settings.ssl_mode in ("preferred", "required"):
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif settings.ssl_mode == "verify_ca":
        context.check_hostname = False
    return context


async def connect(settings: UpstreamSettings, candidate: Candidate | None = None) -> PrimaryConnection:
    """Open a connection to ``candidate`` (default: the first) and log in; ready for queries."""
    candidate = candidate or settings.all_candidates[0]
    with trio.fail_after(settings.connect_timeout):
        stream: trio.abc.Stream = await trio.open_tcp_stream(candidate.host, candidate.port)
        protocol = ClientConnection(settings.user, settings.password, tls=settings.ssl_mode,
                                    server_public_key=settings.server_public_key)
        conn = PrimaryConnection(stream, protocol)
        while True:
            event = await conn.next_event()
            if isinstance(event, StartTLS):
                await conn.flush()
                conn.stream = trio.SSLStream(conn.stream, tls_context(settings), server_hostname=candidate.host)
                await conn.stream.do_handshake()
                protocol.tls_started()
            elif isinstance(event, Connected):
                return conn
