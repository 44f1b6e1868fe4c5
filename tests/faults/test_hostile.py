"""Hostile clients, while a real MariaDB replica replicates from the relay under a write load.

Every case is a raw TCP connection (many at once, from trio tasks in the test) doing one wrong thing at
one phase of the protocol:
- before the greeting: bytes sent before the relay has spoken;
- the greeting reply: the handshake response mutated (a flipped byte, a wrong sequence id, cut short,
  a header promising more than comes, trailing junk, an empty packet, random bytes);
- auth: a well-formed login with a wrong password or an unknown user (must get ERR 1045, never an OK);
- commands: logged in, random command bytes and bodies, wrong sequence ids, truncated packets;
- after the dump request: a valid COM_BINLOG_DUMP followed by junk, or a mutated dump request;
- a client that stops reading in the middle of a dump (a small receive window, never read);
- a packet header over the pre-login size cap, then a reset.
Before them: clients that connect and never speak (the relay must close them after handshake_timeout),
and a flood past max_connections (the extra ones refused with ERR 1040).

Throughout, the replica keeps replicating (checked every couple of seconds: still running, still
advancing), and at the end it holds every transaction exactly once; the relay's peak RSS stays within a
bound of where it was before the cases; nothing crashed the relay or logged a traceback. The ERR texts the
relay sent are saved next to its log for tests/faults/test_secrets.py.
"""

from __future__ import annotations

import random
import socket
import struct
import time
from collections import Counter
from collections.abc import Callable

import trio

from relay.protocol.client import NEED_DATA, ClientConnection, Connected
from relay.protocol.packets import ServerError, parse_err
from relay.sandbox.mariadb import REPL_PASSWORD, REPL_USER
from relay.sandbox.polling import wait_for
from relay.sandbox.replication import FIRST_FILE, attach_replica
from tests.faults.conftest import HOSTILE_CASES
from tests.support.faults import SequenceLoad, converged, scrape, sequence_counts
from tests.support.replication import RawClient, assert_healthy

MAX_CONNECTIONS = 64
WORKERS = 24  # cases at once (below max_connections, so they are not refused for being too many)
HANDSHAKE_TIMEOUT = 2.0
RSS_GROWTH_BOUND = 48 << 20  # the relay's peak RSS may grow by at most this over the whole run
COMMANDS = (0x00, 0x01, 0x02, 0x03, 0x04, 0x0E, 0x11, 0x12, 0x14, 0x15, 0x16, 0x17, 0x1A, 0x1E, 0x1F, 0x99, 0xFF)
PHASES = ("pre_greeting", "greeting_reply", "auth", "command", "after_dump", "stop_reading", "oversized_then_reset",
          "ssl_request_without_tls")
PHASE_WEIGHTS = (10, 30, 10, 30, 18, 2, 1, 1)
CLIENT_PROTOCOL_41, CLIENT_SSL, CLIENT_SECURE_CONNECTION = 0x200, 0x800, 0x8000

# What ends the relay today (found by this test): a client that sends a packet header over the pre-login
# size cap and resets the connection. test_oversized_packet_then_reset is the short reproduction.
def _frame(payload: bytes, seq: int) -> bytes:
    return struct.pack("<I", len(payload) | (seq << 24)) + payload


def _mutate(packet: bytes, rng: random.Random) -> bytes:
    """A broken version of one framed packet."""
    kind = rng.randrange(8)
    body = packet[4:]
    if kind == 0 and body:  # a flipped byte
        i = rng.randrange(len(body))
        return packet[:4] + body[:i] + bytes([body[i] ^ (1 << rng.randrange(8))]) + body[i + 1:]
    if kind == 1:  # a wrong sequence id
        return packet[:3] + bytes([(packet[3] + rng.randrange(1, 256)) & 0xFF]) + body
    if kind == 2:  # cut short
        return packet[:rng.randrange(1, len(packet))]
    if kind == 3:  # the header promises more than comes
        return struct.pack("<I", (len(body) + rng.randrange(1, 4096)) | (packet[3] << 24)) + body
    if kind == 4:  # trailing junk inside the packet
        return _frame(body + rng.randbytes(rng.randrange(1, 200)), packet[3])
    if kind == 5:  # an empty packet
        return _frame(b"", packet[3])
    if kind == 6:  # a huge length, a few bytes of it
        return struct.pack("<I", 0xFFFFFF | (packet[3] << 24)) + rng.randbytes(rng.randrange(0, 64))
    return rng.randbytes(rng.randrange(1, 300))  # not a packet at all


