"""Sans-IO MySQL server connection: the relay's side toward downstream clients.

Like ``client.ClientConnection``: the I/O loop feeds ``receive_data``, sends
``data_to_send``, and acts on ``next_event``.  Authentication is decided here from the
credentials a ``lookup_user`` callable returns; commands come out as events and the
session answers with ``send_ok`` / ``send_error`` / ``send_result_set`` / ``send_events``.

The connection is the only owner of the packets' sequence ids, as h11's writers are the only
place that frames: callers hand it payloads (``send_events``, ``start_event`` and
``send_event_part`` for an event streamed in pieces), or a block the C loop of binlog/_scan.c
framed from ``sequence_id`` on (``send_framed``, told how many packets it holds).  Nothing outside
the connection computes a header or a sequence id.
"""

from __future__ import annotations

import enum
import itertools
import os
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from . import auth
from .codes import (
    ACK_WANTED,
    AUTH_MORE_DATA,
    ER_ACCESS_DENIED_ERROR,
    ER_HANDSHAKE_ERROR,
    ER_MALFORMED_PACKET,
    ER_NET_PACKET_TOO_LARGE,
    ER_SECURE_TRANSPORT_REQUIRED,
    EVENT_PACKET,
    SEMI_SYNC_MAGIC,
    SHA2_FAST_AUTH_OK,
    SHA2_PERFORM_FULL_AUTH,
    SHA2_REQUEST_PUBLIC_KEY,
)
from .events import (
    COM_BINLOG_DUMP,
    COM_BINLOG_DUMP_GTID,
    COM_INIT_DB,
    COM_PING,
    COM_QUERY,
    COM_QUIT,
    COM_REGISTER_SLAVE,
    NEED_DATA,
    BinlogDump,
    BinlogDumpGtid,
    InitDB,
    LoggedIn,
    LoginRefused,
    Ping,
    Query,
    Quit,
    RegisterSlave,
    StartTLS,
    UnknownCommand,
)
from .handshake import (
    CLIENT_SSL,
    SERVER_CAPABILITIES,
    build_auth_switch,
    build_greeting,
    is_ssl_request,
    parse_handshake_response,
)
from .packets import (
    PACKET_TOO_LARGE_MESSAGE,
    PacketReader,
    PacketTooLarge,
    ProtocolError,
    build_eof,
    build_err,
    build_ok,
    event_packet_header,
    frame,
    frame_events,
)
from .resultset import ColumnDef, build_result_head, build_result_set, build_row


@dataclass(frozen=True)
class Credentials:
    native_hash: bytes | None  # SHA1(SHA1(password)), b"" for an empty password; None for an ed25519 account
    sha2_hash: bytes | None = None  # SHA256(SHA256(password)) when the plaintext was configured
    ed25519_key: bytes | None = None  # an ed25519 account's public key: it logs in with client_ed25519 only


class _State(enum.Enum):
    HANDSHAKE = "handshake"
    TLS = "tls"
    AUTH_SWITCH = "auth switch"
    ED25519 = "client_ed25519 signature"
    SHA2_FULL_AUTH = "caching_sha2 full authentication"
    COMMAND = "command"
    DUMPING = "dumping"
    CLOSED = "closed"


# Before the login a client sends its handshake response (or an SSL request, or an auth switch
# reply): capabilities, a user name (MariaDB allows 128 characters, 512 bytes in utf8mb4), an auth
# token (20 bytes for mysql_native_password, 32 for caching_sha2_password), a database name (64
# characters), a plugin name and connection attributes. Measured through a proxy to MariaDB 10.11:
# as root, pymysql sends 114 bytes and the mariadb client 187; with a 128-character user name,
# 258 and 331, and a MariaDB replica's IO thread 323. 16 KiB is fifty times the largest, room for
# many attributes, and bounds what an unauthenticated client makes the relay hold to that plus
# one read (64 KiB in downstream/session.py): 80 MiB for 1000 of them, not 64 MiB each.
PRE_LOGIN_MAX_PACKET = 16 << 10
DEFAULT_MAX_PACKET = 16 << 20  # MariaDB's default max_allowed_packet


