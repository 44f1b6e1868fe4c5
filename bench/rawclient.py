"""The fastest dump client this machine can run: it logs in, asks for the whole binlog and reads it
into one buffer it throws away (no per-packet work), so it measures what a server hands out, not
the client.  Capacity runs many at once; ingest runs one as the upper bound of a primary's dump
thread.  The number of bytes a source sends for the whole binlog is learnt first by one download
that parses every packet (``parsed_download``), so the timed loop only counts bytes and checks
the EOF packet at the end.

The GTID start benchmark (bench/gtidstart.py) uses the GTID client below: it logs in as a MariaDB
GTID replica does, asks for a GTID start and parses every packet (few: it starts near the end), so
that each dump is checked before its time counts; ``gtid_storm_worker`` runs many at once in a
worker process."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Sequence
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from typing import Any

from relay.protocol.codes import BINLOG_DUMP_NON_BLOCK, BINLOG_SEND_ANNOTATE_ROWS_EVENT, EOF_PACKET, EVENT_PACKET
from relay.protocol.packets import is_eof, is_err, parse_err
from relay.sandbox.binlogfiles import BINLOG_CHECKPOINT_EVENT, GTID_EVENT, HEADER_LEN
from relay.sandbox.client import BlockingClient
from relay.sandbox.mariadb import REPL_PASSWORD, REPL_USER

from .common import BenchError

# MariaDB leaves ANNOTATE_ROWS events out without BINLOG_SEND_ANNOTATE_ROWS_EVENT, as a replica gets them
DUMP_FLAGS = BINLOG_DUMP_NON_BLOCK | BINLOG_SEND_ANNOTATE_ROWS_EVENT
BUFFER = 1 << 20
EOF_TAIL = 9  # 05 00 00 seq | fe warnings(2) status(2): the packet that ends a non-blocking dump


def login(port: int, settings: Sequence[str] = (), timeout: float = 120) -> BlockingClient:
    """A logged-in dump client, CRC32 checksums and MariaDB's GTID capability declared as a replica
    declares them, then the statements in ``settings``; callers drive its socket and sans-IO
    protocol (``sock``, ``conn``) themselves."""
    client = BlockingClient(port, REPL_USER, REPL_PASSWORD, timeout=timeout)
    try:
        client.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for sql in ("SET @master_binlog_checksum = 'CRC32'", "SET @mariadb_slave_capability = 4", *settings):
            client.query(sql)
    except BaseException:
        client.close()
        raise
    return client


def parsed_download(port: int, server_id: int) -> dict[str, int]:
    """One download that parses every packet: the bytes on the wire and the events, checked."""
    client = login(port)
    sock, protocol = client.sock, client.conn
    with client:
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
                if is_eof(payload):
                    return {"wire_bytes": wire, "events": events, "types": types}  # type: ignore[dict-item]
                if payload[0] != EVENT_PACKET:
                    raise BenchError(f"port {port} sent a packet that is no event: {bytes(payload[:60])!r}")
                events += 1
                types[payload[5]] = types.get(payload[5], 0) + 1


def raw_download(port: int, server_id: int, wire_bytes: int, start: threading.Barrier, out: dict[str, Any]) -> None:
    """The timed client: log in, dump, read ``wire_bytes`` into one buffer, check the EOF at the end."""
    try:
        client = login(port)
        sock, protocol = client.sock, client.conn
        with client:
            protocol.binlog_dump("", 4, server_id, DUMP_FLAGS)
            request = protocol.data_to_send()
            buffer = memoryview(bytearray(BUFFER))
            start.wait()
            out["start"] = time.perf_counter()  # a small binlog can be read before the caller's clock starts
            sock.sendall(request)
            total, last = _read_discarding(sock, port, buffer, wire_bytes, EOF_TAIL)
            out["end"] = time.perf_counter()
            if total != wire_bytes or last[:3] != b"\x05\x00\x00" or last[4] != EOF_PACKET:
                raise BenchError(f"port {port}: {total} bytes (want {wire_bytes}) ending in {last!r}, "
                                 "not an EOF packet")
    except BaseException as exc:  # reported by the caller, which joins every thread
        out["error"] = exc


def _read_discarding(sock: socket.socket, port: int, buffer: memoryview, wire_bytes: int,
                     tail: int) -> tuple[int, bytes]:
    """``recv_into`` ``buffer`` (thrown away) until ``wire_bytes`` came, no per-packet work, never
    reading past them: the bytes read and the last ``tail`` of them."""
    recv_into = sock.recv_into
    size = len(buffer)
    total = 0
    last = b""
    while total < wire_bytes:
        n = recv_into(buffer, min(size, wire_bytes - total))
        if not n:
            raise BenchError(f"port {port} closed the dump after {total} of {wire_bytes} bytes")
        total += n
        if n >= tail:
            last = bytes(buffer[n - tail : n])
        else:
            last = (last + bytes(buffer[:n]))[-tail:]
    return total, last


# ---------------------------------------------------------------- one file's dump (bench/decode.py)

# As python-mysql-replication's BinLogStreamReader(is_mariadb=False, blocking=False) asks: a plain
# COM_BINLOG_DUMP by file name and position, non-blocking, without ANNOTATE_ROWS events (its checksum
# and capability settings are login's).
FILE_DUMP_FLAGS = BINLOG_DUMP_NON_BLOCK


def file_dump_wire(port: int, server_id: int, file: str) -> dict[str, Any]:
    """One dump of ``file`` from position 4, every packet parsed, up to the file's own ROTATE (the
    event that names the next file; the first, fake one names this one): the bytes on the wire to
    the end of that ROTATE's packet (``wire_bytes``), its events, and the ROTATE packet's payload
    (``rotate``), which ends the dump ``discard_file_dump`` reads."""
    client = login(port)
    sock, protocol = client.sock, client.conn
    with client:
        protocol.binlog_dump(file, 4, server_id, FILE_DUMP_FLAGS)
        sock.sendall(protocol.data_to_send())
        wire = events = 0
        while True:
            data = sock.recv(BUFFER)
            if not data:
                raise BenchError(f"port {port} closed the dump of {file} before its ROTATE")
            protocol.receive_data(data)
            for payload in protocol.read_binlog_packets():
                if payload[0] != EVENT_PACKET:
                    raise BenchError(f"the dump of {file} ended before its ROTATE: {bytes(payload[:60])!r}")
                # on the wire: a 4-byte header per packet of up to 2**24 - 1 bytes (one more, empty,
                # after a payload of exactly a multiple of that)
                wire += len(payload) + 4 * (len(payload) // 0xFFFFFF + 1)
                events += 1
                if payload[5] == ROTATE_EVENT and bytes(payload[_ROTATE_NAME_AT:-4]).decode() != file:
                    return {"wire_bytes": wire, "events": events, "rotate": bytes(payload)}


def discard_file_dump(port: int, server_id: int, file: str, wire_bytes: int, rotate: bytes) -> None:
    """The discard reader of one file's dump (what ``file_dump_wire`` learnt): log in, ask for the dump,
    ``recv_into`` one buffer until the file's own ROTATE came, and hang up; no packet parsed.  The
    dump must end with that ROTATE's bytes."""
    client = login(port)
    sock, protocol = client.sock, client.conn
    with client:
        protocol.binlog_dump(file, 4, server_id, FILE_DUMP_FLAGS)
        sock.sendall(protocol.data_to_send())
        total, last = _read_discarding(sock, port, memoryview(bytearray(BUFFER)), wire_bytes, len(rotate))
    if total != wire_bytes or last != rotate:
        raise BenchError(f"port {port}: the dump of {file} gave {total} bytes (want {wire_bytes}), "
                         "not ending with its ROTATE")