def _ssl_request() -> bytes:
    """The 32-byte SSLRequest a client sends after the greeting to switch to TLS."""
    flags = CLIENT_PROTOCOL_41 | CLIENT_SSL | CLIENT_SECURE_CONNECTION
    return _frame(struct.pack("<IIB", flags, 1 << 24, 45) + bytes(23), 1)


def _frames(data: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos + 4 <= len(data):
        size = int.from_bytes(data[pos:pos + 3], "little")
        if pos + 4 + size > len(data):
            break
        out.append(data[pos + 4:pos + 4 + size])
        pos += 4 + size
    return out


class Cases:
    def __init__(self, port: int, seed: int) -> None:
        self.port = port
        self.rng = random.Random(seed)
        self.done: Counter[str] = Counter()
        self.errors_seen: set[str] = set()
        self.bad_logins_accepted: list[str] = []
        self.connect_failures: Counter[str] = Counter()
        self.logins_refused: Counter[str] = Counter()

    async def _receive(self, stream: trio.SocketStream, seconds: float) -> bytes:
        with trio.move_on_after(seconds):
            try:
                return await stream.receive_some(65536)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                return b""
        return b""

    def _note_errors(self, data: bytes) -> None:
        for payload in _frames(data):
            if payload[:1] == b"\xff":
                try:
                    err = parse_err(payload)
                    self.errors_seen.add(f"{err.code} {err.message}")
                except Exception:  # noqa: BLE001 - a fragment that looks like an ERR: keep the bytes
                    self.errors_seen.add(payload.decode(errors="replace"))

    async def _login(self, stream: trio.SocketStream, conn: ClientConnection) -> None:
        while not isinstance(event := conn.next_event(), Connected):
            if out := conn.data_to_send():
                await stream.send_all(out)
            if event is NEED_DATA:
                data = await stream.receive_some(65536)
                if not data:
                    raise ConnectionError("closed during login")
                conn.receive_data(data)

    async def one(self, case: int) -> None:
        rng = random.Random(self.rng.getrandbits(64))
        phase = rng.choices(PHASES, PHASE_WEIGHTS)[0]
        received = b""
        try:
            stream = await trio.open_tcp_stream("127.0.0.1", self.port)
        except OSError as exc:
            self.connect_failures[f"{exc} ({exc.__cause__!r})"] += 1
            return
        async with stream:
            try:
                if phase == "stop_reading":
                    stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                if phase == "oversized_then_reset":  # a header over the pre-login cap, then an RST
                    await stream.send_all(struct.pack("<I", 0xFFFFFF | (1 << 24)))
                    await stream.receive_some(65536)
                    stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                elif phase == "ssl_request_without_tls":
                    await stream.receive_some(65536)
                    await stream.send_all(_ssl_request())
                    received = await self._receive(stream, 0.3)
                elif phase == "pre_greeting":
                    await stream.send_all(_mutate(_frame(rng.randbytes(rng.randrange(0, 120)), 1), rng))
                    received = await self._receive(stream, 0.2)
                elif phase in ("greeting_reply", "auth"):
                    wrong = phase == "auth"
                    user = REPL_USER if not wrong or rng.random() < 0.5 else f"nobody{case}"
                    password = REPL_PASSWORD if not wrong else f"not-the-password-{case}"
                    conn = ClientConnection(user, password)
                    response = b""
                    while not response:  # the greeting may come in pieces
                        data = await stream.receive_some(65536)
                        if not data:
                            raise ConnectionError("closed before the greeting")
                        conn.receive_data(data)
                        assert conn.next_event() is NEED_DATA
                        response = conn.data_to_send()
                    await stream.send_all(response if wrong else _mutate(response, rng))
                    received = await self._receive(stream, 0.3)
                    if wrong:
                        frames = _frames(received)
                        if frames and frames[0][:1] != b"\xff":
                            self.bad_logins_accepted.append(f"{user}: {frames[0][:20]!r}")
                else:
                    conn = ClientConnection(REPL_USER, REPL_PASSWORD)
                    await self._login(stream, conn)
                    if phase == "command":
                        command = rng.choice(COMMANDS)
                        packet = _frame(bytes([command]) + rng.randbytes(rng.randrange(0, 100)), 0)
                        await stream.send_all(packet if rng.random() < 0.3 else _mutate(packet, rng))
                        received = await self._receive(stream, 0.2)
                    else:
                        dump = _frame(b"\x12" + struct.pack("<IHI", 4, 0, 900_000 + case) + FIRST_FILE.encode(), 0)
                        if phase == "after_dump":
                            await stream.send_all(dump if rng.random() < 0.6 else _mutate(dump, rng))
                            for _ in range(rng.randrange(1, 3)):
                                await stream.send_all(_mutate(_frame(rng.randbytes(rng.randrange(0, 60)), 0), rng))
                            received = await self._receive(stream, 0.2)
                        else:  # stop_reading: ask for everything, read nothing, hang up a moment later
                            await stream.send_all(dump)
                            await trio.sleep(rng.uniform(0.05, 0.5))
            except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError, OSError):
                pass  # the relay hung up on us: its right
            except ServerError as err:  # an ERR where a correct login (or the greeting) was expected
                self.logins_refused[f"{phase}: {err.code} {err.message}"] += 1
        self._note_errors(received)
        self.done[phase] += 1

    async def run(self, count: int, between: Callable[[], None]) -> None:
        limiter = trio.CapacityLimiter(WORKERS)

        async def guarded(case: int) -> None:
            try:
                await self.one(case)
            finally:
                limiter.release_on_behalf_of(case)

        async with trio.open_nursery() as nursery:
            for case in range(count):
                await limiter.acquire_on_behalf_of(case)
                nursery.start_soon(guarded, case)
                if case % 200 == 199:
                    await trio.to_thread.run_sync(between)


