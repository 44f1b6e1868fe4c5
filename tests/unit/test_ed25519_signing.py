"""MariaDB's ed25519 authentication without a server: the signing arithmetic against RFC 8032 and
against PyMySQL (libsodium underneath), and the relay's sans-IO server and client logging in to
each other with client_ed25519.  tests/integration/test_ed25519.py has the real servers."""

import os

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pymysql import _auth as pymysql_auth

from relay.protocol import auth, ed25519
from relay.protocol import events as proto_events
from relay.protocol import server as proto
from relay.protocol.client import AuthenticationError, ClientConnection, Connected
from relay.protocol.handshake import SERVER_CAPABILITIES, build_greeting, parse_auth_switch
from relay.protocol.packets import PacketReader, ProtocolError, frame
from tests.unit.test_server_protocol import _pump

# RFC 8032 7.1, TEST 1.  MariaDB hashes the password where RFC 8032 hashes a 32-byte seed, so for
# a 32-byte password the two derivations are the same and the RFC's vector applies as it is.
RFC_SEED = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
RFC_PUBLIC = bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
RFC_SIGNATURE = bytes.fromhex("e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc6"
                              "1e39701cf9b46bd25bf5f0595bbe24655141438e7a100b")


def test_rfc8032_vector():
    assert ed25519.public_key(RFC_SEED) == RFC_PUBLIC
    assert ed25519.sign(RFC_SEED, b"") == RFC_SIGNATURE
    assert ed25519.verify(RFC_PUBLIC, b"", RFC_SIGNATURE)


def test_32_byte_passwords_sign_as_rfc8032_seeds():
    for _ in range(5):
        seed, message = os.urandom(32), os.urandom(32)
        assert ed25519.sign(seed, message) == Ed25519PrivateKey.from_private_bytes(seed).sign(message)


@pytest.mark.parametrize("password", [b"", b"s3cret", "pässwörd with spaces".encode(), os.urandom(200)],
                         ids=["empty", "ascii", "utf-8", "200-random-bytes"])
def test_signatures_equal_pymysqls(password):
    """PyMySQL's client_ed25519 (PyNaCl's libsodium group operations) signs the same bytes:
    Ed25519 signatures are deterministic."""
    for _ in range(3):
        nonce = os.urandom(auth.ED25519_NONCE_BYTES)
        assert auth.ed25519_token(password, nonce) == pymysql_auth.ed25519_password(password, nonce)


def test_verify_roundtrip_and_refusals():
    key, nonce = ed25519.public_key(b"right"), os.urandom(32)
    signature = auth.ed25519_token(b"right", nonce)
    assert auth.ed25519_check(signature, nonce, key)
    assert not auth.ed25519_check(auth.ed25519_token(b"wrong", nonce), nonce, key)
    assert not auth.ed25519_check(signature, os.urandom(32), key)  # another nonce
    flipped = bytes([signature[0] ^ 1]) + signature[1:]
    assert not auth.ed25519_check(flipped, nonce, key)
    for bad in (b"", signature[:63], signature + b"\x00", bytes(64)):
        assert not auth.ed25519_check(bad, nonce, key)


def test_hash_form():
    text = auth.ed25519_password_hash("secret")
    assert len(text) == 43 and not text.endswith("=")
    assert auth.ed25519_key_of(text) == auth.ed25519_key_of(text + "=") == ed25519.public_key(b"secret")
    for bad in ("", text[:42], text + "==", "*" + text[1:], "A" * 42 + "E"):  # the last is not a curve point
        assert auth.ed25519_key_of(bad) is None


KEY = ed25519.public_key(b"edpass")
USERS = {
    "ed": proto.Credentials(None, None, KEY),
    "native": proto.Credentials(auth.native_hash_of(b"pw")),
}


def _server(**kwargs) -> proto.ServerConnection:
    return proto.ServerConnection(server_version="5.5.5-10.11.6-MariaDB-log", connection_id=7,
                                  peer_host="127.0.0.1", lookup_user=USERS.get, **kwargs)


