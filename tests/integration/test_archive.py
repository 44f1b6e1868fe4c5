"""The archive with a real primary and a real S3 API server (moto in server mode behind a proxy the
test can take down, tests/support/s3.py): every closed file is uploaded, verified and readable
back byte for byte as the primary wrote it, plain or encrypted; a local file is purged only once
it is archived; with the store down ingest goes on, nothing unarchived is purged, and the backlog
is uploaded once the store is back."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pymysql
import pytest

from relay.archive.keys import read_keks
from relay.archive.objects import OBJECT_DIR, ArchivedFileReader, list_archive, object_key
from relay.archive.owner import read_owner, relay_id
from relay.archive.store import open_store
from relay.binlog import events as ev
from relay.binlog.events import ANNOTATE_ROWS_EVENT, ROTATE_EVENT
from relay.binlog.names import next_file_name
from relay.protocol.packets import ServerError
from relay.sandbox.binlogfiles import split_events
from relay.sandbox.compare import copy_differences
from relay.sandbox.mariadb import REPL_PASSWORD, REPL_USER
from relay.sandbox.polling import wait_for
from relay.sandbox.ports import LOOPBACK, free_port
from relay.sandbox.relayprocess import RelayProcess, relay_config
from relay.sandbox.replication import attach_replica, wait_caught_up
from relay.storage.index import read_index
from tests.support.faults import metric
from tests.support.replication import ARTIFICIAL, DUMP_SERVER_ID, RawClient, dump_events
from tests.support.s3 import REGION, S3Server

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def archive_config(s3: S3Server, key_file: Path | None = None) -> dict[str, Any]:
    key_id, secret = s3.credential_files()
    config: dict[str, Any] = {"url": f"s3://{s3.bucket}/relay", "endpoint_url": s3.endpoint, "region": REGION,
                              "access_key_id_file": str(key_id), "secret_access_key_file": str(secret)}
    if key_file is not None:
        config["encryption_key_file"] = str(key_file)
    return config


def write_files(primary: Any, count: int, table: str = "t") -> None:
    """``count`` more closed binlog files on the primary, each with a few transactions."""
    primary.sql("CREATE DATABASE IF NOT EXISTS test")
    primary.sql(f"CREATE TABLE IF NOT EXISTS test.{table} (id INT AUTO_INCREMENT PRIMARY KEY, v TEXT)")
    for _ in range(count):
        for _ in range(4):
            primary.sql(f"INSERT INTO test.{table} (v) VALUES (REPEAT(UUID(), 200))")
        primary.sql("FLUSH BINARY LOGS")


def closed_files(primary: Any) -> list[str]:
    """The primary's binlog files but its newest, still written."""
    return [name for name, _ in primary.binlog_files()[:-1]]


def archived_as_the_primary_wrote(s3: S3Server, primary: Any) -> list[str]:
    """The archive's files, each checked against the primary's bytes; their names."""
    store = open_store(s3.store_config(prefix="relay"))
    names = sorted(list_archive(store))
    for name in names:
        reader = ArchivedFileReader(store, name, ())
        assert reader.read(0, reader.size) == primary.binlog_path(name).read_bytes(), name
    return names


def primary_and_archiving_relay(mariadb_factory: Any, relay_factory: Any, s3: S3Server) -> tuple[Any, Any]:
    """A primary, and a relay archiving it whose retention purges every archived file but two."""
    primary = mariadb_factory(server_id=1)
    relay = relay_factory("relay", primary.port, metrics={"host": LOOPBACK, "port": free_port()},
                          archive=archive_config(s3),
                          storage={"retention": {"max_size": "16K", "min_files": 2, "replica_grace": 0}})
    return primary, relay


def relay_holds_the_primarys_newest(relay: Any, primary: Any) -> bool:
    """The relay stores the primary's newest file, up to the primary's end of it."""
    names = read_index(relay.data_dir)
    newest, size = primary.binlog_files()[-1]
    return bool(names) and names[-1] == newest and (relay.data_dir / newest).stat().st_size == size


@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "encrypted"])
def test_closed_files_are_archived_verified_and_purged_locally_only_once_archived(
        mariadb_factory, relay_factory, s3_server, tmp_path, encrypted):
    primary = mariadb_factory(server_id=1)
    key_file = None
    if encrypted:
        key_file = tmp_path / "archive.key"
        key_file.write_bytes(os.urandom(32))
    relay = relay_factory("relay", primary.port, metrics={"host": LOOPBACK, "port": free_port()},
                          archive=archive_config(s3_server, key_file),
                          storage={"retention": {"max_size": "16K", "min_files": 2, "replica_grace": 0}})
    write_files(primary, 6)
    wait_for(lambda: relay_holds_the_primarys_newest(relay, primary), 60, "the relay did not catch up")
    closed = closed_files(primary)
    wait_for(lambda: metric(relay, "binlog_relay_archive_lag_files") == 0
             and metric(relay, "binlog_relay_archive_files") == len(closed), 60, "the archive did not catch up")
    store = open_store(s3_server.store_config(prefix="relay"))
    archived = list_archive(store)
    assert sorted(archived) == closed
    keks = read_keks(str(key_file) if key_file else None, ())
    for name in closed:
        original = primary.binlog_path(name).read_bytes()
        reader = ArchivedFileReader(store, name, keks)
        assert reader.size == len(original) and reader.read(0, len(original)) == original, name
        middle = len(original) // 2
        assert reader.read(middle, 100) == original[middle:middle + 100]
        head = store.get_range(object_key(name), 0, 4)
        assert (head == ZSTD_MAGIC) is not encrypted  # encrypted frames look like nothing
        assert archived[name].encrypted is encrypted
    wait_for(lambda: len(read_index(relay.data_dir)) <= 3, 30, "retention did not purge the archived files")
    purged = set(closed) - set(read_index(relay.data_dir))
    assert purged and purged <= set(archived)
    assert metric(relay, "binlog_relay_archive_uploaded_files_total") == len(closed)
    assert metric(relay, "binlog_relay_archive_compression_ratio") > 1.5
    assert "Traceback" not in relay.log_text()