def _silent_clients_are_closed(port: int, count: int) -> float:
    """Connect count clients that never speak; the relay must close every one after handshake_timeout.
    Returns the longest time until the close."""
    socks = [socket.create_connection(("127.0.0.1", port), timeout=HANDSHAKE_TIMEOUT + 10) for _ in range(count)]
    started = time.monotonic()
    longest = 0.0
    for sock in socks:
        with sock:
            while sock.recv(65536):  # the greeting, then the close (b"")
                pass
            longest = max(longest, time.monotonic() - started)
    return longest


def _flood(port: int, count: int) -> int:
    """count connections at once past max_connections; how many were refused with ERR 1040."""
    socks, refused = [], 0
    try:
        for _ in range(count):
            socks.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        for sock in socks:
            frames = _frames(sock.recv(65536))
            if frames and frames[0][:3] == b"\xff\x10\x04":  # ERR 1040
                refused += 1
    finally:
        for sock in socks:
            sock.close()
    return refused


def _downstream_connections(relay) -> float:
    """Every downstream connection the relay counts (the replica's dump among them)."""
    samples = scrape(relay).samples
    return sum(value for (name, _), value in samples.items() if name == "binlog_relay_downstream_connections")


def test_hostile_clients_do_not_disturb_a_replica(mariadb_factory, fault_relay, fault_figures):
    primary = mariadb_factory(server_id=1, extra_args=["--max-binlog-size=1048576"])
    relay = fault_relay("relay", primary.port, listen={"max_connections": MAX_CONNECTIONS,
                                                       "handshake_timeout": HANDSHAKE_TIMEOUT})
    replica = mariadb_factory(server_id=11)
    attach_replica(replica, relay.port, log_file=FIRST_FILE, log_pos=4)
    started = time.monotonic()
    with SequenceLoad(primary) as load:
        load.wait_commits(50)
        peak_before = relay.peak_rss_bytes()
        last = {"at": time.monotonic(), "rows": sequence_counts(replica)[0]}

        def replica_keeps_going() -> None:
            """Between batches of cases: the replica is running and has applied more than last time."""
            if time.monotonic() - last["at"] < 2.0:
                return
            assert_healthy(replica)
            rows = sequence_counts(replica)[0]
            assert rows > last["rows"], f"the replica applied nothing in {time.monotonic() - last['at']:.1f}s"
            last.update(at=time.monotonic(), rows=rows)

        silent_closed_after = _silent_clients_are_closed(relay.port, 20)
        assert silent_closed_after < HANDSHAKE_TIMEOUT + 5
        refused = _flood(relay.port, MAX_CONNECTIONS + 40)
        assert refused >= 40, f"only {refused} of {MAX_CONNECTIONS + 40} connections refused past max_connections"
        # The flood's sockets are closed on this side; the relay counts them until it reads the EOF.
        wait_for(lambda: _downstream_connections(relay) <= 1, 30, "the flood's connections still counted")
        replica_keeps_going()
        cases = Cases(relay.port, seed=20261124)
        trio.run(cases.run, HOSTILE_CASES, replica_keeps_going)
        replica_keeps_going()
        commits = load.stop()
    elapsed = time.monotonic() - started
    assert not cases.connect_failures, f"{cases.connect_failures}; relay log: {relay.log_text()[-3000:]}"
    assert relay.alive(), relay.log_text()[-3000:]
    assert not cases.logins_refused, cases.logins_refused
    assert not cases.bad_logins_accepted, cases.bad_logins_accepted[:5]
    assert sum(cases.done.values()) == HOSTILE_CASES, cases.done
    recovery = converged(primary, relay, [replica], commits)
    peak = relay.peak_rss_bytes()
    (relay.work_dir / "errors-seen.txt").write_text("\n".join(sorted(cases.errors_seen)))
    assert "Traceback" not in relay.log_text()
    assert peak - peak_before < RSS_GROWTH_BOUND
    fault_figures("hostile", fault="Hostile clients: malformed, truncated, wrongly numbered packets before the "
                  "greeting, as the handshake response, at auth (wrong password / unknown user must get ERR 1045), as "
                  "commands, after a dump request; dumps that stop reading; 20 silent clients; a flood of "
                  "max_connections + 40",
                  injected=f"{HOSTILE_CASES:,} cases in {elapsed:.0f} s ({commits:,} transactions)", data_lost="0",
                  diverged="0",
                  recovery="a replica replicating throughout, checked every 2 s (running and advancing); silent "
                           f"clients closed within {silent_closed_after:.1f} s (handshake_timeout "
                           f"{HANDSHAKE_TIMEOUT} s); {refused} of the flood refused with ERR 1040; after the load: "
                           f"{recovery}",
                  memory=f"peak RSS {peak_before / 2**20:.1f} -> {peak / 2**20:.1f} MiB; bound asserted: growth < "
                         f"{RSS_GROWTH_BOUND >> 20} MiB",
                  detail=f"cases {dict(cases.done)}; {len(cases.errors_seen)} distinct ERR texts")


