"""The sans-IO client against bytes captured from a real MariaDB 10.11 (tests/fixtures/wire)."""

from pathlib import Path

import pytest

from relay.protocol import auth
from relay.protocol.client import NEED_DATA, AuthenticationError, ClientConnection, Connected
from relay.protocol.handshake import parse_greeting
from relay.protocol.packets import PacketReader, ServerError, build_err, frame
from relay.protocol.resultset import ResultSet

WIRE = Path(__file__).parent.parent / "fixtures" / "wire"


def _first_packet(data: bytes) -> bytes:
    reader = PacketReader()
    reader.feed(data)
    return bytes(reader.next_packet())


def test_greeting_from_mariadb():
    greeting = parse_greeting(_first_packet((WIRE / "greeting_and_auth.bin").read_bytes()))
    assert greeting.is_mariadb
    assert greeting.server_version.startswith("5.5.5-10.11")
    assert len(greeting.scramble) == 20
    assert greeting.auth_plugin == auth.NATIVE_PASSWORD


def _logged_in() -> ClientConnection:
    conn = ClientConnection("repl", "replpass")
    conn.receive_data((WIRE / "greeting_and_auth.bin").read_bytes())
    event = conn.next_event()
    assert isinstance(event, Connected)
    response = conn.data_to_send()
    assert response[3] == 1  # HandshakeResponse is packet 1
    assert b"repl\x00" in response and b"mysql_native_password\x00" in response
    return conn


def test_login_and_result_sets():
    conn = _logged_in()
    conn.query("SHOW VARIABLES LIKE 'server_id'")
    assert conn.data_to_send()[4:] == b"\x03SHOW VARIABLES LIKE 'server_id'"
    conn.receive_data((WIRE / "server_id.bin").read_bytes())
    result = conn.next_event()
    assert isinstance(result, ResultSet)
    assert result.columns == ("Variable_name", "Value")
    assert result.rows == (("server_id", "7"),)
    conn.query("SELECT @master_binlog_checksum")
    conn.receive_data((WIRE / "select_checksum.bin").read_bytes())
    assert conn.next_event().rows == (("CRC32",),)


def test_result_set_arriving_byte_by_byte():
    conn = _logged_in()
    conn.query("SHOW VARIABLES LIKE 'server_id'")
    data = (WIRE / "server_id.bin").read_bytes()
    for index in range(len(data) - 1):
        conn.receive_data(data[index : index + 1])
        assert conn.next_event() is NEED_DATA
    conn.receive_data(data[-1:])
    assert conn.next_event().rows == (("server_id", "7"),)


def test_access_denied_is_an_authentication_error():
    conn = ClientConnection("repl", "wrong")
    data = (WIRE / "greeting_and_auth.bin").read_bytes()
    greeting, _ = frame(_first_packet(data), 0)
    conn.receive_data(greeting)
    assert conn.next_event() is NEED_DATA
    denied, _ = frame(build_err(1045, "Access denied for user 'repl'@'localhost' (using password: YES)",
                                "28000"), 2)
    conn.receive_data(denied)
    with pytest.raises(AuthenticationError, match="1045"):
        conn.next_event()


def test_command_error_leaves_connection_usable():
    conn = _logged_in()
    conn.query("SELECT * FROM nope")
    conn.data_to_send()
    error, _ = frame(build_err(1146, "Table 'nope' doesn't exist", "42S02"), 1)
    conn.receive_data(error)
    with pytest.raises(ServerError) as caught:
        conn.next_event()
    assert caught.value.code == 1146
    conn.query("SELECT @master_binlog_checksum")
    conn.receive_data((WIRE / "select_checksum.bin").read_bytes())
    assert conn.next_event().rows == (("CRC32",),)


def test_native_password_token_verifies():
    scramble = bytes(range(1, 21))
    stored = __import__("hashlib").sha1(__import__("hashlib").sha1(b"secret").digest()).digest()
    token = auth.native_password_token(b"secret", scramble)
    assert auth.native_password_check(token, scramble, stored)
    assert not auth.native_password_check(auth.native_password_token(b"other", scramble), scramble, stored)


def test_caching_sha2_token_verifies():
    import hashlib

    scramble = bytes(range(30, 50))
    stored = hashlib.sha256(hashlib.sha256(b"s3cret").digest()).digest()
    assert auth.caching_sha2_check(auth.caching_sha2_token(b"s3cret", scramble), scramble, stored)
    assert not auth.caching_sha2_check(auth.caching_sha2_token(b"nope", scramble), scramble, stored)


def test_rsa_full_authentication_decrypts_to_password():
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import padding, rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.public_key().public_bytes(serialization.Encoding.PEM,
                                        serialization.PublicFormat.SubjectPublicKeyInfo)
    scramble = bytes(range(60, 80))
    sealed = auth.rsa_encrypt_password(b"pw", scramble, pem)
    plain = key.decrypt(sealed, padding.OAEP(mgf=padding.MGF1(hashes.SHA1()), algorithm=hashes.SHA1(),
                                             label=None))
    assert bytes(a ^ b for a, b in zip(plain, scramble)) == b"pw\x00"
