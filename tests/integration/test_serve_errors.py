"""Clients the relay must refuse, each against a relay with a live MariaDB replica attached: the
refusal is the error a primary gives, and the replica keeps replicating through all of it."""

from __future__ import annotations

import os
import socket
import ssl
import struct
import subprocess
import threading
import time
from pathlib import Path

import pymysql
import pytest

from relay.protocol.client import NEED_DATA, ClientConnection, Connected, StartTLS
from relay.protocol.packets import PacketReader, ServerError, frame, is_err, parse_err
from relay.sandbox.binlogfiles import binlog_events, split_events
from relay.sandbox.mariadb import REPL_PASSWORD, REPL_USER, find_program
from relay.sandbox.polling import wait_for
from relay.sandbox.relayprocess import RelayProcess
from relay.sandbox.replication import FIRST_FILE, attach_replica, wait_caught_up
from tests.support.certs import make_certs
from tests.support.mariadb import MariaDB
from tests.support.replication import (
    RawClient,
    assert_healthy,
    dump_events,
)

ER_CON_COUNT_ERROR = 1040
ER_ACCESS_DENIED_ERROR = 1045
ER_MASTER_FATAL_ERROR_READING_BINLOG = 1236
ER_SECURE_TRANSPORT_REQUIRED = 3159


class Served:
    """A primary, the relay, and a replica of the relay that is caught up."""

    def __init__(self, mariadb_factory, relay_factory, replica_change: str = "", **relay_overrides) -> None:
        self.primary: MariaDB = mariadb_factory(server_id=1)
        self.replica: MariaDB = mariadb_factory(server_id=2)
        self.relay: RelayProcess = relay_factory("relay", self.primary.port, **relay_overrides)
        self.primary.execute_many(["CREATE DATABASE app", "CREATE TABLE app.t (id INT PRIMARY KEY AUTO_INCREMENT,"
                                   " note VARCHAR(100))"])
        attach_replica(self.replica, self.relay.port, extra_change=replica_change)
        self.writes = 0
        self.still_replicates("attached")

    def still_replicates(self, after: str) -> None:
        """A new write on the primary reaches the replica, which reports no error."""
        self.writes += 1
        self.primary.sql("INSERT INTO app.t (note) VALUES (%s)", after)
        wait_caught_up(self.primary, self.replica, timeout=30)
        assert self.replica.sql("SELECT COUNT(*) FROM app.t WHERE note = %s", after) == [(1,)], after
        assert self.replica.sql("SELECT COUNT(*) FROM app.t") == [(self.writes,)]
        assert_healthy(self.replica)
        assert self.relay.alive()

    def connect(self, **options) -> pymysql.connections.Connection:
        settings = {"host": "127.0.0.1", "port": self.relay.port, "user": REPL_USER, "password": REPL_PASSWORD,
                    "connect_timeout": 10}
        return pymysql.connect(**{**settings, **options})

    def finish(self) -> None:
        assert self.relay.stop() == 0
        assert "Traceback" not in self.relay.log_text()


def _refused_with(code: int, connect) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(pymysql.err.OperationalError) as refused:
        connect().close()
    assert refused.value.args[0] == code, refused.value.args
    return str(refused.value.args[1])


def test_bad_logins_get_1045(mariadb_factory, relay_factory):
    served = Served(mariadb_factory, relay_factory)
    message = _refused_with(ER_ACCESS_DENIED_ERROR, lambda: served.connect(password="wrong"))
    assert "repl" in message
    served.still_replicates("after a wrong password")
    _refused_with(ER_ACCESS_DENIED_ERROR, lambda: served.connect(user="nobody"))
    served.still_replicates("after an unknown user")
    _refused_with(ER_ACCESS_DENIED_ERROR, lambda: served.connect(password=""))
    served.still_replicates("after an empty password")
    served.connect().close()  # and the right password still works
    served.finish()


