"""Sans-IO MySQL client connection, in the shape of h11.

The I/O loop feeds received bytes with ``receive_data``, sends whatever
``data_to_send`` returns, and asks ``next_event`` what happened.  The object knows
nothing about sockets; TLS is requested with a ``StartTLS`` event, after which the
loop wraps its stream and calls ``tls_started``.
"""

from __future__ import annotations

import enum
import struct

from ..errors import RetryableError
from . import auth
from .codes import (
    AUTH_MORE_DATA,
    AUTH_SWITCH_REQUEST,
    ERR_PACKET,
    OK_PACKET,
    SHA2_FAST_AUTH_OK,
    SHA2_PERFORM_FULL_AUTH,
    SHA2_REQUEST_PUBLIC_KEY,
)
from .events import (
    COM_BINLOG_DUMP,
    COM_PING,
    COM_QUERY,
    COM_QUIT,
    COM_REGISTER_SLAVE,
    NEED_DATA,
    Connected,
    StartTLS,
)
from .handshake import (
    CLIENT_SSL,
    Greeting,
    build_handshake_response,
    build_ssl_request,
    client_capabilities,
    parse_auth_switch,
    parse_greeting,
)
from .packets import (
    OkPacket,
    PacketReader,
    ProtocolError,
    ServerError,
    frame,
    is_eof,
    parse_err,
    parse_ok,
)
from .resultset import ResultSet, ResultSetParser, column_count


class AuthenticationError(RetryableError):
    """The upstream refused our credentials, or we cannot speak its auth method."""


class TLSRequiredError(RetryableError):
    """TLS was required by configuration but the server does not offer it."""


class _State(enum.Enum):
    GREETING = "greeting"
    TLS = "tls"
    AUTH = "auth"
    READY = "ready"
    RESPONSE = "response"
    DUMPING = "dumping"
    CLOSED = "closed"