@pytest.mark.parametrize("first_plugin", [auth.NATIVE_PASSWORD, auth.CACHING_SHA2_PASSWORD])
def test_ed25519_user_is_switched_and_logs_in(first_plugin):
    client_event, server_event = _pump(ClientConnection("ed", "edpass"), _server(auth_plugin=first_plugin))
    assert isinstance(client_event, Connected)
    assert isinstance(server_event, proto_events.LoggedIn) and server_event.user == "ed"


@pytest.mark.parametrize("password", ["wrong", ""])
def test_ed25519_wrong_password_gets_1045(password):
    refusal = r"1045.*Access denied for user 'ed'@'127.0.0.1' \(using password: YES\)"  # YES even for "", as MariaDB
    with pytest.raises(AuthenticationError, match=refusal):
        _pump(ClientConnection("ed", password), _server())


def _packets(data: bytes) -> list[bytes]:
    reader = PacketReader()
    reader.check_seq = False
    reader.feed(data)
    packets = []
    while (packet := reader.next_packet()) is not None:
        packets.append(bytes(packet))
    return packets


def test_the_switch_carries_exactly_the_nonce():
    """Clients take every byte after the plugin name as the nonce (PyMySQL signs them all,
    libmariadb wants exactly 32): no NUL after it, unlike a scramble."""
    client, server = ClientConnection("ed", "edpass"), _server()
    client.receive_data(server.data_to_send())
    client.next_event()
    server.receive_data(client.data_to_send())
    assert server.next_event() is proto_events.NEED_DATA
    (switch,) = _packets(server.data_to_send())
    request = parse_auth_switch(switch)
    assert request.plugin == auth.CLIENT_ED25519 and len(request.data) == auth.ED25519_NONCE_BYTES


def test_a_native_password_reply_to_the_switch_is_refused():
    """A client that answers the switch with something else than a signature (20 bytes of a
    mysql_native_password token) is refused, never let in through another plugin."""
    client, server = ClientConnection("ed", "edpass"), _server()
    client.receive_data(server.data_to_send())
    client.next_event()
    server.receive_data(client.data_to_send())
    server.next_event()
    server.data_to_send()
    token, _ = frame(auth.native_password_token(b"edpass", os.urandom(20)), 3)
    server.receive_data(token)
    refused = server.next_event()
    assert isinstance(refused, proto_events.LoginRefused) and refused.code == 1045


def _greeting() -> bytes:
    return frame(build_greeting("5.5.5-10.11.6-MariaDB-log", 1, os.urandom(20), SERVER_CAPABILITIES,
                                auth.NATIVE_PASSWORD), 0)[0]


@pytest.mark.parametrize("nonce", [bytes(31) + b"\x01", bytes(32), b"\x07" * 31 + b"\x00"],
                         ids=["ends-01", "zeros", "ends-00"])
def test_client_signs_the_whole_nonce(nonce):
    """A nonce ending with 00 is signed whole (a scramble's trailing NUL is not part of it)."""
    client = ClientConnection("ed", "edpass")
    client.receive_data(_greeting())
    client.next_event()
    client.data_to_send()
    switch = b"\xfe" + auth.CLIENT_ED25519.encode() + b"\x00" + nonce
    client.receive_data(frame(switch, 2)[0])
    client.next_event()
    (signature,) = _packets(client.data_to_send())
    assert ed25519.verify(KEY, nonce, signature)


def test_client_refuses_a_short_nonce():
    client = ClientConnection("ed", "edpass")
    client.receive_data(_greeting())
    client.next_event()
    client.data_to_send()
    client.receive_data(frame(b"\xfe" + auth.CLIENT_ED25519.encode() + b"\x00" + bytes(20) + b"\x00", 2)[0])
    with pytest.raises(ProtocolError, match="21-byte client_ed25519 nonce"):
        client.next_event()
