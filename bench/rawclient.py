"""The fastest dump client this machine can run: it logs in, asks for the whole binlog and reads it
into one buffer it throws away (no per-packet work), so it measures what a server hands out, not
the client.  Capacity runs many at once; ingest runs one as the upper bound of a primary's dump
thread.  The number of bytes a source sends for the whole binlog is learnt first by one download
that parses every packet (``parsed_download``), so the timed loop only counts bytes and checks
the EOF packet at the end."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

from relay.protocol.client import ClientConnection
from relay.sandbox.client import BlockingClient
from relay.sandbox.mariadb import REPL_PASSWORD, REPL_USER

from .common import BenchError

DUMP_NON_BLOCK = 0x01
DUMP_SEND_ANNOTATE_ROWS = 0x02  # MariaDB: without it ANNOTATE_ROWS events are left out, as a replica gets them
DUMP_FLAGS = DUMP_NON_BLOCK | DUMP_SEND_ANNOTATE_ROWS
BUFFER = 1 << 20
EOF_TAIL = 9  # 05 00 00 seq | fe warnings(2) status(2): the packet that ends a non-blocking dump


def _login(port: int) -> tuple[socket.socket, ClientConnection]:
    """A logged-in dump client, CRC32 checksums and MariaDB's GTID capability declared as a replica
    declares them: its socket and its sans-IO protocol, which the callers drive themselves."""
    client = BlockingClient(port, REPL_USER, REPL_PASSWORD, timeout=120)
    client.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for sql in ("SET @master_binlog_checksum = 'CRC32'", "SET @mariadb_slave_capability = 4"):
        client.query(sql)
    return client.sock, client.conn


def parsed_download(port: int, server_id: int) -> dict[str, int]:
    """One download that parses every packet: the bytes on the wire and the events, checked."""
    sock, protocol = _login(port)
    with sock:
        protocol.binlog_dump("", 4, server_id, DUMP_FLAGS)
        sock.sendall(protocol.data_to_send())
        wire = events = 0
        types: dict[int, int] = {}
        while True:
            data = sock.recv(BUFFER)
            if not data:
                raise BenchError(f"port {port} closed the dump before its EOF packet")
            wire += len(data)
            protocol.receive_data(data)
            for payload in protocol.read_binlog_packets():
                if payload[0] == 0xFE and len(payload) < 9:
                    return {"wire_bytes": wire, "events": events, "types": types}  # type: ignore[dict-item]
                if payload[0] != 0x00:
                    raise BenchError(f"port {port} sent a packet that is no event: {bytes(payload[:60])!r}")
                events += 1
                types[payload[5]] = types.get(payload[5], 0) + 1


def raw_download(port: int, server_id: int, wire_bytes: int, start: threading.Barrier, out: dict[str, Any]) -> None:
    """The timed client: log in, dump, read ``wire_bytes`` into one buffer, check the EOF at the end."""
    try:
        sock, protocol = _login(port)
        with sock:
            protocol.binlog_dump("", 4, server_id, DUMP_FLAGS)
            request = protocol.data_to_send()
            buffer = memoryview(bytearray(BUFFER))
            recv_into = sock.recv_into
            start.wait()
            sock.sendall(request)
            total = 0
            last = b""
            while total < wire_bytes:
                n = recv_into(buffer)
                if not n:
                    raise BenchError(f"port {port} closed the dump after {total} of {wire_bytes} bytes")
                total += n
                last = bytes(buffer[max(0, n - EOF_TAIL) : n]) if n >= EOF_TAIL else (last + bytes(buffer[:n]))[-EOF_TAIL:]
            out["end"] = time.perf_counter()
            if total != wire_bytes or last[:3] != b"\x05\x00\x00" or last[4] != 0xFE:
                raise BenchError(f"port {port}: {total} bytes (want {wire_bytes}) ending in {last!r}, not an EOF packet")
    except BaseException as exc:  # reported by the caller, which joins every thread
        out["error"] = exc
