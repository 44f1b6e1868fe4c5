"""The sans-IO server against the sans-IO client (and hand-made bytes where the client cannot
reach a path): login, auth switch, commands, dump framing, malformed input."""

import hashlib
import struct

import pytest

from relay.protocol import auth
from relay.protocol import events as proto_events
from relay.protocol import server as proto
from relay.protocol.client import NEED_DATA, AuthenticationError, ClientConnection, Connected
from relay.protocol.codes import ER_MALFORMED_PACKET
from relay.protocol.handshake import CLIENT_PROTOCOL_41, build_greeting
from relay.protocol.packets import PacketReader, frame, parse_err
from relay.protocol.resultset import ResultSet

USERS = {
    "repl": proto.Credentials(hashlib.sha1(hashlib.sha1(b"replpass").digest()).digest(),
                              hashlib.sha256(hashlib.sha256(b"replpass").digest()).digest()),
    "hashonly": proto.Credentials(hashlib.sha1(hashlib.sha1(b"pw").digest()).digest(), None),
}


def _server(**kwargs) -> proto.ServerConnection:
    return proto.ServerConnection(server_version="5.5.5-10.11.6-MariaDB-log", connection_id=7,
                                  peer_host="127.0.0.1", lookup_user=USERS.get, **kwargs)


def _pump(client: ClientConnection, server: proto.ServerConnection) -> tuple[object, object]:
    """Exchange bytes until both sides are waiting; return the last events each produced."""
    client_event = server_event = None
    for _ in range(20):
        moved = False
        data = server.data_to_send()
        if data:
            client.receive_data(data)
            moved = True
        event = client.next_event()
        if event is not NEED_DATA:
            client_event = event
        data = client.data_to_send()
        if data:
            server.receive_data(data)
            moved = True
        event = server.next_event()
        if event is not proto_events.NEED_DATA:
            server_event = event
        if not moved:
            break
    return client_event, server_event


@pytest.mark.parametrize("plugin", [auth.NATIVE_PASSWORD, auth.CACHING_SHA2_PASSWORD])
def test_login_with_either_plugin(plugin):
    client_event, server_event = _pump(ClientConnection("repl", "replpass"), _server(auth_plugin=plugin))
    assert isinstance(client_event, Connected)
    assert isinstance(server_event, proto_events.LoggedIn) and server_event.user == "repl"


def test_sha2_client_without_sha2_hash_is_switched_to_native():
    server = _server(auth_plugin=auth.CACHING_SHA2_PASSWORD)
    client_event, server_event = _pump(ClientConnection("hashonly", "pw"), server)
    assert isinstance(client_event, Connected) and isinstance(server_event, proto_events.LoggedIn)


@pytest.mark.parametrize("user,password", [("repl", "wrong"), ("nobody", "x"), ("repl", "")])
def test_refused_login_gets_1045(user, password):
    client = ClientConnection(user, password)
    server = _server()
    with pytest.raises(AuthenticationError, match="1045"):
        _pump(client, server)
    assert server.next_event() is proto_events.NEED_DATA


def test_query_and_result_set_roundtrip():
    client, server = ClientConnection("repl", "replpass"), _server()
    _pump(client, server)
    client.query("SELECT @master_binlog_checksum")
    server.receive_data(client.data_to_send())
    event = server.next_event()
    assert event == proto_events.Query("SELECT @master_binlog_checksum")
    server.send_result_set(["@master_binlog_checksum"], [("CRC32",)])
    client.receive_data(server.data_to_send())
    assert client.next_event() == ResultSet(("@master_binlog_checksum",), (("CRC32",),))


def test_commands_parse():
    client, server = ClientConnection("repl", "replpass"), _server()
    _pump(client, server)
    client.register_slave(42, "replica-host", 3307)
    server.receive_data(client.data_to_send())
    assert server.next_event() == proto_events.RegisterSlave(42, "replica-host", "", 3307)
    server.send_ok()
    client.receive_data(server.data_to_send())
    client.next_event()
    client.binlog_dump("mysql-bin.000003", 1234, 42, 0x02)
    server.receive_data(client.data_to_send())
    assert server.next_event() == proto_events.BinlogDump("mysql-bin.000003", 1234, 0x02, 42)