def test_oversized_packet_then_reset(mariadb_factory, fault_relay, fault_figures):
    """The shortest reproduction of what ends the relay: a client announces a packet over the pre-login cap,
    reads the greeting and resets the connection. 200 such clients; the relay must still serve."""
    primary = mariadb_factory(server_id=1)
    relay = fault_relay("relay", primary.port)
    for _ in range(200):
        with socket.create_connection(("127.0.0.1", relay.port), timeout=5) as sock:
            sock.sendall(struct.pack("<I", 0xFFFFFF | (1 << 24)))
            sock.recv(65536)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        assert relay.alive(), relay.log_text()[-2500:]
    with RawClient(relay.port) as client:
        assert client.query("SELECT @@version") is not None
    fault_figures("hostile: oversized header, then reset", fault="A pre-login packet header over the cap, then a reset",
                  injected="200 clients", recovery="the relay alive after each, and answering a query after all")


def test_ssl_request_to_a_relay_without_tls(mariadb_factory, fault_relay, fault_figures):
    """An SSLRequest to a server whose greeting offered no SSL: the relay answers as the primary (a MariaDB
    without TLS) does, with the same ERR, and nothing crashes."""
    primary = mariadb_factory(server_id=1)
    relay = fault_relay("relay", primary.port)

    def reply_to_ssl_request(port: int) -> list[bytes]:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            greeting = _frames(sock.recv(65536))[0]
            assert not _offers_ssl(greeting), "the server offered SSL: this test needs one without TLS"
            sock.sendall(_ssl_request())
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
            return _frames(data)

    expected = reply_to_ssl_request(primary.port)
    assert expected and expected[0][:1] == b"\xff", expected
    for _ in range(5):
        assert reply_to_ssl_request(relay.port) == expected
    assert relay.alive(), relay.log_text()[-2500:]
    with RawClient(relay.port) as client:
        assert client.query("SELECT @@version") is not None
    assert "Traceback" not in relay.log_text(), relay.log_text()[-2500:]
    refused = parse_err(expected[0])
    fault_figures("hostile: SSLRequest without TLS", fault="An SSLRequest to a relay without TLS",
                  injected="5 requests",
                  recovery=f"the same reply as the primary (a MariaDB without TLS): ERR {refused.code} "
                           f"{refused.message}; no traceback")


def _offers_ssl(greeting: bytes) -> bool:
    """CLIENT_SSL in the lower capability flags of a v10 greeting."""
    version_end = greeting.index(b"\0", 1)
    lower_flags = int.from_bytes(greeting[version_end + 1 + 4 + 8 + 1:][:2], "little")
    return bool(lower_flags & CLIENT_SSL)
