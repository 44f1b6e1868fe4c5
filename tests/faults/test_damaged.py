"""Stored files damaged on disk while the relay was stopped: one byte flipped inside a rows event of a
closed file, and the tail of another closed file cut off. The damage must be found (by CRC32 at start-up
or when the event is read for a dump), reported with the file and the position, and never served as
valid data: a raw dump and `mariadb-binlog --read-from-remote-server` through the relay end with an error
naming the file and the position, and none of the damaged bytes reaches them.

This is what the serving-side check in relay/storage/reader.py and relay/downstream/dump.py is for
(issue 10 section 3, fault 5).
"""

from __future__ import annotations

import os
import subprocess
import time

from relay.protocol.packets import is_eof, is_err, parse_err
from relay.sandbox.binlogfiles import HEADER, HEADER_LEN, binlog_events
from relay.sandbox.mariadb import REPL_PASSWORD, REPL_USER, find_program
from relay.sandbox.polling import wait_for
from relay.sandbox.replication import wait_binlog_settled
from tests.support.faults import SequenceLoad
from tests.support.relay import wait_for_mirror
from tests.support.replication import RawClient

WRITE_ROWS = (23, 30)  # WRITE_ROWS_EVENT v1 (as MariaDB writes them) and v2
CUT_BYTES = 7
WITH_ANNOTATIONS = 0x03  # non-blocking, and send ANNOTATE_ROWS: the events are then the stored bytes


def _event_offsets(path) -> list[tuple[int, int, int]]:
    """(start offset, type, length) of each event of a binlog file."""
    offsets, pos = [], 4
    for event in binlog_events(path):
        offsets.append((pos, event.type, event.length))
        pos += event.length
    return offsets


def _raw_dump(port: int, file: str, flags: int = 0x01) -> tuple[list[bytes], object]:
    """Events of a non-blocking dump from file:4 up to its end: (events, the ERR as a ServerError, or None).
    Add flag 0x02 for the ANNOTATE_ROWS events (then the events are the stored bytes)."""
    events: list[bytes] = []
    with RawClient(port) as client:
        client.query("SET @master_binlog_checksum = @@global.binlog_checksum")
        client.query("SET @mariadb_slave_capability = 4")
        client.start_dump(file, 4, server_id=960, flags=flags)
        while True:
            for packet in client.next_dump_packets():
                if is_err(packet):
                    return events, parse_err(packet)
                if is_eof(packet):
                    return events, None
                events.append(bytes(packet[1:]))


def _names_position(text: str, file: str, positions: tuple[int, ...]) -> bool:
    return file in text and any(str(p) in text for p in positions)


def _stored_history(mariadb_factory, fault_relay):
    """A primary with several closed files, and a stopped relay holding a mirror of them."""
    primary = mariadb_factory(server_id=1, extra_args=["--max-binlog-size=131072"])
    relay = fault_relay("relay", primary.port)
    with SequenceLoad(primary) as load:
        while len(primary.binlog_files()) < 6:
            load.wait_commits(100)
        load.stop()
    wait_binlog_settled(primary)
    wait_for_mirror(primary, relay)
    assert relay.stop() == 0
    return primary, relay


def _restart(relay) -> None:
    relay.start()
    relay.wait_listening()
    assert relay.alive(), relay.log_text()[-3000:]


