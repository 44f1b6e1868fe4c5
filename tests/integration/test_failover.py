"""The relay follows its primary through a failover (upstream.hosts), with real MariaDB servers:
primary P, its GTID replica R (log_slave_updates), and replicas of the relay in GTID mode (D1)
and file/position mode (D2), neither reconfigured.  P is killed, R promoted; the relay moves to R
by GTID into its own files, and the replicas carry on across the relay's ROTATE."""

from __future__ import annotations

import subprocess

import pytest

from relay.sandbox.binlogfiles import GTID_EVENT, HEADER_LEN, binlog_events
from relay.sandbox.polling import wait_for
from relay.sandbox.ports import free_port
from relay.sandbox.relayprocess import http_get
from relay.sandbox.replication import FIRST_FILE, attach_replica
from tests.support.mariadb import MariaDB
from tests.support.relay import wait_for_mirror
from tests.support.replication import WriteLoad, assert_same_tables

SMALL_BINLOGS = "--max-binlog-size=16384"
ROTATE_EVENT, FORMAT_DESCRIPTION_EVENT, GTID_LIST_EVENT = 4, 15, 163


def _gtid_binlog_pos(server: MariaDB) -> str:
    return str(server.sql("SELECT @@GLOBAL.gtid_binlog_pos")[0][0])


def _gtid_slave_pos(server: MariaDB) -> str:
    return str(server.sql("SELECT @@GLOBAL.gtid_slave_pos")[0][0])


def _hosts(*servers: MariaDB) -> dict:
    return {"host": None, "hosts": [{"host": "127.0.0.1", "port": server.port} for server in servers]}


def _wait_applied(replica: MariaDB, source: MariaDB, what: str, timeout: float = 90.0) -> None:
    """Until the replica applied everything ``source`` logged; fails at once if a thread stopped."""
    def caught_up() -> bool:
        status = replica.slave_status()
        if status and "No" in (status["Slave_IO_Running"], status["Slave_SQL_Running"]):
            raise AssertionError(f"{what} stopped: {status['Last_IO_Error']} {status['Last_SQL_Error']}")
        return _gtid_slave_pos(replica) == _gtid_binlog_pos(source)
    wait_for(caught_up, timeout, f"{what} did not catch up")


def _promote(replica: MariaDB) -> None:
    replica.execute_many(["STOP SLAVE", "RESET SLAVE ALL", "SET GLOBAL read_only = 0"])


@pytest.mark.parametrize("crash", [False, True], ids=["clean", "kill9-during-switch"])
def test_the_relay_follows_a_promoted_replica_and_its_replicas_carry_on(mariadb_factory, relay_factory, crash):
    primary = mariadb_factory(server_id=1, extra_args=[SMALL_BINLOGS])
    standby = mariadb_factory(server_id=2, extra_args=[SMALL_BINLOGS, "--log-slave-updates=1"])
    attach_replica(standby, primary.port, use_gtid="slave_pos")
    relay = relay_factory("relay", primary.port, upstream=_hosts(primary, standby))
    by_gtid = mariadb_factory(server_id=11)
    by_position = mariadb_factory(server_id=12)
    attach_replica(by_gtid, relay.port, use_gtid="slave_pos")
    attach_replica(by_position, relay.port, use_gtid="no", log_file=FIRST_FILE, log_pos=4)
    load = WriteLoad(primary).start()
    wait_for(lambda: load.commits >= 300, 60, "the write load did not get going")
    load.stop()
    _wait_applied(standby, primary, "the standby")
    wait_for_mirror(primary, relay)
    stored_before = relay.stored_files()
    primary.kill()
    _promote(standby)
    with WriteLoad(standby) as after:
        if crash:  # as soon as the relay begins its own files, and twice more as they grow
            wait_for(lambda: "into a new file of the relay's own" in relay.log_text(), 60, "no switch began")
            for _ in range(3):
                stored = _stored_bytes(relay)
                wait_for(lambda stored=stored: _stored_bytes(relay) > stored, 60, "the relay stored nothing more")
                relay.kill9()
                relay.start()
                relay.wait_listening()
        wait_for(lambda: after.commits >= 300, 60, "no writes on the promoted standby")
    wait_for(lambda: "switching from" in relay.log_text(), 60, "the relay did not switch to the standby")
    _wait_applied(by_gtid, standby, "the GTID replica of the relay")
    _wait_applied(by_position, standby, "the file/position replica of the relay")
    assert_same_tables(standby, by_gtid, by_position)
    assert by_position.slave_status()["Using_Gtid"] == "No"
    # The old files are kept as they were, but for the last one, closed by the relay's ROTATE;
    # the promoted primary's transactions are in files of the relay's own after it.
    files = relay.stored_files()
    assert files[:len(stored_before)] == stored_before and len(files) > len(stored_before)
    closed = binlog_events(relay.data_dir / stored_before[-1])
    assert closed[-1].type == ROTATE_EVENT and closed[-1].data[HEADER_LEN + 8:-4].decode() == files[len(stored_before)]
    opened = binlog_events(relay.data_dir / files[len(stored_before)])
    assert [e.type for e in opened[:2]] == [FORMAT_DESCRIPTION_EVENT, GTID_LIST_EVENT]
    assert opened[0].server_id == standby.server_id
    assert {e.server_id for e in opened if e.type == GTID_EVENT} == {standby.server_id}
    # mariadb-binlog reads the stored files, old and own, as one history
    dump = subprocess.run(["mariadb-binlog", *(str(relay.data_dir / name) for name in files)],
                          capture_output=True, text=True, timeout=120)
    assert dump.returncode == 0, dump.stderr
    assert f"GTID 0-2-{_gtid_binlog_pos(standby).rsplit('-', 1)[1]}" in dump.stdout
    assert "refusing to mix" not in relay.log_text() and relay.alive()


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} not in the relay's metrics")