def test_tls_required(mariadb_factory, relay_factory, tmp_path):
    certs = make_certs(tmp_path / "certs")
    served = Served(mariadb_factory, relay_factory,
                    replica_change=f"MASTER_SSL = 1, MASTER_SSL_CA = '{certs.ca}', MASTER_SSL_VERIFY_SERVER_CERT = 1",
                    listen={"ssl": {"cert": str(certs.cert), "key": str(certs.key), "require": True},
                            "handshake_timeout": 5})
    assert served.replica.slave_status()["Master_SSL_Allowed"] == "Yes"  # the replica itself came over TLS

    _refused_with(ER_SECURE_TRANSPORT_REQUIRED, lambda: served.connect(ssl_disabled=True))
    served.still_replicates("after a pymysql client without TLS")
    cli = subprocess.run([find_program("mariadb"), "--skip-ssl", "--host=127.0.0.1", f"--port={served.relay.port}",
                          f"--user={REPL_USER}", f"--password={REPL_PASSWORD}", "-e", "SELECT 1"],
                         capture_output=True, text=True, timeout=30)
    assert cli.returncode != 0 and "3159" in cli.stderr, (cli.returncode, cli.stdout, cli.stderr)
    served.still_replicates("after the mariadb CLI with --skip-ssl")

    conn = served.connect(ssl={"ca": str(certs.ca)})
    try:
        assert isinstance(conn._sock, ssl.SSLSocket)  # noqa: SLF001 - the only way pymysql tells
        with conn.cursor() as cur:
            cur.execute("SELECT @@global.binlog_checksum")
            assert cur.fetchall() == (("CRC32",),)
    finally:
        conn.close()
    served.still_replicates("after a TLS client")
    served.finish()


def _tls_login_in_one_segment(port: int, ca: Path) -> bool:
    """Log in over TLS with the SSLRequest and the TLS ClientHello in one send(), as a client does
    that writes both at once (PyMySQL does: write_packet(SSLRequest), then wrap_socket). Returns
    whether the connection is TLS when logged in."""
    context = ssl.create_default_context(cafile=str(ca))
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    conn = ClientConnection(REPL_USER, REPL_PASSWORD, tls="required")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        def receive() -> bytes:
            data = sock.recv(1 << 16)
            if not data:
                raise ConnectionError("the relay closed the connection")
            return data

        while (event := conn.next_event()) is NEED_DATA:
            conn.receive_data(receive())
        assert isinstance(event, StartTLS), event
        try:
            tls.do_handshake()
        except ssl.SSLWantReadError:
            pass
        sock.sendall(conn.data_to_send() + outgoing.read())  # SSLRequest + ClientHello together
        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                if outgoing.pending:
                    sock.sendall(outgoing.read())
                incoming.write(receive())
        if outgoing.pending:
            sock.sendall(outgoing.read())
        conn.tls_started()
        tls.write(conn.data_to_send())
        sock.sendall(outgoing.read())
        while True:
            try:
                conn.receive_data(tls.read(1 << 16))
            except ssl.SSLWantReadError:
                incoming.write(receive())
                continue
            event = conn.next_event()
            if event is not NEED_DATA:
                assert isinstance(event, Connected), event
                return event.tls


def test_tls_login_when_the_client_hello_comes_with_the_ssl_request(mariadb_factory, relay_factory, tmp_path):
    certs = make_certs(tmp_path / "certs")
    served = Served(mariadb_factory, relay_factory,
                    listen={"ssl": {"cert": str(certs.cert), "key": str(certs.key)}, "handshake_timeout": 5})
    assert _tls_login_in_one_segment(served.relay.port, certs.ca)
    served.still_replicates("after a TLS login in one segment")
    # PyMySQL's default (TLS when the server offers it, no CA) writes both back to back
    for _ in range(3):
        conn = served.connect()
        try:
            assert isinstance(conn._sock, ssl.SSLSocket)  # noqa: SLF001
        finally:
            conn.close()
    served.still_replicates("after PyMySQL clients with default TLS settings")
    served.finish()


