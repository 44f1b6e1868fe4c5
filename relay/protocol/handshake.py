"""Connection-phase packets (docs/protocol.md 2): the greeting and the client's handshake response."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .codes import AUTH_SWITCH_REQUEST, ERR_PACKET
from .packets import ProtocolError, lenenc_str, parse_err, read_lenenc_int, read_lenenc_str, read_nul_str

CLIENT_LONG_PASSWORD = 1
CLIENT_LONG_FLAG = 1 << 2
CLIENT_CONNECT_WITH_DB = 1 << 3
CLIENT_PROTOCOL_41 = 1 << 9
CLIENT_SSL = 1 << 11
CLIENT_TRANSACTIONS = 1 << 13
CLIENT_SECURE_CONNECTION = 1 << 15
CLIENT_MULTI_RESULTS = 1 << 17
CLIENT_PLUGIN_AUTH = 1 << 19
CLIENT_CONNECT_ATTRS = 1 << 20
CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA = 1 << 21
CLIENT_DEPRECATE_EOF = 1 << 24

CHARSET_UTF8MB4_GENERAL_CI = 45
MAX_PACKET_SIZE = 1 << 30


@dataclass(frozen=True)
class Greeting:
    protocol_version: int
    server_version: str
    connection_id: int
    scramble: bytes
    capabilities: int
    charset: int
    status: int
    auth_plugin: str

    @property
    def is_mariadb(self) -> bool:
        return "mariadb" in self.server_version.lower()


def parse_greeting(payload: memoryview | bytes) -> Greeting:
    data = bytes(payload)
    if not data:
        raise ProtocolError("empty greeting")
    if data[0] == ERR_PACKET:
        raise parse_err(data)
    if data[0] != 10:
        raise ProtocolError(f"unsupported handshake protocol version {data[0]}")
    try:
        version, pos = read_nul_str(data, 1)
        connection_id = struct.unpack_from("<I", data, pos)[0]
        scramble = data[pos + 4 : pos + 12]
        pos += 13
        caps_low, charset, status, caps_high, auth_len = struct.unpack_from("<HBHHB", data, pos)
        pos += 8 + 10
        capabilities = caps_low | (caps_high << 16)
        plugin = ""
        if capabilities & CLIENT_SECURE_CONNECTION:
            part2_len = max(13, auth_len - 8)
            scramble += data[pos : pos + part2_len].rstrip(b"\x00")
            pos += part2_len
        if capabilities & CLIENT_PLUGIN_AUTH and pos < len(data):
            plugin_raw = data[pos:].split(b"\x00", 1)[0]
            plugin = plugin_raw.decode("ascii", "replace")
    except (struct.error, IndexError) as exc:
        raise ProtocolError(f"truncated greeting: {exc}") from None
    return Greeting(10, version.decode("utf-8", "replace"), connection_id, scramble,
                    capabilities, charset, status, plugin)


def build_ssl_request(capabilities: int) -> bytes:
    return struct.pack("<IIB23x", capabilities | CLIENT_SSL, MAX_PACKET_SIZE, CHARSET_UTF8MB4_GENERAL_CI)


def build_handshake_response(capabilities: int, user: str, auth_token: bytes, auth_plugin: str,
                             database: str | None = None) -> bytes:
    if database:
        capabilities |= CLIENT_CONNECT_WITH_DB
    parts = [
        struct.pack("<IIB23x", capabilities, MAX_PACKET_SIZE, CHARSET_UTF8MB4_GENERAL_CI),
        user.encode("utf-8") + b"\x00",
        lenenc_str(auth_token),
    ]
    if database:
        parts.append(database.encode("utf-8") + b"\x00")
    parts.append(auth_plugin.encode("ascii") + b"\x00")
    return b"".join(parts)


@dataclass(frozen=True)
class AuthSwitchRequest:
    plugin: str
    data: bytes  # verbatim: a 20-byte scramble and a NUL for the SHA plugins, a 32-byte nonce for ed25519


def parse_auth_switch(payload: memoryview | bytes) -> AuthSwitchRequest:
    data = bytes(payload)
    if len(data) < 2:
        raise ProtocolError("server asked for the old pre-4.1 authentication, which is not supported")
    plugin, pos = read_nul_str(data, 1)
    # Not stripped of a trailing NUL: ed25519's random nonce may end with one.
    return AuthSwitchRequest(plugin.decode("ascii", "replace"), data[pos:])


def client_capabilities() -> int:
    """What the relay asks for as a client: no DEPRECATE_EOF, compression or session tracking."""
    return (CLIENT_LONG_PASSWORD | CLIENT_LONG_FLAG | CLIENT_PROTOCOL_41 | CLIENT_TRANSACTIONS
            | CLIENT_SECURE_CONNECTION | CLIENT_MULTI_RESULTS | CLIENT_PLUGIN_AUTH
            | CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA)



# ------------------------------------------------------------ the server's side

CLIENT_FOUND_ROWS = 2
SERVER_STATUS_AUTOCOMMIT = 0x0002

# docs/protocol.md 2.1: what the relay offers as a server. No DEPRECATE_EOF (PyMySQL lacks it),
# no QUERY_ATTRIBUTES, COMPRESS or SESSION_TRACK.  SSL is added when TLS is configured.
SERVER_CAPABILITIES = (CLIENT_LONG_PASSWORD | CLIENT_FOUND_ROWS | CLIENT_LONG_FLAG | CLIENT_CONNECT_WITH_DB
                       | CLIENT_PROTOCOL_41 | CLIENT_TRANSACTIONS | CLIENT_SECURE_CONNECTION
                       | CLIENT_MULTI_RESULTS | CLIENT_PLUGIN_AUTH | CLIENT_CONNECT_ATTRS
                       | CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA)


def build_greeting(server_version: str, connection_id: int, scramble: bytes, capabilities: int,
                   auth_plugin: str, charset: int = CHARSET_UTF8MB4_GENERAL_CI,
                   status: int = SERVER_STATUS_AUTOCOMMIT) -> bytes:
    if len(scramble) != 20:
        raise ValueError("the scramble must be 20 bytes")
    return b"".join([
        b"\x0a", server_version.encode("utf-8"), b"\x00",
        struct.pack("<I", connection_id), scramble[:8], b"\x00",
        struct.pack("<HBHHB", capabilities & 0xFFFF, charset, status, capabilities >> 16, 21),
        bytes(10),  # reserved; MariaDB reads extended caps here only when bit 0 is clear
        scramble[8:], b"\x00", auth_plugin.encode("ascii"), b"\x00",
    ])


@dataclass(frozen=True)
class HandshakeResponse:
    capabilities: int
    max_packet: int
    charset: int
    user: str
    auth_response: bytes
    database: str | None
    auth_plugin: str
    attributes: tuple[tuple[str, str], ...]


def is_ssl_request(payload: memoryview | bytes) -> bool:
    return len(payload) == 32 and bool(struct.unpack_from("<I", payload, 0)[0] & CLIENT_SSL)


def parse_handshake_response(payload: memoryview | bytes) -> HandshakeResponse:
    data = bytes(payload)
    if len(data) < 33:
        raise ProtocolError(f"handshake response too short ({len(data)} bytes)")
    capabilities, max_packet, charset = struct.unpack_from("<IIB", data, 0)
    if not capabilities & CLIENT_PROTOCOL_41:
        raise ProtocolError("clients older than protocol 4.1 are not supported")
    user, pos = read_nul_str(data, 32)
    if capabilities & CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA:
        token, pos = read_lenenc_str(data, pos)
        token = token or b""
    elif capabilities & CLIENT_SECURE_CONNECTION:
        length = data[pos] if pos < len(data) else 0
        token, pos = data[pos + 1 : pos + 1 + length], pos + 1 + length
    else:
        token, pos = read_nul_str(data, pos)
    database = None
    if capabilities & CLIENT_CONNECT_WITH_DB and pos < len(data):
        raw_db, pos = read_nul_str(data, pos)
        database = raw_db.decode("utf-8", "replace") or None
    plugin = ""
    if capabilities & CLIENT_PLUGIN_AUTH and pos < len(data):
        raw_plugin, pos = read_nul_str(data, pos)
        plugin = raw_plugin.decode("ascii", "replace")
    attributes = _read_attributes(data, pos) if capabilities & CLIENT_CONNECT_ATTRS and pos < len(data) else ()
    return HandshakeResponse(capabilities, max_packet, charset, user.decode("utf-8", "replace"), token,
                             database, plugin, attributes)


def _read_attributes(data: bytes, pos: int) -> tuple[tuple[str, str], ...]:
    total, pos = read_lenenc_int(data, pos)
    end = pos + (total or 0)
    pairs = []
    while pos < end:
        key, pos = read_lenenc_str(data, pos)
        value, pos = read_lenenc_str(data, pos)
        pairs.append(((key or b"").decode("utf-8", "replace"), (value or b"").decode("utf-8", "replace")))
    return tuple(pairs)


def build_auth_switch(plugin: str, data: bytes) -> bytes:
    """``data`` is sent as is: a scramble ends with a NUL as mariadbd sends it, ed25519's nonce
    does not (its clients take every byte after the plugin name as the nonce)."""
    return bytes((AUTH_SWITCH_REQUEST,)) + plugin.encode("ascii") + b"\x00" + data