# ---------------------------------------------------------------- GTID starts

ROTATE_EVENT = 4
FORMAT_DESCRIPTION_EVENT = 15
GTID_LIST_EVENT = 163
ARTIFICIAL = 0x20  # LOG_EVENT_ARTIFICIAL_F: an event the server made up for this dump
# What a MariaDB primary sends before the first event group of a GTID start: the fake ROTATE to the
# start file, its FDE, its GTID_LIST and BINLOG_CHECKPOINT, and the artificial GTID_LIST that moves
# the replica's position.  The relay sends the same.
PREAMBLE_EVENTS = frozenset({ROTATE_EVENT, FORMAT_DESCRIPTION_EVENT, GTID_LIST_EVENT, BINLOG_CHECKPOINT_EVENT})
# After the 00 status byte: timestamp, type, server_id, length, log_pos, flags.
_EVENT_HEADER = struct.Struct("<xIBIIIH")
_GTID_BODY = struct.Struct("<QI")  # seq_no, domain_id
_GTID_AT = 1 + HEADER_LEN
_ROTATE_NAME_AT = 1 + HEADER_LEN + 8  # after the position; the CRC32 ends the event

Gtid = tuple[int, int, int]  # domain_id, server_id, seq_no


def gtid_settings(connect_state: str) -> list[str]:
    """What a MariaDB GTID replica sets besides the checksum and the capability (``login``'s)."""
    return [f"SET @slave_connect_state = '{connect_state}'", "SET @slave_gtid_strict_mode = 0"]