def _stored_bytes(relay) -> int:
    return sum((relay.data_dir / name).stat().st_size for name in relay.stored_files()
               if (relay.data_dir / name).exists())


def _stored_sizes(relay) -> list[tuple[str, int]]:
    return [(name, (relay.data_dir / name).stat().st_size) for name in relay.stored_files()]


def test_behind_and_diverged_candidates_are_refused_and_a_lagging_one_catches_up_from_the_relay(
        mariadb_factory, relay_factory):
    primary = mariadb_factory(server_id=1)
    lagging = mariadb_factory(server_id=2, extra_args=["--log-slave-updates=1"])
    errant = mariadb_factory(server_id=3, extra_args=["--log-slave-updates=1"])
    for standby in (lagging, errant):
        attach_replica(standby, primary.port, use_gtid="slave_pos")
    metrics_port = free_port()
    relay = relay_factory("relay", primary.port, upstream=_hosts(primary, lagging, errant),
                          metrics={"host": "127.0.0.1", "port": metrics_port})
    by_gtid = mariadb_factory(server_id=11)
    attach_replica(by_gtid, relay.port, use_gtid="slave_pos")
    primary.execute_many(["CREATE DATABASE f", "CREATE TABLE f.t (id INT PRIMARY KEY, v VARCHAR(40))"]
                         + [f"INSERT INTO f.t VALUES ({i}, 'before')" for i in range(20)])
    _wait_applied(lagging, primary, "the lagging standby")
    _wait_applied(errant, primary, "the errant standby")
    errant.sql("INSERT INTO f.t VALUES (1000, 'errant')")  # a transaction of its own: 0-3-23
    lagging.stop_slave()
    primary.execute_many([f"INSERT INTO f.t VALUES ({i}, 'only the relay has it')" for i in range(20, 30)])
    _wait_applied(errant, primary, "the errant standby")
    wait_for_mirror(primary, relay)
    stored = _stored_sizes(relay)
    primary.kill()
    _promote(lagging)
    _promote(errant)
    wait_for(lambda: "refused (behind)" in relay.log_text() and "refused (diverged)" in relay.log_text(), 60,
             "the relay did not refuse both standbys")
    log = relay.log_text()
    assert "lacks 0-1-32, which the relay stored" in log  # the lagging one stopped at 0-1-22
    assert "has 0-3-23, which the relay never stored" in log
    assert _stored_sizes(relay) == stored  # nothing taken from either
    metrics = http_get(metrics_port, "/metrics")[1]
    for reason in ("behind", "diverged"):
        assert _metric(metrics, f'binlog_relay_upstream_candidates_refused_total{{reason="{reason}"}}') >= 1
    # The lossless promotion: the lagging standby takes what only the relay has from the relay,
    # and is followed once it holds everything (while it replicates it is refused as a replica).
    attach_replica(lagging, relay.port, use_gtid="slave_pos")
    wait_for(lambda: _gtid_slave_pos(lagging) == "0-1-32", 60, "the lagging standby did not catch up from the relay")
    _promote(lagging)
    lagging.sql("INSERT INTO f.t VALUES (2000, 'after the promotion')")
    wait_for(lambda: "switching from" in relay.log_text(), 60, "the relay did not follow the caught-up standby")
    _wait_applied(by_gtid, lagging, "the GTID replica of the relay")
    assert_same_tables(lagging, by_gtid)
    assert by_gtid.sql("SELECT COUNT(*) FROM f.t WHERE v = 'only the relay has it'") == [(10,)]
    metrics = http_get(metrics_port, "/metrics")[1]
    assert _metric(metrics, "binlog_relay_upstream_switches_total") == 1
    assert _metric(metrics, f'binlog_relay_upstream_current{{candidate="127.0.0.1:{lagging.port}"}}') == 1
    assert "has 0-3-23" in relay.log_text() and relay.alive()
