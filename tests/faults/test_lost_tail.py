"""A relay with `storage.sync: none` that a power cut took the tail of, while its replicas had read
it: the replicas, a file/position one and a GTID one, ask for what the relay no longer holds.  A
primary that lost its tail would refuse them (ERR 1236, which stops a replica's IO thread for good);
the relay fetches the tail again from its primary at the same coordinates, so its dumps wait for it
instead (RelayLog.tail_may_be_lost).  The cut is made by hand here (kill -9, then the newest stored
file cut back to an earlier transaction, as a file system that had not written it leaves it), and
the primary refuses the relay's login meanwhile, so that the replicas ask before the tail is back."""

from __future__ import annotations

import json
import os
import signal

from relay.archive.objects import ArchivedFileReader, list_archive
from relay.archive.store import open_store
from relay.binlog.events import GTID_EVENT
from relay.sandbox.binlogfiles import BINLOG_MAGIC, split_events
from relay.sandbox.mariadb import REPL_USER
from relay.sandbox.polling import wait_for
from relay.sandbox.replication import FIRST_FILE, attach_replica, is_stopped, replica_summary
from relay.storage.index import read_index
from tests.integration.test_archive import archive_config, relay_holds_the_primarys_newest, write_files
from tests.support.faults import converged

XID_EVENT = 16
TRANSACTIONS = 40
LOST = 10  # the transactions the cut takes
WAITING = "may have lost what it sent before: waiting for ingest to fetch it again"


def _transaction_ends(data: bytes) -> list[int]:
    """Where each XID event of a stored file's bytes ends."""
    ends, offset = [], len(BINLOG_MAGIC)
    for event in split_events(data[offset:]):
        offset += event.length
        if event.type == XID_EVENT:
            ends.append(offset)
    return ends


def _cut_tail(data_dir, lost: int) -> int:  # type: ignore[no-untyped-def]
    """Cut the newest stored file back by ``lost`` transactions, to a point the relay's checkpoint
    does not name (a checkpoint at the new end would be a clean stop's); returns the new end."""
    newest = data_dir / read_index(data_dir)[-1]
    checkpoint = json.loads((data_dir / "relay-state.json").read_text())["checkpoint"]
    ends = [end for end in _transaction_ends(newest.read_bytes())[:-lost]
            if (checkpoint["file"], checkpoint["position"]) != (newest.name, end)]
    os.truncate(newest, ends[-1])
    return ends[-1]


def _lock_the_relays_login(primary, locked: bool) -> None:  # type: ignore[no-untyped-def]
    primary.sql(f"ALTER USER '{REPL_USER}'@'%' ACCOUNT {'LOCK' if locked else 'UNLOCK'}")


def test_replicas_ahead_of_a_lost_tail_wait_for_it_to_be_fetched_again(mariadb_factory, fault_relay):
    primary = mariadb_factory(server_id=1)
    relay = fault_relay("relay", primary.port, storage={"sync": "none"})
    by_position, by_gtid = mariadb_factory(server_id=11), mariadb_factory(server_id=12)
    attach_replica(by_position, relay.port, log_file=FIRST_FILE, log_pos=4)
    attach_replica(by_gtid, relay.port, use_gtid="slave_pos")
    primary.sql("CREATE DATABASE lost_tail")
    primary.sql("CREATE TABLE lost_tail.t (id INT PRIMARY KEY, note VARCHAR(40))")
    for n in range(1, TRANSACTIONS + 1):
        primary.sql(f"INSERT INTO lost_tail.t VALUES ({n}, 'row {n}')")
    converged(primary, relay, [by_position, by_gtid])  # both replicas hold every transaction

    os.kill(relay.pid, signal.SIGKILL)
    relay.proc.wait(30)
    _lock_the_relays_login(primary, True)
    end = _cut_tail(relay.data_dir, LOST)
    assert int(by_position.slave_status()["Read_Master_Log_Pos"]) > end  # the replica read what was cut
    relay.start()
    relay.wait_listening()
    # Both replicas reconnect (MASTER_CONNECT_RETRY 1 s) and ask for more than the relay holds; the
    # relay cannot fetch it yet (its login is refused): their dumps wait, their IO threads run.
    def both_waiting() -> bool:
        for replica in (by_position, by_gtid):
            status = replica.slave_status()
            assert not is_stopped(status), f"refused instead of waiting: {replica_summary(status)}"
        return relay.log_text().count(WAITING) >= 2

    wait_for(both_waiting, 25, "the replicas' dumps did not wait for the lost tail")
    _lock_the_relays_login(primary, False)
    converged(primary, relay, [by_position, by_gtid])
    rows = by_gtid.sql("SELECT COUNT(*), MAX(id) FROM lost_tail.t")[0]
    assert tuple(map(int, rows)) == (TRANSACTIONS, TRANSACTIONS)


def test_a_closed_file_a_cut_shortened_is_archived_only_once_it_is_whole_again(mariadb_factory, relay_factory,
                                                                               s3_server):
    """A power cut (`sync: none`) that took a closed file's last transaction and its ROTATE leaves
    whole events ending at a group end: the file looks closed.  Archived like that before the
    upstream compares it with the primary's, the short copy would be the one kept once the primary
    purges its own.  Here the primary refuses the relay's login at first: the other closed files
    are archived, that one waits; let in, the relay fetches it again and archives it whole."""
    primary = mariadb_factory(server_id=1)
    relay = relay_factory("relay", primary.port, storage={"sync": "none"})
    write_files(primary, 4)
    wait_for(lambda: relay_holds_the_primarys_newest(relay, primary), 60, "the relay did not catch up")
    relay.stop()
    names = read_index(relay.data_dir)
    cut = names[1]
    data = (relay.data_dir / cut).read_bytes()
    gtid_starts, offset = [], len(BINLOG_MAGIC)
    for event in split_events(data[offset:]):
        if event.type == GTID_EVENT:
            gtid_starts.append(offset)
        offset += event.length
    os.truncate(relay.data_dir / cut, gtid_starts[-1])  # its last transaction and its ROTATE gone

    _lock_the_relays_login(primary, True)
    again = relay_factory("again", primary.port, data_dir=relay.data_dir, archive=archive_config(s3_server),
                          storage={"sync": "none", "retention": {"max_size": "16K", "min_files": 2,
                                                                 "replica_grace": 0}})
    store = open_store(s3_server.store_config(prefix="relay"))
    others = set(names[:-1]) - {cut}
    wait_for(lambda: others <= set(list_archive(store)) and f"archive: {cut} is archived once compared" in
             again.log_text(), 60, "the other closed files were not archived")
    assert cut not in list_archive(store) and cut in read_index(again.data_dir)

    _lock_the_relays_login(primary, False)
    wait_for(lambda: cut in list_archive(store), 90, "the file was not archived once fetched again")
    archived = ArchivedFileReader(store, cut, ())
    assert archived.read(0, archived.size) == primary.binlog_path(cut).read_bytes()
    assert f"stored {cut} repaired" in again.log_text() and "Traceback" not in again.log_text()