def gtid_client(port: int, server_id: int, connect_state: str, timeout: float) -> dict[str, Any]:
    """One MariaDB GTID replica: log in, set its variables, COM_REGISTER_SLAVE as ``server_id``, and a
    non-blocking GTID dump (empty file name, position 4) read to its EOF (``read_gtid_dump``), with
    ``connect``: the clock (time.monotonic, one for every process) before it connected."""
    connect = time.monotonic()
    client = login(port, gtid_settings(connect_state), timeout)
    with client:
        client.register_slave(server_id)
        got = read_gtid_dump(client, server_id)
        client.quit()  # a polite end keeps "Aborted connection" out of the primary's error.log
    got["connect"] = connect
    return got


def read_gtid_dump(client: BlockingClient, server_id: int) -> dict[str, Any]:
    """Send the GTID dump and read it to its EOF, parsing every packet.  Returns the clock when the
    request went out (``sent``), when the first GTID event came (``first``: the first event the
    replica does not have) and when the EOF came (``end``); the GTIDs received in order; the event
    types that came before the first GTID (``preamble``, artificial ones as -type) and where the
    stream ended (``file``, ``pos``: the last ROTATE's file and the last real event's log_pos)."""
    sock, protocol = client.sock, client.conn
    protocol.binlog_dump("", 4, server_id, DUMP_FLAGS)
    request = protocol.data_to_send()
    gtids: list[Gtid] = []
    preamble: list[int] = []
    first: float | None = None
    file, pos = "", 0
    unpack_header, unpack_gtid = _EVENT_HEADER.unpack_from, _GTID_BODY.unpack_from
    sent = time.monotonic()
    sock.sendall(request)
    while True:
        data = sock.recv(BUFFER)
        if not data:
            raise BenchError(f"the server closed a GTID dump after {len(gtids)} transactions, before its EOF")
        protocol.receive_data(data)
        for payload in protocol.read_binlog_packets():
            if payload[0] != EVENT_PACKET:
                if is_eof(payload):
                    return {"sent": sent, "first": first, "end": time.monotonic(), "gtids": gtids,
                            "preamble": preamble, "file": file, "pos": pos}
                if is_err(payload):
                    raise BenchError(f"the server refused a GTID dump: {parse_err(payload)}")
                raise BenchError(f"a GTID dump sent a packet that is no event: {bytes(payload[:60])!r}")
            _, kind, origin, _, log_pos, flags = unpack_header(payload)
            if kind == GTID_EVENT:
                if first is None:
                    first = time.monotonic()
                seq_no, domain = unpack_gtid(payload, _GTID_AT)
                gtids.append((domain, origin, seq_no))
            elif first is None:
                preamble.append(-kind if flags & ARTIFICIAL else kind)
            if kind == ROTATE_EVENT:
                file = bytes(payload[_ROTATE_NAME_AT:-4]).decode()
            elif log_pos and not flags & ARTIFICIAL:
                pos = log_pos


def gtid_storm_worker(port: int, clients: Sequence[tuple[int, int, str]], timeout: float, start: Barrier,
                      results: Queue) -> None:
    """A worker process of a reconnect storm: one thread per client (index, server_id, connect_state)
    runs ``gtid_client``; they connect together once every worker and the parent have met at
    ``start``.  Puts one list on ``results``: per client its index and gtid_client's figures, or
    ``error``.  Waits ``timeout`` at most for the clients."""
    go = threading.Event()
    outs: list[dict[str, Any]] = [{"index": index} for index, _, _ in clients]

    def run(out: dict[str, Any], server_id: int, connect_state: str) -> None:
        go.wait()
        try:
            out.update(gtid_client(port, server_id, connect_state, timeout))
        except BaseException as exc:  # noqa: BLE001 - reported by the parent, which checks every client
            out["error"] = f"{type(exc).__name__}: {exc}"

    threads = [threading.Thread(target=run, args=(out, server_id, state), daemon=True)
               for out, (_, server_id, state) in zip(outs, clients)]
    for thread in threads:
        thread.start()
    try:
        start.wait(timeout=120)
    except threading.BrokenBarrierError:
        results.put([{**out, "error": "the storm's start barrier broke"} for out in outs])
        return
    go.set()
    deadline = time.monotonic() + timeout
    for thread, out in zip(threads, outs):
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            out["error"] = f"not done within {timeout:g} s"
    results.put(outs)