def test_with_the_store_down_ingest_goes_on_and_nothing_unarchived_is_purged(
        mariadb_factory, relay_factory, s3_server):
    primary, relay = primary_and_archiving_relay(mariadb_factory, relay_factory, s3_server)
    write_files(primary, 2)
    wait_for(lambda: relay_holds_the_primarys_newest(relay, primary)
             and metric(relay, "binlog_relay_archive_lag_files") == 0, 60, "the first files were not archived")
    s3_server.proxy.refuse()
    down_from = primary.binlog_files()[-1][0]
    write_files(primary, 5, table="while_down")
    wait_for(lambda: relay_holds_the_primarys_newest(relay, primary), 60, "ingest stopped while the store was down")
    wait_for(lambda: metric(relay, "binlog_relay_archive_store_up") == 0, 30, "the store was not seen down")
    stored = read_index(relay.data_dir)
    closed_while_down = [name for name, _ in primary.binlog_files()[:-1] if name >= down_from]
    assert all(name in stored for name in closed_while_down), (closed_while_down, stored)
    assert metric(relay, "binlog_relay_archive_lag_files") == len(closed_while_down)
    s3_server.proxy.accept()
    wait_for(lambda: metric(relay, "binlog_relay_archive_lag_files") == 0, 90, "the backlog was not uploaded")
    archived = list_archive(open_store(s3_server.store_config(prefix="relay")))
    assert set(closed_while_down) <= set(archived)
    wait_for(lambda: len(read_index(relay.data_dir)) <= 3, 30, "retention did not purge once archived")
    assert relay.alive() and "Traceback" not in relay.log_text()
    assert not any(key.startswith(OBJECT_DIR) and not key.endswith((".zst", ".meta.json"))
                   for key in (obj.name for obj in open_store(s3_server.store_config(prefix="relay")).list()))


def test_a_relay_restarted_while_the_store_is_down_still_knows_what_it_archived(
        mariadb_factory, relay_factory, s3_server):
    """archive.json: the files only the archive holds stay part of the history the relay lists,
    and nothing stored locally is taken for unarchived, while the store cannot be listed."""
    primary, relay = primary_and_archiving_relay(mariadb_factory, relay_factory, s3_server)
    write_files(primary, 5)
    closed = closed_files(primary)
    wait_for(lambda: relay_holds_the_primarys_newest(relay, primary)
             and metric(relay, "binlog_relay_archive_files") == len(closed), 60, "the files were not archived")
    wait_for(lambda: len(read_index(relay.data_dir)) <= 3, 30, "retention did not purge the archived files")
    relay.stop()
    s3_server.proxy.refuse()
    relay.start()
    relay.wait_listening()
    assert [name for name, _ in relay_sql(relay, "SHOW BINARY LOGS")] == [n for n, _ in primary.binlog_files()]
    assert metric(relay, "binlog_relay_archive_files") == len(closed)
    assert metric(relay, "binlog_relay_archive_lag_files") == 0
    wait_for(lambda: metric(relay, "binlog_relay_archive_store_up") == 0 and "retrying in" in relay.log_text(),
             30, "the store was not seen down")
    s3_server.proxy.accept()


def test_a_relay_of_another_primary_given_the_same_archive_writes_nothing_there_and_purges_nothing(
        mariadb_factory, relay_factory, s3_server):
    """Two primaries name their files alike: a relay given another relay's archive.url would take the
    other history's files for its own, purge its copies and serve the other bytes. It is refused at
    its first look, with the owner named; the first relay archives on."""
    first_primary, first = primary_and_archiving_relay(mariadb_factory, relay_factory, s3_server)
    write_files(first_primary, 3)
    closed = [name for name, _ in first_primary.binlog_files()[:-1]]
    wait_for(lambda: metric(first, "binlog_relay_archive_files") == len(closed), 60, "the first relay did not archive")
    store = open_store(s3_server.store_config(prefix="relay"))
    objects_before = {obj.name: obj.etag for obj in store.list()}

    other_primary = mariadb_factory(server_id=2)
    write_files(other_primary, 3)
    other_closed = [name for name, _ in other_primary.binlog_files()[:-1]]
    assert set(other_closed) & set(closed)  # the same names, other bytes
    second = relay_factory("second", other_primary.port, metrics={"host": LOOPBACK, "port": free_port()},
                           storage={"retention": {"max_size": "16K", "min_files": 2, "replica_grace": 0}})
    wait_for(lambda: relay_holds_the_primarys_newest(second, other_primary), 60, "the second relay did not catch up")
    second.stop()
    second.config["archive"] = archive_config(s3_server)  # the first relay's archive.url, copied by mistake
    second.start()
    second.wait_listening()
    wait_for(lambda: metric(second, "binlog_relay_archive_errors_total", operation="claim"), 30,
             "the second relay was not refused")
    log_text = second.log_text()
    assert "relays of different primaries must not share an archive" in log_text
    assert str(first.data_dir.resolve()) in log_text
    assert metric(second, "binlog_relay_archive_files") == 0  # none of the first history's files taken for its own
    assert read_index(second.data_dir)[:-1] == other_closed  # nothing purged
    assert metric(second, "binlog_relay_archive_lag_files") == len(other_closed)
    assert {obj.name: obj.etag for obj in store.list()} == objects_before  # nothing written there

    # On an empty disk it would stand up from the archive, the other primary's history: it stops,
    # having imported nothing and taken nothing over.
    third = RelayProcess(second.work_dir.parent / "third",
                         {**second.config, "data_dir": str(second.work_dir.parent / "third" / "data"),
                          "listen": {**second.config["listen"], "port": free_port()},
                          "metrics": {"host": LOOPBACK, "port": free_port()}})
    third.start()
    wait_for(lambda: third.proc is not None and third.proc.poll() is not None, 60, "the third relay did not stop")
    assert third.proc.returncode == 1
    assert "neither reads nor writes another primary's archive" in third.log_text(), third.log_tail()
    assert read_index(third.data_dir) == []
    assert read_owner(store).relay_id == relay_id(first.data_dir)
    write_files(first_primary, 1, table="later")
    wait_for(lambda: metric(first, "binlog_relay_archive_files") == len(closed) + 1, 60,
             "the first relay stopped archiving")
    assert first.alive() and second.alive() and "Traceback" not in second.log_text() + third.log_text()


# ----------------------------------------------------------------------------- served back