def test_flipped_byte_is_never_served(mariadb_factory, fault_relay, fault_figures):
    """One bit flipped in the middle of the body of a rows event in the middle of a closed file."""
    primary, relay = _stored_history(mariadb_factory, fault_relay)
    flipped_name = relay.stored_files()[1]
    flipped_path = relay.data_dir / flipped_name
    rows = [entry for entry in _event_offsets(flipped_path) if entry[1] in WRITE_ROWS]
    start, _, length = rows[len(rows) // 2]
    flip_at = start + HEADER_LEN + (length - HEADER_LEN) // 2
    damaged_event = bytearray(flipped_path.read_bytes()[start:start + length])
    with open(flipped_path, "r+b") as f:
        f.seek(flip_at)
        byte = f.read(1)[0]
        f.seek(flip_at)
        f.write(bytes([byte ^ 0x10]))
    damaged_event[flip_at - start] ^= 0x10
    flipped_positions = (start, start + length)
    _restart(relay)

    # a raw dump of the file: the events before the damaged one, then ERR 1236 naming file and position
    events, err = _raw_dump(relay.port, flipped_name)
    assert err is not None, f"the dump of {flipped_name} ended without an error: the damaged event was served"
    assert err.code == 1236, err
    assert _names_position(err.message, flipped_name, flipped_positions), err.message
    assert bytes(damaged_event) not in events, "the damaged event was sent"
    assert all(HEADER.unpack_from(event)[4] <= start for event in events if len(event) >= HEADER_LEN
               and HEADER.unpack_from(event)[4] > 4), "events after the damaged one were sent"

    # mariadb-binlog through the relay: fails, and says where
    result = subprocess.run(
        [find_program("mariadb-binlog"), "--read-from-remote-server", "--host=127.0.0.1", f"--port={relay.port}",
         f"--user={REPL_USER}", f"--password={REPL_PASSWORD}", "--raw", f"--result-file={relay.work_dir}/mb-",
         flipped_name], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0, "mariadb-binlog read the damaged file through the relay without an error"
    assert _names_position(result.stderr, flipped_name, flipped_positions), result.stderr
    downloaded = relay.work_dir / f"mb-{flipped_name}"
    assert not downloaded.exists() or bytes(damaged_event) not in downloaded.read_bytes()

    log = relay.log_text()
    assert _names_position(log, flipped_name, flipped_positions), log[-3000:]
    assert relay.alive()
    fault_figures("damaged: flipped bit", fault="A stored closed file with one flipped bit in a rows event",
                  injected="1 flipped bit",
                  recovery=f"found at read time: a raw dump and `mariadb-binlog --read-from-remote-server` get ERR "
                           f"{err.code} naming the file and the event's position; none of the damaged bytes sent; "
                           "logged")


def _first_file_events(events: list[bytes]) -> list[bytes]:
    """The events of the dump's first file: after its artificial ROTATE (log_pos 0), up to the next
    artificial event, which begins the next file."""
    real = []
    for event in events:
        artificial = HEADER.unpack_from(event)[4] == 0
        if artificial and real:
            break
        if not artificial:
            real.append(event)
    return real


def _cut_closed_file(relay) -> tuple[str, tuple[int, ...]]:
    """The last CUT_BYTES of the fourth stored file gone (its ROTATE cut short): (name, the positions a
    report may name: the torn event's start, the old and the new size)."""
    cut_name = relay.stored_files()[3]
    cut_path = relay.data_dir / cut_name
    cut_size = cut_path.stat().st_size
    last_start = _event_offsets(cut_path)[-1][0]
    os.truncate(cut_path, cut_size - CUT_BYTES)
    return cut_name, (last_start, cut_size, cut_size - CUT_BYTES)


def test_truncated_closed_file_is_fetched_again_from_the_primary(mariadb_factory, fault_relay, fault_figures):
    """Found at start-up, reported with file and position, then fetched again from the primary (which
    still has it): afterwards the stored file is the primary's, and a dump of it is whole."""
    primary, relay = _stored_history(mariadb_factory, fault_relay)
    cut_name, cut_positions = _cut_closed_file(relay)
    restarted = time.monotonic()
    _restart(relay)
    wait_for(lambda: not relay.alive() or f"stored {cut_name} repaired" in relay.log_text(), 30,
             f"the relay never repaired {cut_name}")
    repaired_after = time.monotonic() - restarted
    assert relay.alive(), relay.log_text()[-3000:]
    assert _names_position(relay.log_text(), cut_name, cut_positions), relay.log_text()[-3000:]
    original = primary.binlog_path(cut_name).read_bytes()
    assert (relay.data_dir / cut_name).read_bytes() == original
    events, err = _raw_dump(relay.port, cut_name, flags=WITH_ANNOTATIONS)
    assert err is None, err
    assert b"".join(_first_file_events(events)) == original[4:], "the dump of the repaired file is not the primary's"
    from_primary, _ = _raw_dump(primary.port, cut_name, flags=WITH_ANNOTATIONS)
    assert _first_file_events(events) == _first_file_events(from_primary)
    assert not list(relay.data_dir.glob("*.fetched")), "a temporary download was left in data_dir"
    wait_for_mirror(primary, relay)
    fault_figures("damaged: cut short, on the primary",
                  fault=f"A stored closed file cut short (last {CUT_BYTES} bytes); the primary still has it",
                  injected="1 file cut",
                  recovery="found at start-up (a closed file that does not end in a whole ROTATE or STOP is "
                           "walked), logged with the file and where its whole events end; fetched again from the "
                           f"primary, byte-identical to its copy {repaired_after:.1f} s after the restart, a dump "
                           "of it whole")


def test_truncated_closed_file_the_primary_purged_is_served_up_to_the_damage(mariadb_factory, fault_relay,
                                                                             fault_figures):
    """The primary no longer has the file: the relay keeps serving, says which file is damaged and where,
    and a dump of it ends with ERR 1236 naming the file and the position; none of the torn bytes is sent."""
    primary, relay = _stored_history(mariadb_factory, fault_relay)
    cut_name, cut_positions = _cut_closed_file(relay)
    newest = primary.binlog_files()[-1][0]
    primary.purge_binlogs_to(newest)
    assert cut_name not in [name for name, _ in primary.binlog_files()]
    _restart(relay)
    wait_for(lambda: not relay.alive() or cut_name in relay.log_text(), 30,
             f"the relay never mentioned {cut_name}")
    assert relay.alive(), relay.log_text()[-3000:]
    assert _names_position(relay.log_text(), cut_name, cut_positions), relay.log_text()[-3000:]
    events, err = _raw_dump(relay.port, cut_name, flags=WITH_ANNOTATIONS)
    assert err is not None and err.code == 1236, err
    assert _names_position(err.message, cut_name, cut_positions), err.message
    kept = (relay.data_dir / cut_name).read_bytes()
    assert b"".join(_first_file_events(events)) == kept[4:cut_positions[0]], "not the whole events before the damage"
    assert relay.alive()
    fault_figures("damaged: cut short, purged",
                  fault=f"A stored closed file cut short (last {CUT_BYTES} bytes); the primary purged it",
                  injected="1 file cut",
                  recovery="found at start-up, logged with the file and the position; the relay serves on, and a "
                           f"dump of this file sends its whole events, then ERR {err.code} naming the file and the "
                           "torn event's position")
