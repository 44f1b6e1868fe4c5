"""`binlog-relay search --gtid` with a MySQL GTID set over archived files: which of them hold part
of it.  No MySQL server can run here: the local file is one MySQL 8.0.40 wrote
(tests/fixtures/mysql, PREVIOUS_GTIDS b9b88c66-...:1-2 and no transaction), and the archived files before it are
entries of the relay's list of the archive (archive.json), where their PREVIOUS_GTIDS are kept, so
no store is asked."""

from __future__ import annotations

import shutil
from pathlib import Path

from relay.archive.archiver import ArchiveSettings, save_catalog
from relay.archive.objects import ArchivedFile
from relay.archive.search import ArchivedHistory
from relay.archive.store import StoreConfig
from relay.storage.importer import import_binlogs
from relay.storage.search import StoredHistory

UUID = "b9b88c66-0755-11f1-9899-4a9da94c4d71"
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "mysql" / "binlog_transaction_previous_GTID_no_tag.000001"
URL = "s3://bucket/relay"


def _archived(name: str, previous_gtids: str | None) -> ArchivedFile:
    return ArchivedFile(name, 1000, 500, False, 0.0, (), previous_gtids=previous_gtids)


def test_archived_mysql_files_hold_what_the_next_files_previous_gtids_adds(tmp_path: Path) -> None:
    source = tmp_path / "mysql-bin.000004"
    shutil.copyfile(FIXTURE, source)
    data_dir = tmp_path / "data"
    import_binlogs(data_dir, [source])
    save_catalog(data_dir, URL, {
        "mysql-bin.000001": _archived("mysql-bin.000001", ""),  # the first file: nothing before it
        "mysql-bin.000002": _archived("mysql-bin.000002", f"{UUID}:1"),
        "mysql-bin.000003": _archived("mysql-bin.000003", f"{UUID}:1"),  # 000002 held no transaction
    })
    history = ArchivedHistory(ArchiveSettings(StoreConfig(URL)), data_dir)
    wanted = f"{UUID}:1-7"
    local = StoredHistory(data_dir).holding(wanted)
    assert local["files"] == []  # the fixture holds its PREVIOUS_GTIDS and no transaction
    found = history.holding(wanted, local)
    # the local 000004 starts after :1-2, so 000003 holds :2
    assert found["files"] == [{"file": "mysql-bin.000001", "gtids": f"{UUID}:1"},
                              {"file": "mysql-bin.000003", "gtids": f"{UUID}:2"}, *local["files"]]
    assert found["gtid_set"] == local["gtid_set"]