def _archived_and_purged_everywhere(primary: Any, relay: Any, s3: S3Server, saved: Path) -> list[str]:
    """Closed files archived, purged by the relay's retention and by the primary; the primary's
    copies saved first (the oracle).  Returns the names only the archive holds."""
    closed = closed_files(primary)
    wait_for(lambda: metric(relay, "binlog_relay_archive_lag_files") == 0
             and metric(relay, "binlog_relay_archive_files") == len(closed), 60, "the archive did not catch up")
    wait_for(lambda: len(read_index(relay.data_dir)) <= 3, 30, "retention did not purge the archived files")
    saved.mkdir()
    for name, _ in primary.binlog_files():
        (saved / name).write_bytes(primary.binlog_path(name).read_bytes())
    newest = primary.binlog_files()[-1][0]
    primary.purge_binlogs_to(newest)
    only_archived = sorted(set(closed) - set(read_index(relay.data_dir)))
    assert only_archived and not any(name in {n for n, _ in primary.binlog_files()} for name in only_archived)
    return only_archived


def relay_sql(relay: Any, query: str) -> list[tuple[Any, ...]]:
    conn = pymysql.connect(host=LOOPBACK, port=relay.port, user=REPL_USER, password=REPL_PASSWORD, connect_timeout=10)
    try:
        with conn.cursor() as cursor:
            cursor.execute(query)
            return list(cursor.fetchall())
    finally:
        conn.close()


def _mariadb_binlog(port: int, first: str, out: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    out.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["mariadb-binlog", "--no-defaults", "--read-from-remote-server", "--raw", "--host", LOOPBACK,
                           "--port", str(port), "--user", REPL_USER, f"--password={REPL_PASSWORD}", "--to-last-log",
                           f"--result-file={out}/", first], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "encrypted"])
def test_files_only_the_archive_holds_are_served_as_the_primary_wrote_them(
        mariadb_factory, relay_factory, s3_server, tmp_path, encrypted):
    primary = mariadb_factory(server_id=1)
    key_file = None
    if encrypted:
        key_file = tmp_path / "archive.key"
        key_file.write_text(os.urandom(32).hex())
    relay = relay_factory("relay", primary.port, metrics={"host": LOOPBACK, "port": free_port()},
                          archive=archive_config(s3_server, key_file),
                          storage={"retention": {"max_size": "16K", "min_files": 2, "replica_grace": 0}})
    write_files(primary, 5)
    wait_for(lambda: relay_holds_the_primarys_newest(relay, primary), 60, "the relay did not catch up")
    only_archived = _archived_and_purged_everywhere(primary, relay, s3_server, tmp_path / "primary-copies")
    originals = sorted((tmp_path / "primary-copies").iterdir())
    # SHOW BINARY LOGS: the archived files, then the local ones, as the primary listed them before its purge
    listed = relay_sql(relay, "SHOW BINARY LOGS")
    assert [(name, int(size)) for name, size in listed] == [(p.name, p.stat().st_size) for p in originals]
    # mariadb-binlog from the first file: archived files and local ones, byte for byte
    run = _mariadb_binlog(relay.port, only_archived[0], tmp_path / "raw")
    assert run.returncode == 0, run.stderr
    assert not copy_differences(originals, tmp_path / "raw")
    # a real replica from the first file/position, through the archive into the local files
    replica = mariadb_factory(server_id=11)
    attach_replica(replica, relay.port, log_file=only_archived[0], log_pos=4)
    wait_caught_up(primary, replica)
    assert replica.sql("SELECT COUNT(*) FROM test.t") == primary.sql("SELECT COUNT(*) FROM test.t")
    assert metric(relay, "binlog_relay_archive_served_bytes_total") >= sum(
        (tmp_path / "primary-copies" / name).stat().st_size for name in only_archived)
    assert "Traceback" not in relay.log_text()