def test_dump_framing_and_large_events():
    client, server = ClientConnection("repl", "replpass"), _server()
    _pump(client, server)
    client.binlog_dump("f.000001", 4, 9)
    server.receive_data(client.data_to_send())
    server.next_event()
    server.start_dump()
    small, big = b"\x01" * 30, b"\x02" * (0xFFFFFF + 10)
    server.send_events([memoryview(small), big, small])
    client.receive_data(server.data_to_send())
    packets = client.read_binlog_packets()
    assert [bytes(p) for p in packets] == [b"\x00" + small, b"\x00" + big, b"\x00" + small]


def test_semi_sync_framing_never_asks_for_an_ack():
    client, server = ClientConnection("repl", "replpass"), _server()
    _pump(client, server)
    client.binlog_dump("f.000001", 4, 9)
    server.receive_data(client.data_to_send())
    server.next_event()
    server.start_dump()
    server.semi_sync = True
    server.send_events([b"\x05" * 25])
    client.receive_data(server.data_to_send())
    assert bytes(client.read_binlog_packets()[0]) == b"\x00\xef\x00" + b"\x05" * 25


def _dumping(semi_sync: bool = False) -> proto.ServerConnection:
    """A server whose client asked for a dump (its reply packets start at sequence id 1)."""
    client, server = ClientConnection("repl", "replpass"), _server()
    _pump(client, server)
    client.binlog_dump("f.000001", 4, 9)
    server.receive_data(client.data_to_send())
    server.next_event()
    server.start_dump()
    server.semi_sync = semi_sync
    server.data_to_send()
    return server


def _packet(payload: bytes, seq: int) -> bytes:
    """One packet made by hand (u24 length, sequence id, payload), for payloads under 16 MB."""
    return len(payload).to_bytes(3, "little") + bytes((seq,)) + payload


def test_semi_sync_acks_restart_the_numbering():
    # semisync_master.cc: 00 ef 01 on the event the primary waits for, then flush_net numbers
    # again from 1 (the replica's ACK took 0).
    server = _dumping(semi_sync=True)
    events = [b"\x01" * 20, b"\x02" * 21, b"\x03" * 22]
    server.send_events(events, [False, True, False])
    assert server.data_to_send() == (_packet(b"\x00\xef\x00" + events[0], 1) + _packet(b"\x00\xef\x01" + events[1], 2)
                                     + _packet(b"\x00\xef\x00" + events[2], 1))
    assert server.sequence_id == 2
    plain = _dumping()
    with pytest.raises(proto.ProtocolError):
        plain.send_events(events, [True, False, False])  # only a semi-sync replica is asked for ACKs


def test_a_block_framed_outside_moves_the_connections_sequence_id():
    server = _dumping()
    start = server.sequence_id
    block = _packet(b"\x00" + b"\x07" * 30, start) + _packet(b"\x00" + b"\x08" * 31, (start + 1) & 0xFF)
    server.send_framed(block, 2)
    server.send_events([b"\x09" * 32])
    assert server.data_to_send() == block + _packet(b"\x00" + b"\x09" * 32, (start + 2) & 0xFF)
    with pytest.raises(proto.ProtocolError):  # numbered from another id than the connection's
        server.send_framed(_packet(b"\x00" + b"\x07" * 30, (server.sequence_id + 5) & 0xFF), 1)


def test_an_event_streamed_in_pieces_is_the_packet_send_events_makes():
    event = bytes(range(256)) * 40
    whole, pieces = _dumping(), _dumping()
    whole.send_events([event, b"\x01" * 19])
    pieces.start_event(len(event))
    for at in range(0, len(event), 4096):
        pieces.send_event_part(event[at : at + 4096])
    pieces.send_events([b"\x01" * 19])
    assert pieces.data_to_send() == whole.data_to_send()
    pieces.start_event(100)
    pieces.send_event_part(b"\x00" * 60)
    with pytest.raises(proto.ProtocolError):  # no packet in the middle of an event
        pieces.send_events([b"\x01" * 19])
    with pytest.raises(proto.ProtocolError):  # nor more bytes than it has
        pieces.send_event_part(b"\x00" * 41)
    with pytest.raises(ValueError):  # one packet only: under 16 MB with its 00
        _dumping().start_event(0xFFFFFE)


def test_a_refusal_before_the_greeting_is_packet_0():
    data = proto.ServerConnection.refusal_before_greeting(1040, "Too many connections", "08004")
    assert data == _packet(b"\xff" + (1040).to_bytes(2, "little") + b"#08004Too many connections", 0)


