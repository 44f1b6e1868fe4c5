"""The MySQL protocol's command bytes and the events the sans-IO connections return: what
``client.ClientConnection.next_event`` and ``server.ServerConnection.next_event`` produce, in one
place for both sides.  Error codes and packet prefix bytes are in ``codes``."""

from __future__ import annotations

from dataclasses import dataclass

from .handshake import Greeting

COM_QUIT = 0x01
COM_INIT_DB = 0x02
COM_QUERY = 0x03
COM_PING = 0x0E
COM_BINLOG_DUMP = 0x12
COM_REGISTER_SLAVE = 0x15
COM_BINLOG_DUMP_GTID = 0x1E


class NeedData:
    pass


NEED_DATA = NeedData()


@dataclass(frozen=True)
class StartTLS:
    """The client sent an SSLRequest: wrap the stream (server side), then call ``tls_started``."""


@dataclass(frozen=True)
class LoggedIn:
    user: str
    database: str | None
    tls: bool
    attributes: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class LoginRefused:
    """An ERR was queued; flush it and close the connection."""

    user: str
    code: int
    message: str


@dataclass(frozen=True)
class Query:
    sql: str


@dataclass(frozen=True)
class Ping:
    pass


@dataclass(frozen=True)
class InitDB:
    database: str


@dataclass(frozen=True)
class Quit:
    pass


@dataclass(frozen=True)
class RegisterSlave:
    server_id: int
    host: str
    user: str
    port: int


@dataclass(frozen=True)
class BinlogDump:
    file: str
    position: int
    flags: int
    server_id: int


@dataclass(frozen=True)
class BinlogDumpGtid:
    file: str
    position: int
    flags: int
    server_id: int
    gtid_data: bytes


@dataclass(frozen=True)
class UnknownCommand:
    command: int


@dataclass(frozen=True)
class Connected:
    """The client is logged in (client side)."""

    greeting: Greeting
    tls: bool
