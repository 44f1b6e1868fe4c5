"""Events larger than a dump's read block (the relay streams them through the block instead of
reading them whole: relay/downstream/dump.py) reach mariadb-binlog byte for byte, and one whose
CRC32 is damaged in the stored file is never sent: the client gets the primary's read error."""

from __future__ import annotations

import subprocess

from relay.sandbox.replication import wait_binlog_settled
from relay.storage.scan import BLOCK_SIZE
from tests.integration.test_serve_clients import _binlog_command, _raw_differences
from tests.support.relay import wait_for_mirror

BIG = 2 * BLOCK_SIZE  # larger than any dump's read block, below 16 MB


def _write_large_events(primary) -> None:  # type: ignore[no-untyped-def]
    primary.sql("CREATE DATABASE big")
    primary.sql("CREATE TABLE big.t (id INT PRIMARY KEY, b LONGBLOB)")
    for i in range(3):  # a rows event and an annotation (the statement) of ~BIG bytes each
        primary.sql(f"INSERT INTO big.t VALUES ({i}, REPEAT('{'xyz'[i]}', {BIG}))")
        primary.sql(f"INSERT INTO big.t VALUES ({i + 10}, '{'s' * BIG}')")


def _largest_events(path, count: int):  # type: ignore[no-untyped-def]
    data = path.read_bytes()
    pos, found = 4, []
    while pos + 19 <= len(data):
        length = int.from_bytes(data[pos + 9 : pos + 13], "little")
        found.append((length, pos))
        pos += length
    return sorted(found, reverse=True)[:count]


def test_events_larger_than_the_read_block_are_served_byte_for_byte(mariadb_factory, relay_factory, tmp_path):
    """Several clients at once: the dumps share one read buffer (Registry.read_buffer), and one
    streaming a large event piece by piece lets the others read between its pieces."""
    primary = mariadb_factory(server_id=1)
    relay = relay_factory("relay", primary.port)
    _write_large_events(primary)
    primary.sql("CREATE TABLE big.small (id INT PRIMARY KEY, v VARCHAR(64))")
    for i in range(40):  # small events around the large ones: the fast path's blocks
        primary.sql(f"INSERT INTO big.small VALUES ({i}, REPEAT('v', {i}))")
    wait_binlog_settled(primary)
    wait_for_mirror(primary, relay)
    name = primary.binlog_files()[-1][0]
    assert _largest_events(relay.data_dir / name, 1)[0][0] > BIG, "no event larger than the read block"
    result_dirs = [tmp_path / f"client{number}" for number in range(4)]
    clients = []
    for result_dir in result_dirs:
        result_dir.mkdir()
        clients.append(subprocess.Popen(_binlog_command(relay.port, result_dir, "--to-last-log"),
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    for client, result_dir in zip(clients, result_dirs, strict=True):
        output, _ = client.communicate(timeout=60)
        assert client.returncode == 0, output
        assert _raw_differences(primary, result_dir) == []
    assert relay.stop() == 0
    assert "Traceback" not in relay.log_text()


def test_a_large_event_with_a_bad_crc_is_not_sent(mariadb_factory, relay_factory, tmp_path):
    primary = mariadb_factory(server_id=1)
    relay = relay_factory("relay", primary.port)
    _write_large_events(primary)
    wait_binlog_settled(primary)
    wait_for_mirror(primary, relay)
    name = primary.binlog_files()[-1][0]
    stored = relay.data_dir / name
    length, offset = _largest_events(stored, 1)[0]
    with open(stored, "r+b") as damaged:  # one byte in the middle of the event's body
        damaged.seek(offset + length // 2)
        byte = damaged.read(1)
        damaged.seek(offset + length // 2)
        damaged.write(bytes((byte[0] ^ 0xFF,)))
    result_dir = tmp_path / "once"
    result_dir.mkdir()
    once = subprocess.run(_binlog_command(relay.port, result_dir, "--to-last-log"), capture_output=True, timeout=60)
    assert once.returncode != 0
    assert b"did not pass crc check" in once.stdout + once.stderr
    written = (result_dir / name).read_bytes()
    assert len(written) == offset, "the copy does not end just before the damaged event"
    assert written == stored.read_bytes()[:offset]