def _dump_refusal(port: int, file: str, position: int, connect_state: str | None = None) -> ServerError:
    with RawClient(port) as client:
        client.query("SET @master_binlog_checksum = @@global.binlog_checksum")
        client.query("SET @mariadb_slave_capability = 4")
        if connect_state is not None:
            client.query(f"SET @slave_connect_state = '{connect_state}'")
        client.start_dump(file, position, server_id=77)
        reply = client.dump_reply()
    assert isinstance(reply, ServerError), \
        f"dump of {file}:{position} ({connect_state}) was not refused: {reply[:40]!r}"
    assert reply.code == ER_MASTER_FATAL_ERROR_READING_BINLOG, reply
    return reply


def test_impossible_dumps_get_1236(mariadb_factory, relay_factory):
    served = Served(mariadb_factory, relay_factory)
    port = served.relay.port
    file, end = served.primary.master_status()
    assert file == FIRST_FILE

    missing = _dump_refusal(port, "mysql-bin.000099", 4)
    assert "Could not find first log file name" in missing.message, missing
    served.still_replicates("after a dump of a missing file")
    past_end = _dump_refusal(port, file, end + 1000)
    assert "impossible position" in past_end.message, past_end
    served.still_replicates("after a dump past the end")
    # inside a row event: the start of the last event of the primary's file, plus 10 bytes
    starts, offset = [], 4
    for event in binlog_events(served.primary.binlog_path(file)):
        starts.append((offset, event.type))
        offset += event.length
    inside = next(start for start, etype in reversed(starts) if etype in (23, 30)) + 10
    _dump_refusal(port, file, inside)
    served.still_replicates("after a dump from the middle of an event")
    gtid = _dump_refusal(port, "", 4, connect_state="0-1-99999")
    assert "0-1-99999" in gtid.message, gtid
    served.still_replicates("after a GTID dump of a GTID not stored")
    # the valid dump just before the end and at the very end are fine (EOF, not an error)
    with RawClient(port) as client:
        client.query("SET @master_binlog_checksum = @@global.binlog_checksum")
        client.start_dump(file, served.primary.master_status()[1], server_id=77, flags=0x01)
        assert client.read_dump()  # a fake ROTATE and the FDE, then EOF
    # a real replica asking for a missing file stops its IO thread with the relay's 1236
    lost = mariadb_factory(server_id=5)
    attach_replica(lost, port, log_file="mysql-bin.000099", log_pos=4)
    status = wait_for(lambda: (s := lost.slave_status())["Slave_IO_Running"] == "No" and s, 30,
                      "a replica asking for a missing file kept trying")
    assert int(status["Last_IO_Errno"]) == ER_MASTER_FATAL_ERROR_READING_BINLOG, status["Last_IO_Error"]
    assert "Could not find first log file name" in status["Last_IO_Error"], status["Last_IO_Error"]
    served.still_replicates("after a replica asking for a missing file")
    served.finish()


def test_max_connections(mariadb_factory, relay_factory):
    served = Served(mariadb_factory, relay_factory, listen={"max_connections": 3})
    # the replica's IO thread holds one connection; two more fill the relay up
    held = [served.connect(), served.connect()]
    try:
        message = _refused_with(ER_CON_COUNT_ERROR, lambda: served.connect())
        assert "Too many connections" in message
        served.still_replicates("while full")
        for _ in range(50):  # refused clients that reset the connection at once
            with socket.create_connection(("127.0.0.1", served.relay.port), timeout=10) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        served.still_replicates("after refused clients that reset at once")
        held.pop().close()
        conn = wait_for(lambda: served.connect(), 10, "a slot did not come free",
                        ignore=(pymysql.err.OperationalError,))
        held.append(conn)
        _refused_with(ER_CON_COUNT_ERROR, lambda: served.connect())
    finally:
        for conn in held:
            conn.close()
    served.still_replicates("after the connections closed")
    served.finish()