class ServerConnection:
    def __init__(self, *, server_version: str, connection_id: int, peer_host: str,
                 lookup_user: Callable[[str], Credentials | None], tls_available: bool = False,
                 tls_required: bool = False, scramble: bytes | None = None,
                 auth_plugin: str = auth.NATIVE_PASSWORD, max_packet: int = DEFAULT_MAX_PACKET,
                 sha2_cache: set[str] | None = None, rsa_key_pair: tuple[bytes, bytes] | None = None) -> None:
        """``sha2_cache``: the users who passed a full caching_sha2_password authentication since the
        server started (shared by its connections), who may use the fast path; ``rsa_key_pair``
        (private, public PEM) lets the others authenticate without TLS."""
        self._sha2_cache = sha2_cache if sha2_cache is not None else set()
        self._rsa_key_pair = rsa_key_pair
        self._lookup_user = lookup_user
        self._peer_host = peer_host
        self._tls_required = tls_required
        self._tls_active = False
        self._scramble = scramble or _new_scramble()
        self._reader = PacketReader()
        # Before the login nobody is known: a handshake response is a few hundred bytes, so an
        # unauthenticated client cannot make the relay hold megabytes for it.
        self._reader.max_packet = PRE_LOGIN_MAX_PACKET
        self._max_packet = max_packet
        self._out: list[bytes | bytearray | memoryview] = []
        self._seq = 0
        self._event_rest = 0  # bytes still to come of an event streamed in pieces (start_event)
        self._state = _State.HANDSHAKE
        self._pending_login: tuple[str, str | None, tuple[tuple[str, str], ...]] | None = None
        self._ed25519_nonce = b""
        self._tls_available = tls_available
        capabilities = SERVER_CAPABILITIES | (CLIENT_SSL if tls_available else 0)
        self.semi_sync = False  # the client asked for semi-sync: events carry ef 00 (never an ACK request)
        self._send(build_greeting(server_version, connection_id, self._scramble, capabilities, auth_plugin))

    # ------------------------------------------------------------ plumbing

    def receive_data(self, data: bytes | bytearray) -> None:
        if self._state is _State.DUMPING:
            return  # a dump is one-way; pymysqlreplication even sends a stray byte after it
        self._reader.feed(data)

    def data_to_send(self) -> bytes | memoryview:
        """What to send now.  A block framed outside (``send_framed``) alone is handed back as it
        is, not copied: its owner reuses it only after it is sent."""
        single = self._out[0] if len(self._out) == 1 else None
        out = single if isinstance(single, (bytes, memoryview)) else b"".join(self._out)
        self._out.clear()
        return out

    @property
    def dumping(self) -> bool:
        return self._state is _State.DUMPING

    def _send(self, payload: bytes) -> None:
        self._between_packets()
        data, self._seq = frame(payload, self._seq)
        self._out.append(data)
        self._reader.next_seq = self._seq

    # ------------------------------------------------------------ events

    def next_event(self) -> object:
        while True:
            if self._state in (_State.TLS, _State.DUMPING, _State.CLOSED):
                return NEED_DATA
            if self._state is _State.COMMAND:
                self._reader.next_seq = 0  # every command starts a new sequence
            try:
                payload = self._reader.next_packet()
            except PacketTooLarge as refused:
                # What mariadbd does (checked against one in tests/integration/test_serve_errors.py):
                # ERR 1153 with the sequence id following the refused chunk's, then the connection
                # ends, since the rest of that packet would be read as commands.  The caller sends
                # what is queued and closes; nothing more is read.
                self._seq = (refused.seq + 1) & 0xFF
                self.send_error(ER_NET_PACKET_TOO_LARGE, PACKET_TOO_LARGE_MESSAGE, "08S01")
                logged_in = self._state is _State.COMMAND
                self._state = _State.CLOSED
                raise PacketTooLarge(refused.length, refused.limit, refused.seq,
                                     " (listen.max_packet)" if logged_in else " for a client not logged in") from None
            if payload is None:
                return NEED_DATA
            self._seq = self._reader.next_seq
            event = self._dispatch(payload)
            if event is not None:
                return event

    def _dispatch(self, payload: memoryview) -> object | None:
        if self._state is _State.HANDSHAKE:
            return self._on_handshake(payload)
        if self._state is _State.AUTH_SWITCH:
            return self._on_auth_switch_reply(payload)
        if self._state is _State.SHA2_FULL_AUTH:
            return self._on_sha2_full_auth(bytes(payload))
        if self._state is _State.ED25519:
            return self._on_ed25519_signature(bytes(payload))
        return self._on_command(payload)

    # ------------------------------------------------------------ login

    def _on_handshake(self, payload: memoryview) -> object | None:
        if is_ssl_request(payload) and not self._tls_active:
            if not self._tls_available:  # the greeting offered no SSL: a server without TLS refuses it so
                return self._refuse("", ER_HANDSHAKE_ERROR, "Bad handshake", "08S01")
            self._state = _State.TLS
            return StartTLS()
        if self._tls_required and not self._tls_active:
            return self._refuse("", ER_SECURE_TRANSPORT_REQUIRED, "Connections using insecure transport are "
                                "prohibited while --require_secure_transport=ON.", "08004")
        try:
            response = parse_handshake_response(payload)
        except ProtocolError:
            return self._refuse("", ER_HANDSHAKE_ERROR, "Bad handshake", "08S01")
        self._pending_login = (response.user, response.database, response.attributes)
        credentials = self._lookup_user(response.user)
        if credentials is not None and credentials.ed25519_key is not None:
            # As mariadbd for an account IDENTIFIED VIA ed25519, whatever plugin the client began
            # with: a switch to client_ed25519 with a fresh nonce, which the client signs.
            self._ed25519_nonce = auth.new_ed25519_nonce()
            self._send(build_auth_switch(auth.CLIENT_ED25519, self._ed25519_nonce))
            self._state = _State.ED25519
            return None
        if response.auth_plugin == auth.NATIVE_PASSWORD or not response.auth_plugin:
            return self._finish_login(auth.NATIVE_PASSWORD, response.auth_response)
        if response.auth_plugin == auth.CACHING_SHA2_PASSWORD:
            if credentials is not None and credentials.sha2_hash is not None:
                cached = response.user in self._sha2_cache or not credentials.sha2_hash
                if cached or (self._rsa_key_pair is None and not self._tls_active):
                    # (without a key pair or TLS a full authentication could not happen: the token
                    # alone is checked, as for a cached user)
                    return self._finish_login(auth.CACHING_SHA2_PASSWORD, response.auth_response)
                # As MySQL after a start: no cached hash for this user yet, so the password itself
                # must come, over TLS or RSA-encrypted (sha2_cache_and_full_auth in MySQL's plugin).
                self._send(bytes((AUTH_MORE_DATA, SHA2_PERFORM_FULL_AUTH)))
                self._state = _State.SHA2_FULL_AUTH
                return None
        # Any other plugin, or sha2 without a sha2 hash: ask for mysql_native_password.
        self._send(build_auth_switch(auth.NATIVE_PASSWORD, self._scramble + b"\x00"))
        self._state = _State.AUTH_SWITCH
        return None

    def take_unparsed(self) -> bytes:
        """Bytes received but not parsed: after an SSLRequest, the start of the client's TLS
        handshake, which may arrive in the same segment and belongs to the TLS layer."""
        return self._reader.take_unparsed()

    def tls_started(self) -> None:
        if self._state is not _State.TLS:
            raise ProtocolError("tls_started without StartTLS")
        self._tls_active = True
        self._state = _State.HANDSHAKE

    def _on_sha2_full_auth(self, data: bytes) -> object | None:
        """The client's answer to "perform full authentication": the password and a NUL over TLS,
        ``02`` asking for the RSA public key, or the password encrypted with that key."""
        if self._tls_active:
            return self._check_password(data.rstrip(b"\x00"))
        assert self._rsa_key_pair is not None
        private, public = self._rsa_key_pair
        if data == bytes((SHA2_REQUEST_PUBLIC_KEY,)):
            self._send(bytes((AUTH_MORE_DATA,)) + public)
            return None
        password = auth.rsa_decrypt_password(data, self._scramble, private)
        return self._check_password(password) if password is not None else self._refuse_login(using=True)

    def _check_password(self, password: bytes) -> object:
        assert self._pending_login is not None
        user, database, attributes = self._pending_login
        credentials = self._lookup_user(user)
        if credentials is None or credentials.sha2_hash != auth.sha2_hash_of(password):
            return self._refuse_login(using=bool(password))
        self._sha2_cache.add(user)
        return self._logged_in()

    def _on_auth_switch_reply(self, payload: memoryview) -> object:
        return self._finish_login(auth.NATIVE_PASSWORD, bytes(payload))

    def _on_ed25519_signature(self, signature: bytes) -> object:
        assert self._pending_login is not None
        credentials = self._lookup_user(self._pending_login[0])
        if (credentials is not None and credentials.ed25519_key is not None
                and auth.ed25519_check(signature, self._ed25519_nonce, credentials.ed25519_key)):
            return self._logged_in()
        return self._refuse_login(using=True)  # the plugin always counts as a password used, as MariaDB's

    def _finish_login(self, plugin: str, token: bytes) -> object:
        assert self._pending_login is not None
        user, database, attributes = self._pending_login
        credentials = self._lookup_user(user)
        if credentials is not None and _token_matches(plugin, token, self._scramble, credentials):
            if plugin == auth.CACHING_SHA2_PASSWORD:
                self._send(bytes((AUTH_MORE_DATA, SHA2_FAST_AUTH_OK)))
            return self._logged_in()
        return self._refuse_login(using=bool(token))

    def _logged_in(self) -> LoggedIn:
        assert self._pending_login is not None
        user, database, attributes = self._pending_login
        self._send(build_ok())
        self._state = _State.COMMAND
        self._reader.max_packet = self._max_packet
        return LoggedIn(user, database, self._tls_active, attributes)

    def _refuse_login(self, using: bool) -> LoginRefused:
        assert self._pending_login is not None
        user = self._pending_login[0]
        return self._refuse(user, ER_ACCESS_DENIED_ERROR, f"Access denied for user '{user}'@'{self._peer_host}' "
                            f"(using password: {'YES' if using else 'NO'})", "28000")

    def _refuse(self, user: str, code: int, message: str, sqlstate: str) -> LoginRefused:
        self._send(build_err(code, message, sqlstate))
        self._state = _State.CLOSED
        return LoginRefused(user, code, message)

    # ------------------------------------------------------------ commands

    def _on_command(self, payload: memoryview) -> object:
        if not payload:
            return self._malformed()
        command = payload[0]
        body = bytes(payload[1:])
        try:
            if command == COM_QUERY:
                return Query(body.decode("utf-8", "replace"))
            if command == COM_PING:
                return Ping()
            if command == COM_QUIT:
                self._state = _State.CLOSED
                return Quit()
            if command == COM_INIT_DB:
                return InitDB(body.decode("utf-8", "replace"))
            if command == COM_REGISTER_SLAVE:
                return _parse_register_slave(body)
            if command == COM_BINLOG_DUMP:
                return _parse_binlog_dump(body)
            if command == COM_BINLOG_DUMP_GTID:
                return _parse_binlog_dump_gtid(body)
        except (struct.error, IndexError, ProtocolError):
            return self._malformed()
        return UnknownCommand(command)

    def _malformed(self) -> object:
        self.send_error(ER_MALFORMED_PACKET, "Malformed communication packet.", "HY000")
        return None

    # ------------------------------------------------------------ replies

    def send_ok(self, info: bytes = b"", warnings: int = 0) -> None:
        self._send(build_ok(warnings=warnings, info=info))

    def send_error(self, code: int, message: str, sqlstate: str = "HY000") -> None:
        self._send(build_err(code, message, sqlstate))

    def send_result_set(self, columns: list[str] | tuple[str, ...], rows: list[tuple[object, ...]],
                        types: tuple[int, ...] = ()) -> None:
        for payload in build_result_set(columns, rows, types):
            self._send(payload)

    def send_result_head(self, columns: Sequence[ColumnDef]) -> None:
        """The column definitions of a result set sent in pieces: ``send_rows`` as they come,
        then ``send_eof``, or ``send_error`` as a server ends a statement that fails half-way."""
        for payload in build_result_head(tuple(columns)):
            self._send(payload)

    def send_rows(self, rows: Iterable[Sequence[object]]) -> None:
        for row in rows:
            self._send(build_row(tuple(row)))

    def start_dump(self) -> None:
        """From now on the connection carries binlog events (``send_events``) until it closes."""
        self._state = _State.DUMPING

    def send_events(self, events: Sequence[bytes | memoryview], ack_wanted: Iterable[bool] | None = None) -> None:
        """Frame each event as ``00 | event`` (one packet each, split past 16 MB).  Under semi-sync
        as ``00 ef flag | event`` (semisync_master.cc): flag ACK_WANTED where ``ack_wanted`` says
        so (a group's last event, when the relay's own ACK waits for its replicas), after which
        the numbering starts again at 1 as MariaDB's flush_net does (the replica's ACK takes 0);
        without ``ack_wanted`` the relay never asks for an ACK (docs/protocol.md 6)."""
        if self.semi_sync:
            for event, ack in zip(events, itertools.repeat(False) if ack_wanted is None else ack_wanted):
                self._send(bytes((EVENT_PACKET, SEMI_SYNC_MAGIC, ACK_WANTED if ack else 0)) + bytes(event))
                if ack:
                    self._seq = 1
            return
        if ack_wanted is not None:
            raise ProtocolError("an ACK asked of a replica that is not semi-sync")
        self._between_packets()
        self._seq = frame_events(events, self._seq, self._out)

    def start_event(self, length: int) -> None:
        """Open the packet of one event of ``length`` bytes whose bytes follow in pieces
        (``send_event_part``), for an event streamed from a file instead of held whole: it must
        fit one packet (under 16 MB with its ``00``, or semi-sync's ``00 ef 00``)."""
        self._between_packets()
        prefix = bytes((EVENT_PACKET, SEMI_SYNC_MAGIC, 0)) if self.semi_sync else bytes((EVENT_PACKET,))
        self._out.append(event_packet_header(length, self._seq, prefix))
        self._seq = (self._seq + 1) & 0xFF
        self._event_rest = length

    def send_event_part(self, part: bytes | bytearray) -> None:
        """The next bytes of the event ``start_event`` opened."""
        if len(part) > self._event_rest:
            raise ProtocolError(f"{len(part)} bytes for an event with {self._event_rest} bytes left")
        self._out.append(part)
        self._event_rest -= len(part)

    def _between_packets(self) -> None:
        if self._event_rest:
            raise ProtocolError(f"a packet sent inside an event with {self._event_rest} bytes to come")

    @property
    def sequence_id(self) -> int:
        """The sequence id the next packet gets: where a block framed by the C loop of
        binlog/_scan.c starts its numbering (then handed over with ``send_framed``)."""
        return self._seq

    def send_framed(self, data: bytes | bytearray | memoryview, packets: int) -> None:
        """``packets`` whole packets framed outside the connection (the serve loop of _scan.c,
        through ``replication.outbound.frame_block``), numbered from ``sequence_id`` on: the
        connection moves its own sequence id past them."""
        self._between_packets()
        if packets and data[3] != self._seq:
            raise ProtocolError(f"a block framed from sequence id {data[3]}, not {self._seq}")
        self._out.append(data)
        self._seq = (self._seq + packets) & 0xFF

    @staticmethod
    def refusal_before_greeting(code: int, message: str, sqlstate: str) -> bytes:
        """An ERR in place of the greeting, the first packet of a connection refused outright
        (mariadbd's answer to a client over max_connections)."""
        return frame(build_err(code, message, sqlstate), 0)[0]

    def send_eof(self) -> None:
        self._send(build_eof())

    def send_dump_error(self, code: int, message: str, sqlstate: str = "HY000") -> None:
        self._send(build_err(code, message, sqlstate))


