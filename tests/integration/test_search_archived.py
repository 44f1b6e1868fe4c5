"""`binlog-relay search --config` over files only the archive holds, against an oracle: a search over
the primary's own copies of every file (saved before the primary purges them).  The history has
two domains and two server ids, and empty files: a domain and a server id that first show up
after the oldest archived file, pairs that write nothing for a file or two and then again (their
last GTID before a file is in an earlier one), an empty file between two commits, and an empty
file as the newest archived one.  Every GTID of the history, a few that are in none of its files,
and every second from before the first commit to after the last are asked."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from relay.binlog.events import GTID_EVENT, HEADER_LEN
from relay.sandbox.binlogfiles import binlog_events
from relay.sandbox.polling import wait_for
from relay.sandbox.ports import LOOPBACK, free_port
from relay.storage.index import read_index, write_index
from relay.storage.search import StoredHistory
from tests.integration.test_archive import archive_config, closed_files, relay_holds_the_primarys_newest
from tests.support.faults import metric


def next_second() -> None:
    """Wait until the clock is in the next second: what is written then commits a second later."""
    second = int(time.time())
    wait_for(lambda: time.time() >= second + 1.05, 5, "the clock did not move on")


def gtids_of(copies: Path) -> list[tuple[str, str]]:
    """(file, GTID) of every transaction of the files in ``copies``, in binlog order."""
    found = []
    for name in read_index(copies):
        for event in binlog_events(copies / name):
            if event.type == GTID_EVENT:
                seq_no = int.from_bytes(event.data[HEADER_LEN:HEADER_LEN + 8], "little")
                domain = int.from_bytes(event.data[HEADER_LEN + 8:HEADER_LEN + 12], "little")
                found.append((name, f"{domain}-{event.server_id}-{seq_no}"))
    return found


def test_search_answers_from_archived_files_as_over_the_primarys_copies(
        mariadb_factory, relay_factory, s3_server, tmp_path):
    primary = mariadb_factory(server_id=1)
    relay = relay_factory("relay", primary.port, metrics={"host": LOOPBACK, "port": free_port()},
                          archive=archive_config(s3_server),
                          storage={"retention": {"max_size": 1, "min_files": 1, "replica_grace": 0}})
    primary.execute_many(["CREATE DATABASE test", "CREATE TABLE test.t (id INT AUTO_INCREMENT PRIMARY KEY, v TEXT)"])

    def write(domain: int, server_id: int, count: int) -> None:
        primary.execute_many([f"SET SESSION gtid_domain_id = {domain}", f"SET SESSION server_id = {server_id}"]
                             + ["INSERT INTO test.t (v) VALUES (REPEAT(UUID(), 100))"] * count
                             + ["SET SESSION gtid_domain_id = 0", "SET SESSION server_id = 1"])  # one connection

    def close_file(*writes: tuple[int, int, int]) -> None:
        for domain, server_id, count in writes:
            write(domain, server_id, count)
        next_second()  # the next file's commits are a second later
        primary.sql("FLUSH BINARY LOGS")

    close_file((0, 1, 3))                       # 000001: domain 0, server 1 only
    close_file((0, 1, 3))                       # 000002
    close_file()                                # 000003: empty, between two commits
    close_file((1, 1, 3), (0, 2, 2))            # 000004: domain 1 and server id 2 show up
    close_file((0, 1, 2))                       # 000005: neither of them
    close_file((1, 1, 2), (0, 2, 1), (0, 1, 1))  # 000006: both again, their last GTIDs in 000004
    close_file()                                # 000007: empty, the newest archived file
    write(0, 1, 2)                              # 000008: written still, the only local file
    wait_for(lambda: relay_holds_the_primarys_newest(relay, primary), 60, "the relay did not catch up")
    closed = closed_files(primary)
    assert closed[-1] == "mysql-bin.000007", closed
    wait_for(lambda: metric(relay, "binlog_relay_archive_files") == len(closed)
             and read_index(relay.data_dir)[0] not in closed, 60, "not archived and purged")

    copies = tmp_path / "primary-copies"
    copies.mkdir()
    names = [name for name, _ in primary.binlog_files()]
    for name in names:
        (copies / name).write_bytes(primary.binlog_path(name).read_bytes())
    write_index(copies, names)
    primary.purge_binlogs_to(names[-1])  # only the archive holds the closed files now
    oracle = StoredHistory(copies)
    history = gtids_of(copies)
    assert {gtid.rsplit("-", 1)[0] for _, gtid in history} == {"0-1", "0-2", "1-1"}
    assert {name for name, gtid in history if not gtid.startswith("0-1-")} == {"mysql-bin.000004", "mysql-bin.000006"}

    def search(*what: str) -> dict[str, Any]:
        run = subprocess.run([sys.executable, "-m", "relay.cli", "search", "--config", str(relay.config_path), *what],
                             capture_output=True, text=True, timeout=120)
        if run.returncode:
            return {"exit": run.returncode, "stderr": run.stderr}
        return json.loads(run.stdout)  # type: ignore[no-any-return]

    mismatches = []
    # every GTID of the history, and some of none of its files (of known pairs, of unknown ones)
    asked = [gtid for _, gtid in history] + ["0-2-8", "0-2-99", "1-1-99", "1-2-1", "7-1-1"]
    for gtid in asked:
        answer, expected = search("--gtid", gtid), oracle.holding(gtid)
        if answer != expected:
            mismatches.append(f"--gtid {gtid}:\n  relay:  {json.dumps(answer)}\n  oracle: {json.dumps(expected)}")
    # every second from before the first commit to after the last: at each commit, between two
    # (across the empty files), in the archived files and in the local one
    first_commit = oracle.at_time(0)["next"]["commit_timestamp"]
    last_commit = oracle.at_time(10**10)["transaction"]["commit_timestamp"]
    assert last_commit - first_commit >= 7
    for moment in range(first_commit - 1, last_commit + 2):
        answer, expected = search("--time", f"@{moment}"), oracle.at_time(moment)
        if answer != expected:
            mismatches.append(f"--time @{moment}:\n  relay:  {json.dumps(answer)}\n  oracle: {json.dumps(expected)}")
    assert not mismatches, f"{len(mismatches)} answers differ from the oracle's:\n" + "\n".join(mismatches)
