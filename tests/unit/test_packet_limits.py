"""Packet size limits of the sans-IO server: 16 KiB before the login, listen.max_packet after it.
A packet over the limit is refused from its header (nothing of its body needs to arrive) with the
reply mariadbd gives (ERR 1153, SQLSTATE 08S01, the sequence id after the refused chunk's: checked
against a real server in tests/integration/test_serve_errors.py), and the connection reads no more."""

import hashlib
import struct

import pytest

from relay.protocol import events as proto_events
from relay.protocol import server as proto
from relay.protocol.client import ClientConnection, Connected
from relay.protocol.packets import PacketReader, PacketTooLarge, parse_err

USERS = {"repl": proto.Credentials(hashlib.sha1(hashlib.sha1(b"replpass").digest()).digest(), None)}


def _server(max_packet: int = proto.DEFAULT_MAX_PACKET) -> proto.ServerConnection:
    return proto.ServerConnection(server_version="5.5.5-10.11.6-MariaDB-log", connection_id=7,
                                  peer_host="127.0.0.1", lookup_user=USERS.get, max_packet=max_packet)


def _logged_in(max_packet: int) -> proto.ServerConnection:
    server, client = _server(max_packet), ClientConnection("repl", "replpass")
    logged_in = connected = False
    for _ in range(10):
        client.receive_data(server.data_to_send())
        connected = connected or isinstance(client.next_event(), Connected)
        server.receive_data(client.data_to_send())
        logged_in = logged_in or isinstance(server.next_event(), proto_events.LoggedIn)
        if logged_in and connected:
            server.data_to_send()  # nothing left: the OK went to the client above
            return server
    raise AssertionError("the client did not log in")


def _header(length: int, seq: int) -> bytes:
    return struct.pack("<I", length | (seq << 24))


def _refusal(server: proto.ServerConnection) -> tuple[int, int, str, str]:
    """(sequence id, code, sqlstate, message) of the one packet the server queued."""
    data = server.data_to_send()
    reader = PacketReader()
    reader.check_seq = False
    reader.feed(data)
    payload = reader.next_packet()
    assert reader.next_packet() is None, "one packet only"
    error = parse_err(bytes(payload))
    return data[3], error.code, error.sqlstate, error.message


REFUSAL = (1153, "08S01", "Got a packet bigger than 'max_allowed_packet' bytes")


def test_a_64_mib_packet_before_the_login_is_refused_from_its_first_header():
    server = _server()
    server.data_to_send()  # the greeting (sequence id 0)
    server.receive_data(_header(0xFFFFFF, 1) + bytes(1000))  # the first of four 16 MB chunks begins
    with pytest.raises(PacketTooLarge, match="over the limit of 16384 bytes for a client not logged in"):
        server.next_event()
    assert _refusal(server) == (2, *REFUSAL)
    server.receive_data(bytes(1 << 16))  # whatever follows is not read
    assert server.next_event() is proto_events.NEED_DATA and server.data_to_send() == b""


def test_the_largest_handshake_response_allowed_is_16_kib():
    for length, refused in ((proto.PRE_LOGIN_MAX_PACKET, False), (proto.PRE_LOGIN_MAX_PACKET + 1, True)):
        server = _server()
        server.data_to_send()
        server.receive_data(_header(length, 1))  # only the header: the body is not waited for
        if refused:
            with pytest.raises(PacketTooLarge):
                server.next_event()
            assert _refusal(server) == (2, *REFUSAL)
        else:
            assert server.next_event() is proto_events.NEED_DATA  # waits for the body


def test_after_the_login_the_limit_is_max_packet_over_all_chunks():
    server = _logged_in(max_packet=20 << 20)
    # a 64 MiB command: the first 16 MB chunk is within 20 MiB, the second header takes it over
    server.receive_data(_header(0xFFFFFF, 0) + bytes(0xFFFFFF) + _header(0xFFFFFF, 1))
    with pytest.raises(PacketTooLarge, match=r"over the limit of 20971520 bytes \(listen.max_packet\)"):
        server.next_event()
    assert _refusal(server) == (2, *REFUSAL)


def test_a_command_up_to_max_packet_is_served():
    server = _logged_in(max_packet=1 << 20)
    query = b"\x03SELECT '" + b"x" * ((1 << 20) - 10) + b"'"
    assert len(query) == 1 << 20
    server.receive_data(_header(len(query), 0) + query)
    event = server.next_event()
    assert isinstance(event, proto_events.Query) and len(event.sql) == len(query) - 1
    server.receive_data(_header((1 << 20) + 1, 0))
    with pytest.raises(PacketTooLarge):
        server.next_event()
    assert _refusal(server) == (1, *REFUSAL)