def test_silent_client_is_closed_after_the_handshake_timeout(mariadb_factory, relay_factory):
    served = Served(mariadb_factory, relay_factory, listen={"handshake_timeout": 1})
    with socket.create_connection(("127.0.0.1", served.relay.port), timeout=10) as sock:
        started = time.monotonic()
        greeting = sock.recv(1 << 16)
        assert greeting[4] == 10, greeting  # protocol version 10: the relay greets at once
        rest = sock.recv(1 << 16)  # then we say nothing, and the relay hangs up
        elapsed = time.monotonic() - started
    assert rest == b"", rest
    assert 0.8 <= elapsed <= 5, elapsed
    served.still_replicates("after a silent client")
    served.finish()


def _raw_command(client: RawClient, payload: bytes) -> bytes:
    """Send payload as a command packet (seq 0), return the reply packet's payload."""
    data, _ = frame(payload, 0)
    client.send_raw(data)
    reader = PacketReader()
    reader.check_seq = False
    while (packet := reader.next_packet()) is None:
        chunk = client.recv_raw()
        if not chunk:
            raise ConnectionError("the relay closed the connection")
        reader.feed(chunk)
    return bytes(packet)


def test_malformed_packets_get_an_error(mariadb_factory, relay_factory):
    served = Served(mariadb_factory, relay_factory)
    garbage = [
        b"\x12\x01",  # COM_BINLOG_DUMP cut short
        b"\x15\x4d",  # COM_REGISTER_SLAVE cut short
        b"\xee" + os.urandom(40),  # no such command
        b"",  # an empty packet
    ]
    for payload in garbage:
        with RawClient(served.relay.port) as client:
            reply = _raw_command(client, payload)
            assert is_err(reply), f"{payload!r} -> {reply!r}"
            assert parse_err(reply).code in (1047, 1835), parse_err(reply)
            # the session survives an ERR like a primary's does
            assert client.query("SELECT 1").rows == (("1",),)
        served.still_replicates(f"after {payload[:4]!r}")
    # a packet out of sequence (seq 7 where a command has 0): the relay hangs up, as a primary does
    # ("Got packets out of order"), possibly after an ERR, and stays up for everyone else
    with RawClient(served.relay.port) as client:
        client.send_raw(b"\x05\x00\x00\x07" + os.urandom(5))
        client.sock.settimeout(5)
        received = b""
        try:
            while chunk := client.recv_raw():
                received += chunk
        except ConnectionResetError:
            pass
        assert received == b"" or is_err(received[4:]), received
    served.still_replicates("after a packet out of sequence")
    served.finish()


def test_replica_with_the_relays_server_id_is_refused(mariadb_factory, relay_factory):
    served = Served(mariadb_factory, relay_factory)
    same = mariadb_factory(server_id=1001)  # the relay's own server_id in the test config
    attach_replica(same, served.relay.port)
    status = wait_for(lambda: (s := same.slave_status())["Slave_IO_Running"] == "No" and s, 30,
                      "a replica with the relay's server_id kept replicating")
    assert int(status["Last_IO_Errno"]) != 0, status
    assert same.sql("SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = 'app'") == [(0,)]
    served.still_replicates("after a replica with the relay's server_id")
    # the relay itself refuses it too, whatever the replica checks on its side
    with RawClient(served.relay.port) as client:
        client.query("SET @master_binlog_checksum = @@global.binlog_checksum")
        with pytest.raises(ServerError) as register:
            client.register_slave(1001)
        assert register.value.code == ER_MASTER_FATAL_ERROR_READING_BINLOG
    with RawClient(served.relay.port) as client:
        client.query("SET @master_binlog_checksum = @@global.binlog_checksum")
        client.start_dump(FIRST_FILE, 4, server_id=1001)
        reply = client.dump_reply()
        assert isinstance(reply, ServerError) and reply.code == ER_MASTER_FATAL_ERROR_READING_BINLOG, reply
    served.still_replicates("after raw clients with the relay's server_id")
    served.finish()