class ClientConnection:
    def __init__(self, user: str, password: str, *, tls: str = "disabled", database: str | None = None,
                 server_public_key: bytes | None = None) -> None:
        """``tls`` is one of disabled / preferred / required / verify_ca / verify_identity;
        everything above ``preferred`` is required here (verification is the I/O layer's job)."""
        self._user = user
        self._password = password.encode("utf-8")
        self._tls_mode = tls
        self._database = database
        self._server_public_key = server_public_key
        self._reader = PacketReader()
        self._out: list[bytes] = []
        self._state = _State.GREETING
        self._seq = 0
        self._greeting: Greeting | None = None
        self._tls_active = False
        self._plugin = ""
        self._scramble = b""
        self._switched = False
        self._resultset: ResultSetParser | None = None

    # ------------------------------------------------------------ I/O plumbing

    def receive_data(self, data: bytes | bytearray) -> None:
        self._reader.feed(data)

    def data_to_send(self) -> bytes:
        out = b"".join(self._out)
        self._out.clear()
        return out

    @property
    def greeting(self) -> Greeting | None:
        return self._greeting

    def _send(self, payload: bytes) -> None:
        data, self._seq = frame(payload, self._seq)
        self._out.append(data)
        self._reader.next_seq = self._seq

    def _command(self, payload: bytes) -> None:
        if self._state is not _State.READY:
            raise ProtocolError(f"cannot send a command while {self._state.value}")
        self._seq = 0
        self._send(payload)
        self._state = _State.RESPONSE

    # ------------------------------------------------------------ events

    def next_event(self) -> object:
        """Connected, StartTLS, OkPacket, ResultSet, or NEED_DATA; raises ServerError for ERR."""
        while True:
            if self._state is _State.TLS:
                return NEED_DATA
            payload = self._reader.next_packet()
            if payload is None:
                return NEED_DATA
            self._seq = self._reader.next_seq
            event = self._handle(payload)
            if event is not None:
                return event

    def _handle(self, payload: memoryview) -> object | None:
        if self._state is _State.GREETING:
            return self._on_greeting(payload)
        if self._state is _State.AUTH:
            return self._on_auth_reply(payload)
        if self._state is _State.RESPONSE:
            return self._on_response(payload)
        raise ProtocolError(f"unexpected packet while {self._state.value}")

    # ------------------------------------------------------------ connection phase

    def _on_greeting(self, payload: memoryview) -> object | None:
        greeting = parse_greeting(payload)
        self._greeting = greeting
        self._scramble = greeting.scramble
        self._plugin = greeting.auth_plugin if greeting.auth_plugin in (
            auth.NATIVE_PASSWORD, auth.CACHING_SHA2_PASSWORD) else auth.NATIVE_PASSWORD
        wants_tls = self._tls_mode != "disabled"
        server_tls = bool(greeting.capabilities & CLIENT_SSL)
        if wants_tls and server_tls:
            self._send(build_ssl_request(client_capabilities()))
            self._state = _State.TLS
            return StartTLS()
        if wants_tls and self._tls_mode != "preferred":
            raise TLSRequiredError(
                f"upstream.ssl.mode is {self._tls_mode} but the server does not offer TLS "
                f"(server version {greeting.server_version})")
        self._send_handshake_response()
        return None

    def tls_started(self) -> None:
        if self._state is not _State.TLS:
            raise ProtocolError("tls_started called without a StartTLS event")
        self._tls_active = True
        self._send_handshake_response()

    def _send_handshake_response(self) -> None:
        caps = client_capabilities() | (CLIENT_SSL if self._tls_active else 0)
        token = self._token(self._plugin, self._scramble)
        self._send(build_handshake_response(caps, self._user, token, self._plugin, self._database))
        self._state = _State.AUTH

    def _token(self, plugin: str, scramble: bytes) -> bytes:
        if plugin == auth.NATIVE_PASSWORD:
            return auth.native_password_token(self._password, scramble)
        if plugin == auth.CACHING_SHA2_PASSWORD:
            return auth.caching_sha2_token(self._password, scramble)
        if plugin == auth.CLIENT_ED25519:
            if len(scramble) != auth.ED25519_NONCE_BYTES:
                raise ProtocolError(f"the server sent a {len(scramble)}-byte client_ed25519 nonce, "
                                    f"not {auth.ED25519_NONCE_BYTES}")
            return auth.ed25519_token(self._password, scramble)
        raise AuthenticationError(f"the server asked for the authentication plugin {plugin!r}, "
                                  "which binlog-relay does not support")

    def _on_auth_reply(self, payload: memoryview) -> object | None:
        kind = payload[0]
        if kind == OK_PACKET:
            parse_ok(payload)
            self._state = _State.READY
            assert self._greeting is not None
            return Connected(self._greeting, self._tls_active)
        if kind == ERR_PACKET:
            error = parse_err(payload)
            raise AuthenticationError(str(error)) from error
        if kind == AUTH_SWITCH_REQUEST:
            self._on_auth_switch(payload)
            return None
        if kind == AUTH_MORE_DATA:
            self._on_auth_more_data(bytes(payload[1:]))
            return None
        raise ProtocolError(f"unexpected authentication reply 0x{kind:02x}")

    def _on_auth_switch(self, payload: memoryview) -> None:
        if self._switched:
            raise AuthenticationError("the server asked to switch authentication plugin twice")
        switch = parse_auth_switch(payload)
        self._switched = True
        self._plugin = switch.plugin
        self._scramble = switch.data
        self._send(self._token(switch.plugin, switch.data))
        return None

    def _on_auth_more_data(self, data: bytes) -> None:
        if self._plugin != auth.CACHING_SHA2_PASSWORD:
            raise ProtocolError(f"unexpected auth-more-data for {self._plugin}")
        if data == bytes((SHA2_FAST_AUTH_OK,)):  # the server had our hash cached; an OK follows
            return None
        if data == bytes((SHA2_PERFORM_FULL_AUTH,)):
            if self._tls_active:
                self._send(self._password + b"\x00")
            elif self._server_public_key:
                self._send(auth.rsa_encrypt_password(self._password, self._scramble, self._server_public_key))
            else:
                self._send(bytes((SHA2_REQUEST_PUBLIC_KEY,)))
            return None
        if data.startswith(b"-----BEGIN"):
            self._send(auth.rsa_encrypt_password(self._password, self._scramble, data))
            return None
        raise ProtocolError(f"unexpected caching_sha2_password data {data[:8]!r}")

    # ------------------------------------------------------------ command phase

    def query(self, sql: str) -> None:
        self._command(bytes((COM_QUERY,)) + sql.encode("utf-8"))

    def ping(self) -> None:
        self._command(bytes((COM_PING,)))

    def quit(self) -> None:
        self._seq = 0
        self._send(bytes((COM_QUIT,)))
        self._state = _State.CLOSED

    def register_slave(self, server_id: int, host: str = "", port: int = 0, user: str = "",
                       password: str = "") -> None:
        fields = b"".join(bytes((len(v),)) + v for v in (host.encode(), user.encode(), password.encode()))
        self._command(bytes((COM_REGISTER_SLAVE,)) + struct.pack("<I", server_id) + fields
                      + struct.pack("<HII", port, 0, 0))

    def binlog_dump(self, file: str, position: int, server_id: int, flags: int = 0) -> None:
        """After this the connection streams binlog packets: use ``read_binlog_packets``."""
        if position > 0xFFFFFFFF:
            raise ProtocolError("COM_BINLOG_DUMP carries a 32-bit position")
        self._command(bytes((COM_BINLOG_DUMP,)) + struct.pack("<IHI", position, flags, server_id)
                      + file.encode("utf-8"))
        self._state = _State.DUMPING

    def read_binlog_packets(self) -> list[memoryview]:
        """Every complete packet of the dump stream received so far (00+event, ERR or EOF)."""
        if self._state is not _State.DUMPING:
            raise ProtocolError("not dumping")
        packets = []
        next_packet = self._reader.next_packet
        while (payload := next_packet()) is not None:
            packets.append(payload)
        return packets

    def _on_response(self, payload: memoryview) -> object | None:
        if self._resultset is not None:
            if self._resultset.add(payload):
                result = self._resultset.result()
                self._resultset = None
                self._state = _State.READY
                return result
            return None
        kind = payload[0]
        if kind == OK_PACKET:
            self._state = _State.READY
            return parse_ok(payload)
        if kind == ERR_PACKET:
            self._state = _State.READY
            raise parse_err(payload)
        if is_eof(payload):
            self._state = _State.READY
            raise ProtocolError("unexpected EOF packet as a command response")
        self._resultset = ResultSetParser(column_count(payload))
        return None


__all__ = [
    "AuthenticationError", "ClientConnection", "Connected", "NEED_DATA", "OkPacket", "ResultSet",
    "ServerError", "StartTLS", "TLSRequiredError",
]
