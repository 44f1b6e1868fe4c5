"""The archive with a real primary and a real S3 API server (moto in server mode behind a proxy the
test can take down, tests/support/s3.py): every closed file is uploaded, verified and readable
back byte for byte as the primary wrote it, plain or encrypted; a local file is purged only once
it is archived; with the store down ingest goes on, nothing unarchived is purged, and the backlog
is uploaded once the store is back."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from relay.archive.keys import read_keks
from relay.archive.objects import OBJECT_DIR, ArchivedFileReader, list_archive, object_key
from relay.archive.store import open_store
from relay.sandbox.polling import wait_for
from relay.sandbox.ports import LOOPBACK, free_port
from relay.storage.index import read_index
from tests.support.faults import metric
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


def relay_holds_the_primarys_newest(relay: Any, primary: Any) -> bool:
    names = read_index(relay.data_dir)
    return bool(names) and names[-1] == primary.binlog_files()[-1][0]


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
    closed = [name for name, _ in primary.binlog_files()[:-1]]
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
    primary = mariadb_factory(server_id=1)
    relay = relay_factory("relay", primary.port, metrics={"host": LOOPBACK, "port": free_port()},
                          archive=archive_config(s3_server),
                          storage={"retention": {"max_size": "16K", "min_files": 2, "replica_grace": 0}})
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