def test_a_second_dump_with_the_same_server_id_ends_the_first(mariadb_factory, relay_factory):
    served = Served(mariadb_factory, relay_factory)
    with RawClient(served.relay.port) as first, RawClient(served.relay.port) as second:
        for client in (first, second):
            client.query("SET @master_binlog_checksum = @@global.binlog_checksum")
        first.start_dump(FIRST_FILE, 4, server_id=77)
        assert first.next_dump_packets()  # streaming
        wait_for(lambda: "dump for server_id 77 " in served.relay.log_text(), 10, "first dump not logged")
        second.start_dump(FIRST_FILE, 4, server_id=77)
        assert second.next_dump_packets()
        # the first connection ends: drain what was sent, then EOF or an error packet, then close
        first.sock.settimeout(10)
        ended = False
        try:
            while True:
                packets = first.next_dump_packets()
                if any(p[0] in (0xFE, 0xFF) and len(p) < 0x100 for p in packets):
                    ended = True
                    break
        except ConnectionError:
            ended = True
        assert ended
    served.still_replicates("after two dumps with one server_id")
    served.finish()


def _send_huge_packet(port: int, size: int, after_login: bool) -> tuple[bytes, str, int]:
    """Send one packet of ``size`` bytes as a client does (16 MB chunks with consecutive sequence
    ids), before the login (in place of the handshake response) or after it (as a command), while
    a thread reads what the server answers. Returns (the first packet of the answer, how the
    connection ended: "closed" or "open", bytes pushed before the server stopped taking them)."""
    client = RawClient(port) if after_login else None
    sock = client.sock if client else socket.create_connection(("127.0.0.1", port), timeout=10)
    with sock:
        if client is None:
            sock.recv(65536)  # the greeting (sequence id 0)
        received: list[bytes] = []
        ended: list[str] = []

        def read() -> None:
            # Read while sending: a server that closes with unread bytes resets the connection,
            # and an answer still unread on this side could be lost with it.
            try:
                while data := sock.recv(65536):
                    received.append(data)
                ended.append("closed")
            except ConnectionResetError:
                ended.append("closed")
            except OSError:  # the socket timeout: the server kept the connection open
                ended.append("open")

        reader_thread = threading.Thread(target=read)
        reader_thread.start()
        seq = 0 if client else 1
        pushed = 0
        body = bytes(0xFFFFFF)
        try:
            left = size
            while True:
                length = min(left, 0xFFFFFF)
                sock.sendall(struct.pack("<I", length | ((seq & 0xFF) << 24)) + body[:length])
                pushed += length
                left -= length
                seq += 1
                if length < 0xFFFFFF:
                    break
        except OSError:
            pass  # the server closed the connection while we were still sending
        reader_thread.join(30)
        assert ended, "the reader did not finish"
        reader = PacketReader()
        reader.check_seq = False
        reader.feed(b"".join(received))
        first = reader.next_packet()
        return (bytes(first) if first is not None else b""), ended[0], pushed


def _refusal(reply: bytes) -> tuple[int, str, str]:
    assert is_err(reply), reply[:40]
    error = parse_err(reply)
    return error.code, error.sqlstate, error.message


ER_NET_PACKET_TOO_LARGE = (1153, "08S01", "Got a packet bigger than 'max_allowed_packet' bytes")


@pytest.mark.parametrize("after_login", [False, True], ids=["before-login", "after-login"])
def test_a_packet_over_the_limit_is_refused_before_it_is_buffered(mariadb_factory, relay_factory, after_login):
    # before the login the limit is 16K; after it listen.max_packet (1M here)
    served = Served(mariadb_factory, relay_factory, listen={"max_packet": "1M"})
    rss_before = served.relay.peak_rss_bytes()
    reply, ended, pushed = _send_huge_packet(served.relay.port, 64 << 20, after_login)
    assert _refusal(reply) == ER_NET_PACKET_TOO_LARGE and ended == "closed"
    assert pushed < 64 << 20  # refused from the header: the rest was never read
    grown = served.relay.peak_rss_bytes() - rss_before
    assert grown < 8 << 20, f"the relay's peak RSS grew by {grown / 2**20:.1f} MiB"
    served.still_replicates(f"after a 64 MiB packet {'after' if after_login else 'before'} the login")
    served.finish()
    assert "over the limit of" in served.relay.log_text()