def _new_scramble() -> bytes:
    # 20 printable, non-zero bytes, as servers send (some clients treat 00 as a terminator).
    return bytes(33 + b % 94 for b in os.urandom(20))


def _token_matches(plugin: str, token: bytes, scramble: bytes, credentials: Credentials) -> bool:
    if plugin == auth.CACHING_SHA2_PASSWORD:
        return credentials.sha2_hash is not None and auth.caching_sha2_check(token, scramble,
                                                                           credentials.sha2_hash)
    return credentials.native_hash is not None and auth.native_password_check(token, scramble,
                                                                                credentials.native_hash)


def _parse_register_slave(body: bytes) -> RegisterSlave:
    server_id = struct.unpack_from("<I", body, 0)[0]
    pos = 4
    fields = []
    for _ in range(3):  # host, user, password
        length = body[pos]
        fields.append(body[pos + 1 : pos + 1 + length].decode("utf-8", "replace"))
        pos += 1 + length
    port = struct.unpack_from("<H", body, pos)[0] if pos + 2 <= len(body) else 0
    return RegisterSlave(server_id, fields[0], fields[1], port)


def _parse_binlog_dump(body: bytes) -> BinlogDump:
    position, flags, server_id = struct.unpack_from("<IHI", body, 0)
    name = body[10:].split(b"\x00", 1)[0].decode("utf-8", "replace")
    return BinlogDump(name, position, flags, server_id)


def _parse_binlog_dump_gtid(body: bytes) -> BinlogDumpGtid:
    flags, server_id, name_len = struct.unpack_from("<HII", body, 0)
    pos = 10
    name = body[pos : pos + name_len].split(b"\x00", 1)[0].decode("utf-8", "replace")
    pos += name_len
    position = struct.unpack_from("<Q", body, pos)[0]
    pos += 8
    data = b""
    if pos + 4 <= len(body):
        data_len = struct.unpack_from("<I", body, pos)[0]
        data = body[pos + 4 : pos + 4 + data_len]
    return BinlogDumpGtid(name, position, flags, server_id, data)
