"""`binlog-relay import` with a real MariaDB 10.11 primary: its binlog files, copied as a backup
would be, imported into an empty data_dir; the primary then purges them, yet a relay started on that
data_dir serves them to a real MariaDB replica from the very first file, resumes ingest where the
import ended, and its files stay byte copies of the primary's."""

from __future__ import annotations

import shutil
import subprocess
import sys

from relay.sandbox.compare import copy_differences, mirror_differences
from relay.sandbox.replication import FIRST_FILE, attach_replica, wait_binlog_settled, wait_caught_up
from tests.support.relay import wait_for_mirror
from tests.support.replication import (
    assert_healthy,
    assert_same_data,
    mixed_workload,
)


def test_imported_binlogs_are_served_after_the_primary_purged_them(mariadb_factory, relay_factory, tmp_path):
    primary = mariadb_factory(server_id=1, extra_args=["--max-binlog-size=16384"])
    replica = mariadb_factory(server_id=2)
    mixed_workload(primary, batches=4)
    wait_binlog_settled(primary)
    files = [name for name, _ in primary.binlog_files()]
    assert len(files) >= 3, files
    backup = tmp_path / "backup"
    backup.mkdir()
    for name in files:  # the backup: plain copies of the primary's files, the active one included
        shutil.copy(primary.binlog_path(name), backup / name)

    data_dir = tmp_path / "relay" / "data"
    done = subprocess.run([sys.executable, "-m", "relay.cli", "import", "--data-dir", str(data_dir),
                           *(str(backup / name) for name in files)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert f"imported {len(files)} file(s)" in done.stdout
    assert not mirror_differences(primary, data_dir)

    # The primary moves on and purges what the backup holds, but for the file that was active: the
    # relay resumes in it, as a replica would. (Purged too, when it held no transaction and so no
    # binlog checkpoint kept it, the relay must stop: nothing proves the import holds all of it.)
    primary.sql("FLUSH BINARY LOGS")
    primary.purge_binlogs_to(files[-1])
    mixed_workload(primary, schema="after_import", batches=2)

    relay = relay_factory("relay", primary.port)
    attach_replica(replica, relay.port, use_gtid="no", log_file=FIRST_FILE, log_pos=4)
    wait_caught_up(primary, replica)
    assert_healthy(replica)
    assert_same_data(primary, replica)  # the purged history came from the import, the rest from ingest
    stored = [line[2:] for line in (data_dir / "binlog.index").read_text().splitlines()]
    on_primary = [name for name, _ in primary.binlog_files()]
    assert stored == files + [name for name in on_primary if name not in files]
    for name in files:  # the imported files, untouched: the backup's bytes (the active one grew on)
        if name != files[-1]:
            assert (data_dir / name).read_bytes() == (backup / name).read_bytes()
    # and those the primary still has are byte copies of its own (data_dir holds the purged ones too)
    assert not copy_differences([primary.binlog_path(name) for name in on_primary], data_dir)
    assert relay.stop() == 0
    assert "Traceback" not in relay.log_text()


def test_an_import_completes_and_extends_a_relays_data_dir(mariadb_factory, relay_factory, tmp_path):
    """A relay stopped while the primary's file was open holds a prefix of it; the primary then
    closed it and wrote more files. The complete file and those after it, imported, replace and
    extend the relay's copy; the relay started again continues from their end as a mirror."""
    primary = mariadb_factory(server_id=1, extra_args=["--max-binlog-size=16384"])
    relay = relay_factory("relay", primary.port)
    mixed_workload(primary, batches=2)
    wait_for_mirror(primary, relay)
    assert relay.stop() == 0
    stored = [line[2:] for line in (relay.data_dir / "binlog.index").read_text().splitlines()]
    mixed_workload(primary, schema="while_stopped", batches=2)
    wait_binlog_settled(primary)
    newer = [name for name, _ in primary.binlog_files() if name >= stored[-1]]
    assert len(newer) >= 2, newer
    backup = tmp_path / "backup"
    backup.mkdir()
    for name in newer:
        shutil.copy(primary.binlog_path(name), backup / name)
    done = subprocess.run([sys.executable, "-m", "relay.cli", "import", "--data-dir", str(relay.data_dir),
                           *(str(backup / name) for name in newer)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert not mirror_differences(primary, relay.data_dir)
    mixed_workload(primary, schema="after_import", batches=1)
    relay.start()
    relay.wait_listening()
    wait_for_mirror(primary, relay)
    assert relay.stop() == 0
    assert "Traceback" not in relay.log_text()