def test_mariadb_refuses_an_oversized_packet_as_the_relay_does(mariadb_factory, relay_factory):
    """The primary is the oracle: mariadbd with its default max_allowed_packet (16M) and the relay
    with its default listen.max_packet (16M) get the same 64 MiB packet."""
    primary = mariadb_factory(server_id=1, extra_args=["--max-allowed-packet=16M"])
    assert primary.sql("SELECT @@GLOBAL.max_allowed_packet") == [(16 << 20,)]
    relay = relay_factory("relay", primary.port)
    # Before the login: the same error, and both close. (mariadbd reads up to max_allowed_packet
    # first, so its reply comes a chunk later; the relay refuses at 16K, from the first header.)
    replies = {name: _send_huge_packet(port, 64 << 20, after_login=False)
               for name, port in (("primary", primary.port), ("relay", relay.port))}
    for name, (reply, ended, _) in replies.items():
        assert (_refusal(reply), ended) == (ER_NET_PACKET_TOO_LARGE, "closed"), name
    # After the login both limits are 16M: the same reply, byte for byte (sequence id included).
    replies = {name: _send_huge_packet(port, 64 << 20, after_login=True)
               for name, port in (("primary", primary.port), ("relay", relay.port))}
    assert replies["relay"][:2] == replies["primary"][:2]
    assert (_refusal(replies["relay"][0]), replies["relay"][1]) == (ER_NET_PACKET_TOO_LARGE, "closed")


def _dump_outcome(port: int, file: str, position: int) -> tuple[object, ...]:
    """An ERR's code and text, or how many events a non-blocking dump sent."""
    try:
        return ("events", len(dump_events(port, file, position, 77)))
    except ServerError as refused:
        return (refused.code, refused.message)


def test_refused_starts_get_the_primarys_own_words(mariadb_factory, relay_factory):
    """A dump from a position that is not an event's start: the primary reads an event header there
    and refuses with what that read met (bogus, too large, truncated), naming where; the relay
    mirrors its files, so every such start (each offset of the first events, of the end of a closed
    file and of the current one) gets the same code and text from both, as does a missing file and a
    position past the end, named or not.  Where the primary would send the bytes there as events
    (their lengths happen to chain up to the end), the relay refuses them: the one difference."""
    served = Served(mariadb_factory, relay_factory)
    for row in range(3):
        served.still_replicates(f"row {row} of the closed file")
    served.primary.sql("FLUSH BINARY LOGS")
    served.still_replicates("the current file has events")
    (closed, closed_size), (current, current_size) = served.primary.binlog_files()[-2:]
    starts = {name: set(_event_starts(served.primary.binlog_path(name).read_bytes()))
              for name in (closed, current)}
    asked = [(closed, position) for position in [*range(5, 420), *range(closed_size - 40, closed_size)]]
    asked += [(current, position) for position in range(5, min(current_size, 300))]
    asked = [(name, position) for name, position in asked if position not in starts[name]]
    asked += [("mysql-bin.000099", 4), (closed, closed_size + 1), ("", 10 ** 9), (closed, 2)]
    differ, sent_by_the_primary = [], 0
    for name, position in asked:
        primary, relay = _dump_outcome(served.primary.port, name, position), _dump_outcome(served.relay.port, name,
                                                                                          position)
        if primary[0] == "events":  # the primary sent the bytes there as events: the relay refuses them
            sent_by_the_primary += 1
            assert relay[0] == ER_MASTER_FATAL_ERROR_READING_BINLOG, (name, position, relay)
        elif primary != relay:
            differ.append((name, position, primary, relay))
    assert not differ, '\n'.join(map(repr, differ[:6]))
    assert sent_by_the_primary < len(asked) // 10
    served.still_replicates("after the refused dumps")
    served.finish()


def _event_starts(data: bytes) -> list[int]:
    starts, offset = [], 4
    for event in split_events(data[4:]):
        starts.append(offset)
        offset += event.length
    return starts