def test_malformed_command_gets_an_error_and_the_session_goes_on():
    client, server = ClientConnection("repl", "replpass"), _server()
    _pump(client, server)
    data, _ = frame(b"\x12\x01", 0)  # COM_BINLOG_DUMP with 1 byte of body
    server.receive_data(data)
    assert server.next_event() is proto_events.NEED_DATA
    reader = PacketReader()
    reader.check_seq = False
    reader.feed(server.data_to_send())
    assert parse_err(reader.next_packet()).code == ER_MALFORMED_PACKET
    client.ping()
    server.receive_data(client.data_to_send())
    assert server.next_event() == proto_events.Ping()


def test_tls_required_refuses_plain_clients():
    client, server = ClientConnection("repl", "replpass"), _server(tls_available=True, tls_required=True)
    with pytest.raises(AuthenticationError, match="3159"):
        _pump(client, server)


def test_client_full_caching_sha2_authentication_over_rsa():
    """The path a MySQL 8 primary takes when its cache is cold and TLS is off: 01 04, ask for the
    public key (02), receive it, send the RSA-encrypted password."""
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import padding, rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    scramble = bytes(range(65, 85))
    caps = 0x00FFF7FF & ~(1 << 11)  # everything but SSL
    greeting, _ = frame(build_greeting("8.4.0", 1, scramble, caps, auth.CACHING_SHA2_PASSWORD), 0)
    client = ClientConnection("repl", "replpass")
    client.receive_data(greeting)
    assert client.next_event() is NEED_DATA
    response = client.data_to_send()
    assert response[3] == 1 and b"caching_sha2_password" in response
    step, _ = frame(b"\x01\x04", 2)
    client.receive_data(step)
    assert client.next_event() is NEED_DATA
    assert client.data_to_send()[3:] == b"\x03\x02"  # seq 3: request public key
    key_packet, _ = frame(b"\x01" + pem, 4)
    client.receive_data(key_packet)
    assert client.next_event() is NEED_DATA
    sealed = client.data_to_send()
    assert sealed[3] == 5
    plain = key.decrypt(sealed[4:], padding.OAEP(mgf=padding.MGF1(hashes.SHA1()), algorithm=hashes.SHA1(), label=None))
    assert bytes(a ^ b for a, b in zip(plain, scramble * 2)) == b"replpass\x00"
    ok, _ = frame(b"\x00\x00\x00\x02\x00\x00\x00", 6)
    client.receive_data(ok)
    assert isinstance(client.next_event(), Connected)
    assert struct.unpack("<I", response[4:8])[0] & CLIENT_PROTOCOL_41


KEY_PAIR = auth.new_rsa_key_pair()


def test_caching_sha2_full_authentication_over_rsa_then_the_fast_path():
    cache: set[str] = set()
    server = _server(auth_plugin=auth.CACHING_SHA2_PASSWORD, sha2_cache=cache, rsa_key_pair=KEY_PAIR)
    client_event, server_event = _pump(ClientConnection("repl", "replpass"), server)  # asks for the key
    assert isinstance(client_event, Connected) and isinstance(server_event, proto_events.LoggedIn)
    assert cache == {"repl"}
    fast = _server(auth_plugin=auth.CACHING_SHA2_PASSWORD, sha2_cache=cache, rsa_key_pair=KEY_PAIR)
    greeting = fast.data_to_send()
    client = ClientConnection("repl", "replpass", server_public_key=KEY_PAIR[1])
    client.receive_data(greeting)
    assert client.next_event() is NEED_DATA
    fast.receive_data(client.data_to_send())
    assert isinstance(fast.next_event(), proto_events.LoggedIn)
    assert b"\x01\x03" in fast.data_to_send()  # the fast path: no full authentication this time


def test_caching_sha2_full_authentication_with_a_known_key_and_a_wrong_password():
    server = _server(auth_plugin=auth.CACHING_SHA2_PASSWORD, rsa_key_pair=KEY_PAIR)
    client_event, server_event = _pump(ClientConnection("repl", "replpass", server_public_key=KEY_PAIR[1]), server)
    assert isinstance(server_event, proto_events.LoggedIn)
    wrong = _server(auth_plugin=auth.CACHING_SHA2_PASSWORD, rsa_key_pair=KEY_PAIR)
    with pytest.raises(AuthenticationError, match="1045"):
        _pump(ClientConnection("repl", "wrong", server_public_key=KEY_PAIR[1]), wrong)