def test_a_damaged_archived_object_is_never_served(mariadb_factory, relay_factory, s3_server, tmp_path):
    primary, relay = primary_and_archiving_relay(mariadb_factory, relay_factory, s3_server)
    write_files(primary, 4)
    wait_for(lambda: relay_holds_the_primarys_newest(relay, primary), 60, "the relay did not catch up")
    only_archived = _archived_and_purged_everywhere(primary, relay, s3_server, tmp_path / "primary-copies")
    damaged = only_archived[0]
    client, key = s3_server.client(), f"relay/{object_key(damaged)}"
    body = bytearray(client.get_object(Bucket=s3_server.bucket, Key=key)["Body"].read())
    body[len(body) // 3] ^= 0x01
    client.put_object(Bucket=s3_server.bucket, Key=key, Body=bytes(body))
    run = _mariadb_binlog(relay.port, damaged, tmp_path / "raw")
    # mariadb-binlog prints the text of the ERR (1236) the dump ended with
    assert run.returncode != 0 and "could not read" in run.stderr and damaged in run.stderr, run.stderr
    sent = tmp_path / "raw" / damaged
    original = (tmp_path / "primary-copies" / damaged).read_bytes()
    assert not sent.exists() or original.startswith(sent.read_bytes()[:4]) and sent.stat().st_size <= 4
    assert metric(relay, "binlog_relay_archive_damaged_reads_total") >= 1
    assert "damaged" in relay.log_text() or "fails" in relay.log_text()
    # a client that leaves while its file is fetched (the store hung) ends its dump and the fetch at once
    s3_server.proxy.blackhole()
    dumps = relay.log_text().count("dump for server_id")
    leaving = subprocess.Popen(["mariadb-binlog", "--no-defaults", "--read-from-remote-server", "--raw", "--host",
                                LOOPBACK, "--port", str(relay.port), "--user", REPL_USER,
                                f"--password={REPL_PASSWORD}", f"--result-file={tmp_path}/leaving-", only_archived[1]])
    wait_for(lambda: relay.log_text().count("dump for server_id") > dumps, 30, "the dump did not start")
    leaving.kill()
    leaving.wait()
    wait_for(lambda: "the client left while an archived file was fetched" in relay.log_text(), 10,
             "the dump went on fetching for a client that had left")
    assert not list((relay.data_dir / "archive-cache").glob(f"{only_archived[1]}*"))  # its partial copy is gone
    s3_server.proxy.heal()
    # the other files are still served
    later = _mariadb_binlog(relay.port, only_archived[1], tmp_path / "raw-later")
    assert later.returncode == 0, later.stderr
    assert relay.alive() and "Traceback" not in relay.log_text()


def test_the_next_files_rotate_is_sent_before_its_fetch(mariadb_factory, relay_factory, s3_server, tmp_path):
    """``mariadb-binlog --raw FILE`` stops at the fake ROTATE that opens the next file: a primary sends
    it as it opens that file, the relay before fetching it back, so such a client never waits for
    the archive (here: hung) to hand over a file it will not read."""
    primary, relay = primary_and_archiving_relay(mariadb_factory, relay_factory, s3_server)
    write_files(primary, 5)
    wait_for(lambda: relay_holds_the_primarys_newest(relay, primary), 60, "the relay did not catch up")
    only_archived = _archived_and_purged_everywhere(primary, relay, s3_server, tmp_path / "primary-copies")
    assert len(only_archived) >= 2
    first = only_archived[0]
    original = (tmp_path / "primary-copies" / first).read_bytes()

    def one_file(out: Path) -> subprocess.CompletedProcess[str]:
        out.mkdir()
        return subprocess.run(["mariadb-binlog", "--no-defaults", "--read-from-remote-server", "--raw", "--host",
                               LOOPBACK, "--port", str(relay.port), "--user", REPL_USER, f"--password={REPL_PASSWORD}",
                               f"--result-file={out}/", first], capture_output=True, text=True, timeout=30)

    fetched = one_file(tmp_path / "fetched")  # the store answers: the first file is fetched onto the shelf
    assert fetched.returncode == 0, fetched.stderr
    assert (tmp_path / "fetched" / first).read_bytes() == original
    wait_for(lambda: not list((relay.data_dir / "archive-cache").glob(f"{only_archived[1]}*")), 30,
             "the fetch of the next file went on after its client left")
    s3_server.proxy.blackhole()
    try:
        hung = one_file(tmp_path / "hung")  # the next file cannot be fetched now
        assert hung.returncode == 0, hung.stderr
        assert (tmp_path / "hung" / first).read_bytes() == original
        assert [path.name for path in (tmp_path / "hung").iterdir()] == [first]
    finally:
        s3_server.proxy.heal()
    assert relay.alive() and "Traceback" not in relay.log_text()


def write_big_file(primary: Any) -> None:
    """One more closed binlog file on the primary, of about 16 MiB of hex digits: several frames,
    an object of some megabytes."""
    primary.sql("CREATE DATABASE IF NOT EXISTS test")
    primary.sql("CREATE TABLE test.big (id INT PRIMARY KEY, v VARCHAR(128))")
    for first in range(0, 120_000, 40_000):
        primary.sql(f"INSERT INTO test.big SELECT seq, SHA2(CONCAT(RAND(), seq), 512) FROM test.seq_{first + 1}_to_"
                    f"{first + 40_000}")
    primary.sql("FLUSH BINARY LOGS")


def _in_hole(path: Path, offset: int) -> bool:
    """Whether byte ``offset`` of the file is in a hole (not written yet)."""
    with open(path, "rb") as stream:
        return os.lseek(stream.fileno(), offset, os.SEEK_HOLE) == offset


def test_a_dump_reads_an_archived_file_while_it_is_fetched(mariadb_factory, relay_factory, s3_server, tmp_path):
    """A file only the archive holds is served as it comes back: the client has its first events
    while the rest is still on its way (the store slowed down), and the whole file in the end."""
    primary, relay = primary_and_archiving_relay(mariadb_factory, relay_factory, s3_server)
    write_big_file(primary)
    write_files(primary, 3)
    wait_for(lambda: relay_holds_the_primarys_newest(relay, primary), 60, "the relay did not catch up")
    only_archived = _archived_and_purged_everywhere(primary, relay, s3_server, tmp_path / "primary-copies")
    big = max(only_archived, key=lambda name: (tmp_path / "primary-copies" / name).stat().st_size)
    original = (tmp_path / "primary-copies" / big).read_bytes()
    assert len(original) > 12 << 20
    out = tmp_path / "raw"
    out.mkdir()
    events = list(split_events(original[4:]))
    starts = list(itertools.accumulate((event.length for event in events), initial=4))[:-1]
    from_late: list[Any] = []
    s3_server.proxy.slow(1 << 20)
    try:
        client = subprocess.Popen(["mariadb-binlog", "--no-defaults", "--read-from-remote-server", "--raw", "--host",
                                   LOOPBACK, "--port", str(relay.port), "--user", REPL_USER,
                                   f"--password={REPL_PASSWORD}", f"--result-file={out}/", big],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        served = out / big
        wait_for(lambda: served.exists() and served.stat().st_size > 1 << 20, 60, "no event of the file came")
        # the client has events of the file while its fetch is not done
        assert list((relay.data_dir / "archive-cache").glob(f"{big}.*.part"))
        assert f"{big} fetched back" not in relay.log_text()
        # a dump from an event the copy does not hold yet (in its last hole: the last run of frames is under
        # way there), while it is still fetched, starts there once it is fetched that far
        partial = next((relay.data_dir / "archive-cache").glob(f"{big}.*.part"))
        assert partial.stat().st_size == len(original)  # its whole size from the start, holes where not fetched
        in_hole = [_in_hole(partial, start) for start in starts]
        late = max(index for index, hole in enumerate(in_hole) if hole)
        while late > 0 and in_hole[late - 1]:  # the first event of that hole
            late -= 1
        late_start = starts[late]
        reader = threading.Thread(target=lambda: from_late.extend(dump_events(relay.port, big, late_start, 78)))
        reader.start()
    finally:
        s3_server.proxy.heal()
    _, errors = client.communicate(timeout=60)
    assert client.returncode == 0, errors
    assert served.read_bytes() == original
    reader.join(60)
    # the file's events from there (after the fake ROTATE and the FDE), but the annotations this
    # client did not ask for, as a primary leaves them out
    expected = [event.data for event in events[late:] if event.type != ANNOTATE_ROWS_EVENT]
    assert [event.data for event in from_late[2:2 + len(expected)]] == expected
    assert f"{big} fetched back" in relay.log_text()
    assert relay.alive() and "Traceback" not in relay.log_text()


def _rotated_to(events: list[Any]) -> list[str]:
    """The files a dump entered, in order: the names its artificial ROTATEs carry."""
    return [bytes(event.data[ev.HEADER_LEN + 8:-4]).decode() for event in events
            if event.type == ROTATE_EVENT and event.flags & ARTIFICIAL]


def _events_after_the_fde(copy: Path) -> list[bytes]:
    """What a dump sends of a whole file after its fake ROTATE and its FDE: every event but the
    annotations (a primary leaves them out for a client that did not ask for them)."""
    return [event.data for event in list(split_events(copy.read_bytes()[4:]))[1:] if event.type != ANNOTATE_ROWS_EVENT]


def test_archive_retention_spares_the_file_a_dump_reads_and_the_files_after_it(
        mariadb_factory, relay_factory, s3_server, tmp_path):
    """archive.retention deletes the oldest archived files but not one a dump reads, nor the files
    after it (a primary's PURGE stops at a log in use): a dump that stopped reading an archived
    file while the archive outgrew max_files reads it, and every file after it, to the end once it
    goes on (the file used to be deleted under it, the dump ending early with a silent EOF).  The
    file goes once the dump has left it."""
    primary = mariadb_factory(server_id=1)
    relay = relay_factory("relay", primary.port, metrics={"host": LOOPBACK, "port": free_port()},
                          archive=archive_config(s3_server) | {"retention": {"max_files": 6}},
                          storage={"retention": {"max_size": "16K", "min_files": 2, "replica_grace": 0}})
    write_files(primary, 1)
    write_big_file(primary)
    write_files(primary, 3)  # 5 closed files: none beyond max_files
    wait_for(lambda: relay_holds_the_primarys_newest(relay, primary), 60, "the relay did not catch up")
    saved = tmp_path / "primary-copies"
    only_archived = _archived_and_purged_everywhere(primary, relay, s3_server, saved)
    big = max(only_archived, key=lambda name: (saved / name).stat().st_size)
    older = only_archived[:only_archived.index(big)]
    assert older and (saved / big).stat().st_size > 12 << 20
    with RawClient(relay.port, rcvbuf=32 << 10, timeout=120) as client:
        client.query("SET @master_binlog_checksum = @@global.binlog_checksum")
        client.query("SET @mariadb_slave_capability = 4")
        client.start_dump(big, 4, DUMP_SERVER_ID, flags=0x01)  # non-blocking, as mariadb-binlog
        first = client.next_dump_packets()  # then the client stops reading: the dump waits in the big file
        write_files(primary, 3)  # 8 closed files: max_files reaches the big file
        wait_for(lambda: all(f"{name} deleted (archive.retention)" in relay.log_text() for name in older), 60,
                 "archive.retention did not delete the files before the one read")
        assert big in list_archive(open_store(s3_server.store_config(prefix="relay")))
        assert all(packet[0] == 0x00 for packet in first)
        events = [event for raw in [packet[1:] for packet in first] + client.read_dump()
                  for event in split_events(raw)]  # an ERR raises ServerError
    expected = _events_after_the_fde(saved / big)
    assert [event.data for event in events[2:2 + len(expected)]] == expected
    newest = primary.binlog_files()[-1][0]
    entered = [big]
    while entered[-1] != newest:
        entered.append(next_file_name(entered[-1]))
    assert _rotated_to(events) == entered
    wait_for(lambda: f"{big} deleted (archive.retention)" in relay.log_text(), 60,
             "archive.retention kept the file after its dump left")
    assert relay.alive() and "Traceback" not in relay.log_text()


def test_a_dump_that_names_no_file_starts_at_the_oldest_file_the_archive_holds(
        mariadb_factory, relay_factory, s3_server, tmp_path):
    """A dump that names no file starts at the oldest file, as a primary's does, even when only the
    archive holds it (it used to be refused: "the archived file was not fetched back"); a position
    past the end of that file is refused as the primary refuses it, with nothing fetched (it used
    to drop the connection, a traceback in the relay's log)."""
    primary, relay = primary_and_archiving_relay(mariadb_factory, relay_factory, s3_server)
    write_files(primary, 4)
    oldest, size = primary.binlog_files()[0]

    def refusal(port: int, file: str) -> tuple[int, str]:
        with pytest.raises(ServerError) as refused:
            dump_events(port, file, size + 1, DUMP_SERVER_ID)
        return refused.value.code, refused.value.message

    on_primary = {file: refusal(primary.port, file) for file in ("", oldest)}  # the oracle, before its purge
    wait_for(lambda: relay_holds_the_primarys_newest(relay, primary), 60, "the relay did not catch up")
    saved = tmp_path / "primary-copies"
    only_archived = _archived_and_purged_everywhere(primary, relay, s3_server, saved)
    assert only_archived[0] == oldest
    assert refusal(relay.port, oldest) == on_primary[oldest]
    assert refusal(relay.port, "") == on_primary[""]  # its text names the file as given: '.'
    assert not list((relay.data_dir / "archive-cache").glob("*"))  # refused with nothing fetched
    from_nothing = dump_events(relay.port, "", 4, DUMP_SERVER_ID)
    assert [event.data for event in from_nothing] == [
        event.data for event in dump_events(relay.port, oldest, 4, DUMP_SERVER_ID)]
    assert _rotated_to(from_nothing)[0] == oldest
    expected = _events_after_the_fde(saved / oldest)
    assert [event.data for event in from_nothing[2:2 + len(expected)]] == expected
    assert relay.alive() and "Traceback" not in relay.log_text()


def test_a_file_archived_while_it_was_written_carries_its_commit_times(
        mariadb_factory, relay_factory, s3_server, tmp_path):
    """The newest file is uploaded as ingest writes it and completed once closed: its meta
    document gets the commit times the index gives once the file is whole."""
    import re

    from relay.archive.objects import read_meta

    primary, relay = primary_and_archiving_relay(mariadb_factory, relay_factory, s3_server)
    wait_for(lambda: metric(relay, "binlog_relay_archive_store_up") == 1, 30, "the store is not up")
    primary.sql("CREATE DATABASE IF NOT EXISTS test")
    primary.sql("CREATE TABLE IF NOT EXISTS test.t (id INT AUTO_INCREMENT PRIMARY KEY, v TEXT)")
    for _ in range(20):
        primary.sql("INSERT INTO test.t (v) VALUES (REPEAT(UUID(), 200))")
    wait_for(lambda: relay_holds_the_primarys_newest(relay, primary), 60, "the relay did not catch up")
    name = primary.binlog_files()[-1][0]
    primary.sql("FLUSH BINARY LOGS")
    uploaded = re.compile(rf"archive: {re.escape(name)} uploaded and verified \(.* s after it closed\)")
    wait_for(lambda: uploaded.search(relay.log_text()), 60, f"{name} was not archived as it was written")
    copies = tmp_path / "primary-copies"
    copies.mkdir()
    for copy, _ in primary.binlog_files():
        (copies / copy).write_bytes(primary.binlog_path(copy).read_bytes())
    meta = read_meta(open_store(s3_server.store_config(prefix="relay")), name)
    assert meta.commit_times == _commit_times([name], copies)[name]


def test_a_relay_on_an_empty_disk_stands_up_from_the_archive_and_carries_on(
        mariadb_factory, relay_factory, s3_server, tmp_path):
    """The first relay archives and is gone with its disk; the primary purged what it archived. A
    new relay with the same archive and upstream seeds itself with the newest archived file, serves
    the older ones from the archive, and ingests on from where the archive ends: no gap, and the
    primary is never asked for a file it purged (it would refuse)."""
    import time

    from relay.archive.archiver import load_catalog

    began = int(time.time())
    primary = mariadb_factory(server_id=1)
    archive = archive_config(s3_server)
    first = relay_factory("first", primary.port, metrics={"host": LOOPBACK, "port": free_port()}, archive=archive)
    write_files(primary, 4)
    wait_for(lambda: relay_holds_the_primarys_newest(first, primary), 60, "the first relay did not catch up")
    closed = closed_files(primary)
    wait_for(lambda: metric(first, "binlog_relay_archive_files") == len(closed), 60, "not archived")
    first.close()
    saved = tmp_path / "primary-copies"
    saved.mkdir()
    for name, _ in primary.binlog_files():
        (saved / name).write_bytes(primary.binlog_path(name).read_bytes())
    newest_archived = closed[-1]
    primary.purge_binlogs_to(primary.binlog_files()[-1][0])  # only its active file is left
    second = relay_factory("second", primary.port, metrics={"host": LOOPBACK, "port": free_port()}, archive=archive)
    assert "seeded with " + newest_archived in second.log_text()
    write_files(primary, 2, table="after")
    wait_for(lambda: relay_holds_the_primarys_newest(second, primary), 60, "the second relay did not carry on")
    local = read_index(second.data_dir)
    assert local[0] == newest_archived
    assert not copy_differences([saved / newest_archived] + [primary.binlog_path(name) for name in local[1:]],
                                second.data_dir)
    everything = [saved / name for name in closed] + [primary.binlog_path(name) for name in local[1:]]
    run = _mariadb_binlog(second.port, closed[0], tmp_path / "raw")
    assert run.returncode == 0, run.stderr
    assert not copy_differences(everything, tmp_path / "raw")
    # The archived files' commit times came back with the listing (their meta documents): a search
    # by time passes the files that cannot hold the answer without reading them.
    expected = _commit_times(closed, saved)
    assert all(began <= lo <= hi <= time.time() for lo, hi in expected.values())
    wait_for(lambda: set(closed) <= set(load_catalog(second.data_dir, archive["url"])), 30,
             "the second relay did not save its list of the archive")
    catalog = load_catalog(second.data_dir, archive["url"])
    assert {name: (catalog[name].commit_lo, catalog[name].commit_hi) for name in closed} == expected
    assert "Traceback" not in second.log_text()


@pytest.mark.parametrize("how", ["primary restarted", "seed killed in the import", "seed killed after it"])
def test_a_relay_stands_up_from_the_archive_after_a_primary_restart_or_a_seed_cut_short(
        mariadb_factory, relay_factory, s3_server, tmp_path, how):
    """The newest archived file ends with the STOP of a primary's restart, no ROTATE naming the
    next: the seed resumes at the file the primary opened after it (it resumed at the end of the
    archived one, which the primary had purged, and the relay could never start).  A seed killed
    before it was done (inside the import, or after it and before archive.json and the next file)
    is done again at the next start (its data_dir was taken for a seeded one: the same refusal, for
    good, and its temporary copy left behind)."""
    primary = mariadb_factory(server_id=1)
    archive = archive_config(s3_server)
    first = relay_factory("first", primary.port, metrics={"host": LOOPBACK, "port": free_port()}, archive=archive)
    write_files(primary, 3)
    if how == "primary restarted":
        primary.restart()
    wait_for(lambda: relay_holds_the_primarys_newest(first, primary), 60, "the first relay did not catch up")
    closed = closed_files(primary)
    wait_for(lambda: metric(first, "binlog_relay_archive_files") == len(closed), 60, "not archived")
    first.close()
    newest_archived = primary.binlog_path(closed[-1]).read_bytes()
    last_event = list(split_events(newest_archived[4:]))[-1]
    assert last_event.type == (ev.STOP_EVENT if how == "primary restarted" else ROTATE_EVENT)
    primary.purge_binlogs_to(primary.binlog_files()[-1][0])
    data_dir = tmp_path / "second-data"
    if how.startswith("seed killed"):
        config = tmp_path / "second.yaml"
        config.write_text(json.dumps(relay_config(data_dir, primary.port, archive=archive)))
        step = "import" if how.endswith("in the import") else "catalog"
        killed = subprocess.run([sys.executable, "-m", "tests.support.crashseed", str(config), step],
                                capture_output=True, text=True, timeout=120, cwd=Path(__file__).parents[2])
        assert killed.returncode == 9, killed.stderr
        assert read_index(data_dir) and (data_dir / "seeding").exists()
    second = relay_factory("second", primary.port, metrics={"host": LOOPBACK, "port": free_port()}, archive=archive,
                           data_dir=str(data_dir))
    assert f"seeded with {closed[-1]}" in second.log_text()
    write_files(primary, 2, table="after")
    wait_for(lambda: relay_holds_the_primarys_newest(second, primary), 60, "the second relay did not carry on")
    local = read_index(data_dir)
    assert local[0] == closed[-1] and (data_dir / closed[-1]).read_bytes() == newest_archived
    assert not copy_differences([primary.binlog_path(name) for name in local[1:]], data_dir)
    assert not (data_dir / "seeding").exists() and not list(data_dir.glob(".seed-*"))
    assert "Traceback" not in second.log_text()


def _commit_times(names: list[str], copies: Path) -> dict[str, tuple[int, int]]:
    """The lowest and highest commit times of each of ``names``, from an index over the primary's
    copies of the files (in ``copies``, with the file after them)."""
    from relay.storage.history import HistoryIndex
    from relay.storage.index import write_index

    every = sorted(path.name for path in copies.iterdir() if not path.name.endswith(".index"))
    write_index(copies, every)
    index = HistoryIndex(copies, lambda: every, lambda name: (copies / name).stat().st_size, writable=False)
    times = {}
    for name in names:
        summary = index.summary(name)
        assert summary is not None and summary.commit_lo is not None and summary.commit_hi is not None, name
        times[name] = (summary.commit_lo, summary.commit_hi)
    return times


def test_the_archive_command_uploads_a_relays_backlog_and_rotates_its_key(
        mariadb_factory, relay_factory, s3_server, tmp_path):
    """A relay that ran without an archive: `binlog-relay archive` uploads its closed files,
    encrypted, a progress line after each; refused while the relay holds the data_dir.  Then the
    key is rotated (`--rewrap`): the files open with the new key alone, no longer with the old."""
    import sys

    import yaml

    from relay.archive.objectformat import ArchiveKeyError

    primary = mariadb_factory(server_id=1)
    relay = relay_factory("relay", primary.port)
    write_files(primary, 3)
    wait_for(lambda: relay_holds_the_primarys_newest(relay, primary), 60, "the relay did not catch up")
    old_key, new_key = tmp_path / "old.key", tmp_path / "new.key"
    for key in (old_key, new_key):
        key.write_bytes(os.urandom(32))
    config_path = tmp_path / "with-archive.yaml"
    config_path.write_text(yaml.safe_dump({**relay.config, "archive": archive_config(s3_server, old_key)}))
    command = [sys.executable, "-m", "relay.cli", "archive", "--config", str(config_path)]
    busy = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert busy.returncode == 1 and "in use" in busy.stderr, busy.stderr
    relay.stop()
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    closed = read_index(relay.data_dir)[:-1]
    progress = [line for line in done.stderr.splitlines() if line.startswith("archived ")]
    assert len(progress) == len(closed) and progress[-1].startswith(f"archived {len(closed)}/{len(closed)} files")
    store = open_store(s3_server.store_config(prefix="relay"))
    assert sorted(list_archive(store)) == closed
    copies = tmp_path / "primary-copies"
    copies.mkdir()
    for name, _ in primary.binlog_files():
        (copies / name).write_bytes(primary.binlog_path(name).read_bytes())
    expected_times = _commit_times(closed, copies)

    def listed_times() -> dict[str, tuple[int | None, int | None]]:
        return {name: (archived.commit_lo, archived.commit_hi) for name, archived in list_archive(store).items()}

    assert listed_times() == expected_times  # from each file's index, into its meta document
    old_only, new_only = read_keks(str(old_key), []), read_keks(str(new_key), [])
    for name in closed:
        reader = ArchivedFileReader(store, name, old_only)
        assert reader.read(0, reader.size) == primary.binlog_path(name).read_bytes()
    again = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and f"{len(closed)} were archived already" in again.stdout, again.stdout

    rotated = {**archive_config(s3_server, new_key), "old_encryption_key_files": [str(old_key)]}
    config_path.write_text(yaml.safe_dump({**relay.config, "archive": rotated}))
    rewrap = subprocess.run(command + ["--rewrap"], capture_output=True, text=True, timeout=120)
    assert rewrap.returncode == 0 and f"re-wrapped {len(closed)} file(s)" in rewrap.stdout, rewrap.stderr
    assert len([line for line in rewrap.stderr.splitlines() if line.startswith("re-wrapped ")]) == len(closed)
    for name in closed:
        reader = ArchivedFileReader(store, name, new_only)
        assert reader.read(0, reader.size) == primary.binlog_path(name).read_bytes()
        with pytest.raises(ArchiveKeyError):
            ArchivedFileReader(store, name, old_only)
    assert listed_times() == expected_times  # a re-wrapped meta keeps them
    twice = subprocess.run(command + ["--rewrap"], capture_output=True, text=True, timeout=60)
    assert twice.returncode == 0 and f"{len(closed)} were under the current key already" in twice.stdout


def test_the_verify_command_reads_every_archived_file_back_and_names_each_damage(
        mariadb_factory, relay_factory, s3_server, tmp_path):
    """`binlog-relay archive --verify` beside the relay that writes the archive: a clean archive
    passes; then each kind of damage is named with its file (a flipped byte in an object, an object
    gone from under its meta, an edited meta, an object whose binlog events fail their CRC32, as
    if a damaged file had been archived), the other files still pass, and nothing is changed."""
    import sys

    import yaml

    from relay.archive.objects import meta_key, upload

    primary, relay = primary_and_archiving_relay(mariadb_factory, relay_factory, s3_server)
    write_files(primary, 6)
    closed = closed_files(primary)
    wait_for(lambda: metric(relay, "binlog_relay_archive_files") == len(closed), 60, "the archive did not catch up")
    config_path = tmp_path / "relay.yaml"
    config_path.write_text(yaml.safe_dump(relay.config))
    command = [sys.executable, "-m", "relay.cli", "archive", "--config", str(config_path), "--verify"]
    clean = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert clean.returncode == 0 and f"verified {len(closed)} file(s)" in clean.stdout, clean.stdout + clean.stderr
    assert [line.split(": ")[1] for line in clean.stderr.splitlines() if line.startswith("verified ")] == closed

    client, bucket = s3_server.client(), s3_server.bucket

    def stored(key: str) -> bytes:
        return client.get_object(Bucket=bucket, Key=f"relay/{key}")["Body"].read()

    flipped, gone, edited, bad_events = closed[:4]
    body = bytearray(stored(object_key(flipped)))
    body[len(body) // 3] ^= 0x01
    client.put_object(Bucket=bucket, Key=f"relay/{object_key(flipped)}", Body=bytes(body))
    client.delete_object(Bucket=bucket, Key=f"relay/{object_key(gone)}")
    meta = stored(meta_key(edited))
    client.put_object(Bucket=bucket, Key=f"relay/{meta_key(edited)}", Body=meta.replace(b'"frames":', b'"frames": '))
    damaged_file = tmp_path / bad_events
    original = bytearray(primary.binlog_path(bad_events).read_bytes())
    original[len(original) // 2] ^= 0x01  # inside an event: its CRC32 fails, the zstd frame around it is sound
    damaged_file.write_bytes(bytes(original))
    upload(open_store(s3_server.store_config(prefix="relay")), damaged_file, bad_events)
    before = {entry["Key"]: entry["ETag"] for entry in client.list_objects_v2(Bucket=bucket)["Contents"]}

    found = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert found.returncode == 1, found.stdout + found.stderr
    assert f"verified {len(closed) - 4} file(s)" in found.stdout and "4 damaged" in found.stdout, found.stdout
    reasons = dict(line.strip().split(": ", 1) for line in found.stdout.splitlines()[1:])
    assert set(reasons) == {flipped, gone, edited, bad_events}, found.stdout
    assert "frame" in reasons[flipped]
    assert "the object is not" in reasons[gone]
    assert "meta document is damaged" in reasons[edited]
    assert "CRC32" in reasons[bad_events]
    assert [line.split(": ")[1] for line in found.stderr.splitlines() if line.startswith("DAMAGED ")] == \
        [flipped, gone, edited, bad_events]
    after = {entry["Key"]: entry["ETag"] for entry in client.list_objects_v2(Bucket=bucket)["Contents"]}
    assert after == before  # read-only
    assert relay.alive() and "Traceback" not in relay.log_text()


def test_gtid_starts_in_files_only_the_archive_holds_are_the_primarys(mariadb_factory, relay_factory, s3_server):
    """The oracle test of GTID starts (tests/integration/test_gtid_index.py: several domains and
    server ids, strict and not, a state ahead of the binlog), with the large file purged from the
    relay's disk: it is found by the GTID_LIST its archived copy starts with, fetched back, and
    the dump sends what the primary (which still has it) sends."""
    from relay.sandbox.replication import wait_binlog_settled
    from tests.integration.test_gtid_index import (
        _connect_states,
        _differences,
        _gtids_in_order,
        _primarys_outcomes,
        _write_history,
    )

    primary = mariadb_factory(server_id=1)
    relay = relay_factory("relay", primary.port, metrics={"host": LOOPBACK, "port": free_port()},
                          archive=archive_config(s3_server),
                          storage={"index_interval": "128K",
                                   "retention": {"max_size": "16K", "min_files": 1, "replica_grace": 0}})
    _write_history(primary)
    wait_binlog_settled(primary)
    wait_for(lambda: relay_holds_the_primarys_newest(relay, primary), 60, "the relay did not catch up")
    closed = closed_files(primary)
    wait_for(lambda: metric(relay, "binlog_relay_archive_files") == len(closed)
             and read_index(relay.data_dir)[0] not in closed, 60, "not archived and purged")
    assert [row[0] for row in relay_sql(relay, "SHOW BINARY LOGS")] == [name for name, _ in primary.binlog_files()]
    differences = _differences(_primarys_outcomes(primary.port, _connect_states(_gtids_in_order(primary))), relay.port)
    assert not differences, "\n".join(differences)
    assert metric(relay, "binlog_relay_archive_served_bytes_total") > 0
    assert "Traceback" not in relay.log_text()


def test_search_with_the_config_answers_from_files_only_the_archive_holds(
        mariadb_factory, relay_factory, s3_server, tmp_path):
    """`binlog-relay search --config`: a moment and a GTID in files the relay purged (archived), the
    same answers as a search over the primary's copies of every file."""
    import json
    import sys
    import time

    from relay.storage.index import write_index
    from relay.storage.search import StoredHistory

    primary = mariadb_factory(server_id=1)
    relay = relay_factory("relay", primary.port, metrics={"host": LOOPBACK, "port": free_port()},
                          archive=archive_config(s3_server),
                          storage={"retention": {"max_size": "16K", "min_files": 1, "replica_grace": 0}})
    for _ in range(4):  # a file per second: moments fall in different files
        write_files(primary, 1)
        second = int(time.time())
        wait_for(lambda second=second: time.time() >= second + 1.05, 5)
    wait_for(lambda: relay_holds_the_primarys_newest(relay, primary), 60, "the relay did not catch up")
    closed = closed_files(primary)
    wait_for(lambda: metric(relay, "binlog_relay_archive_files") == len(closed)
             and read_index(relay.data_dir)[0] not in closed, 60, "not archived and purged")
    copies = tmp_path / "primary-copies"
    copies.mkdir()
    for name, _ in primary.binlog_files():
        (copies / name).write_bytes(primary.binlog_path(name).read_bytes())
    write_index(copies, [name for name, _ in primary.binlog_files()])
    oracle = StoredHistory(copies)

    def search(*what: str) -> dict:  # type: ignore[type-arg]
        run = subprocess.run([sys.executable, "-m", "relay.cli", "search", "--config", str(relay.config_path), *what],
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        return json.loads(run.stdout)  # type: ignore[no-any-return]

    # every second from before the history to after it: in each archived file, and in the local one
    first_commit = oracle.at_time(0)["next"]["commit_timestamp"]
    last_commit = oracle.at_time(10**10)["transaction"]["commit_timestamp"]
    assert last_commit - first_commit >= 3
    purged = set(closed) - set(read_index(relay.data_dir))
    answered_from_the_archive = 0
    for moment in range(first_commit - 1, last_commit + 2):
        answer = search("--time", f"@{moment}")
        assert answer == oracle.at_time(moment), moment
        answered_from_the_archive += bool(answer["transaction"]) and answer["transaction"]["file"] in purged
    assert answered_from_the_archive >= 2
    gtids = ["0-1-3", "0-1-8", "0-1-13"]
    for gtid in gtids:
        expected = oracle.holding(gtid)
        assert expected["gtids"][0]["transaction"] is not None
        assert search("--gtid", gtid) == expected, gtid
    assert sum(search("--gtid", gtid)["files"][0] in purged for gtid in gtids) >= 2

    # Without the relay's list of the archive (a relay that never reached the store, a data_dir
    # made by import): the store is listed, the answers are the same.
    assert relay.stop() == 0
    (relay.data_dir / "archive.json").unlink()
    for moment in (first_commit - 1, first_commit, first_commit + 1, last_commit - 1, last_commit + 1):
        assert search("--time", f"@{moment}") == oracle.at_time(moment), moment
    for gtid in gtids:
        assert search("--gtid", gtid) == oracle.holding(gtid), gtid
    # ... and a store that cannot be reached is an error, never an answer that leaves the archive out
    config = json.loads(relay.config_path.read_text())
    config["archive"]["endpoint_url"] = f"http://{LOOPBACK}:{free_port()}"
    unreachable = tmp_path / "unreachable.yaml"
    unreachable.write_text(json.dumps(config))
    run = subprocess.run([sys.executable, "-m", "relay.cli", "search", "--config", str(unreachable), "--time",
                          f"@{first_commit}"], capture_output=True, text=True, timeout=120)
    assert (run.returncode, run.stdout) == (1, ""), run.stdout
    assert run.stderr.startswith("binlog-relay search: the archive: "), run.stderr
