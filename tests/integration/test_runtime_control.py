"""Runtime control of the relay's upstream in SQL (relay/downstream/control.py), with real MariaDB
servers: STOP/START SLAVE, CHANGE MASTER TO and RESET SLAVE answered as a real MariaDB replica
answers them (compared statement by statement with one), ingest paused and resumed, a new upstream
vetted, a failover manager's repoint of the relay between two primaries holding the same history
while a replica of the relay keeps replicating, the repoint kept across a restart, and a fresh relay
started at a GTID (upstream.start.gtid)."""

from __future__ import annotations

import time

from relay.protocol.packets import OkPacket, ServerError
from relay.protocol.resultset import ResultSet
from relay.sandbox.client import BlockingClient
from relay.sandbox.mariadb import REPL_PASSWORD, REPL_USER
from relay.sandbox.polling import POLL_INTERVAL, wait_for
from relay.sandbox.ports import free_port
from relay.sandbox.relayprocess import http_get
from relay.sandbox.replication import attach_replica
from relay.storage.files import first_difference
from tests.support.mariadb import MariaDB
from tests.support.replication import WriteLoad, assert_healthy, assert_same_tables

ADMIN, ADMIN_PASSWORD = "ops", "ops-secret"
USERS = [{"name": REPL_USER, "password": REPL_PASSWORD}, {"name": ADMIN, "password": ADMIN_PASSWORD, "admin": True}]
RELAY_SERVER_ID = 1001
NOTHING_MOVES_FOR = 3.0  # seconds a stopped relay is watched while the primary takes writes


# ------------------------------------------------------------------ talking to servers


def _answer(port: int, user: str, password: str, *statements: str) -> list[tuple]:
    """Each statement's answer on one connection, in a form two servers' answers compare in: an
    error's code, SQLSTATE and message; an OK's warning count and the SHOW WARNINGS that follows it;
    a result set's columns and rows."""
    answers: list[tuple] = []
    with BlockingClient(port, user, password) as client:
        for sql in statements:
            try:
                result = client.query(sql)
            except ServerError as error:
                answers.append(("error", error.code, error.sqlstate, error.message))
                continue
            if isinstance(result, OkPacket):
                shown = client.query("SHOW WARNINGS")
                assert isinstance(shown, ResultSet)
                answers.append(("ok", result.warnings, shown.columns, shown.rows))
            else:
                assert isinstance(result, ResultSet)
                answers.append(("rows", result.columns, result.rows))
    return answers


def _admin(relay, *statements: str) -> list[tuple]:
    return _answer(relay.port, ADMIN, ADMIN_PASSWORD, *statements)


def _ok(answer: tuple) -> bool:
    return answer[:2] == ("ok", 0)


def _slave_status(port: int, user: str = REPL_USER, password: str = REPL_PASSWORD) -> dict[str, object]:
    import pymysql
    import pymysql.cursors

    conn = pymysql.connect(host="127.0.0.1", port=port, user=user, password=password,
                           cursorclass=pymysql.cursors.DictCursor)
    try:
        with conn.cursor() as cursor:
            cursor.execute("SHOW SLAVE STATUS")
            return dict(cursor.fetchone())
    finally:
        conn.close()


def _relay_position(relay) -> tuple[str, int]:
    with BlockingClient(relay.port, REPL_USER, REPL_PASSWORD) as client:
        row = client.rows("SHOW MASTER STATUS")[0]
    return str(row[0]), int(row[1] or 0)


def _gtid_binlog_pos(server: MariaDB) -> str:
    return str(server.sql("SELECT @@GLOBAL.gtid_binlog_pos")[0][0])


def _dumping_from(server: MariaDB) -> set[int]:
    """The server_ids with a binlog dump open on ``server`` (SHOW SLAVE HOSTS lists a registered
    replica until its dump thread ends)."""
    return {int(row[0]) for row in server.sql("SHOW SLAVE HOSTS")}


def _wait_applied(replica: MariaDB, source: MariaDB, what: str, timeout: float = 60.0) -> None:
    """Until ``replica`` executed everything ``source`` logged; fails at once if a thread stopped."""
    def caught_up() -> bool:
        status = replica.slave_status()
        if status and "No" in (status["Slave_IO_Running"], status["Slave_SQL_Running"]):
            raise AssertionError(f"{what} stopped: {status['Last_IO_Error']} {status['Last_SQL_Error']}")
        return str(replica.sql("SELECT @@GLOBAL.gtid_slave_pos")[0][0]) == _gtid_binlog_pos(source)
    wait_for(caught_up, timeout, f"{what} did not catch up with server_id {source.server_id}")


def _writes(server: MariaDB, schema: str, first: int, count: int) -> None:
    server.execute_many([f"CREATE DATABASE IF NOT EXISTS {schema}",
                         f"CREATE TABLE IF NOT EXISTS {schema}.t (id INT PRIMARY KEY, v VARCHAR(64))"]
                        + [f"INSERT INTO {schema}.t VALUES ({i}, 'row {i} on server_id {server.server_id}')"
                           for i in range(first, first + count)])


def _metric(port: int, name: str) -> float:
    for line in http_get(port, "/metrics")[1].splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} not in the relay's metrics")


def _change_master_to(server: MariaDB, use_gtid: str = "slave_pos") -> str:
    return (f"CHANGE MASTER TO MASTER_HOST = '127.0.0.1', master_port = {server.port}, MASTER_USER = '{REPL_USER}', "
            f"MASTER_PASSWORD = \"{REPL_PASSWORD}\", MASTER_USE_GTID = {use_gtid}")


# ------------------------------------------------------------------ the statements, as a replica answers them


def test_the_statements_are_answered_as_a_mariadb_replica_answers_them(mariadb_factory, relay_factory):
    primary = mariadb_factory(server_id=1)
    replica = mariadb_factory(server_id=2)  # the oracle: a real replica of the same primary
    attach_replica(replica, primary.port, use_gtid="slave_pos")
    relay = relay_factory("relay", primary.port, users=USERS)
    wait_for(lambda: RELAY_SERVER_ID in _dumping_from(primary), 30, "the relay did not connect")

    def both(user: str, *statements: str) -> tuple[list[tuple], list[tuple]]:
        theirs = _answer(replica.port, user, REPL_PASSWORD if user == REPL_USER else "", *statements)
        ours = _answer(relay.port, user if user == REPL_USER else ADMIN,
                       REPL_PASSWORD if user == REPL_USER else ADMIN_PASSWORD, *statements)
        return theirs, ours

    # Without the privilege (repl lacks REPLICATION SLAVE ADMIN and RELOAD; on the relay it is not admin)
    theirs, ours = both(REPL_USER, "STOP SLAVE", "START SLAVE", "STOP REPLICA", "START REPLICA",
                        "CHANGE MASTER TO MASTER_HOST='127.0.0.1'", "RESET SLAVE", "RESET SLAVE ALL")
    assert ours == theirs and all(answer[:2] == ("error", 1227) for answer in ours), ours
    # What the grammar refuses, refused with the same words (root on the replica, the admin on the relay)
    statements = ["CHANGE MASTER TO MASTER_FOO=1", "CHANGE MASTER TO MASTER_PORT='3306'",
                  "change master to master_host=db2", "CHANGE MASTER TO", "CHANGE MASTER TO MASTER_HOST='a',",
                  "CHANGE MASTER TO MASTER_HOST='a' MASTER_PORT=1", "CHANGE MASTER TO MASTER_USE_GTID='slave_pos'",
                  "CHANGE MASTER TO MASTER_PORT=-1", "CHANGE MASTER TO MASTER_SSL_VERIFY_SERVER_CERT=ON",
                  "STOP SLAVE FOO", "STOP SLAVES", "CHANGE MASTER TO MASTER_HOST='a', /* a comment */\n  MASTER_X=2",
                  "RESET SLAVE ALL ALL"]
    theirs, ours = both("root", *statements)
    assert ours == theirs and all(answer[:2] == ("error", 1064) for answer in ours), ours
    # Running: START SLAVE warns, CHANGE MASTER TO and RESET SLAVE want it stopped; then STOP SLAVE twice
    sequence = ["START SLAVE", "START REPLICA", "CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_USE_GTID=slave_pos",
                "RESET SLAVE", "STOP SLAVE", "STOP SLAVE", "STOP REPLICA"]
    theirs, ours = both("root", *sequence)
    assert ours == theirs, ours
    assert [answer[:2] for answer in ours] == [("ok", 1), ("ok", 1), ("error", 1198), ("error", 1198), ("ok", 0),
                                               ("ok", 1), ("ok", 1)]
    assert ours[5][3] == (("Note", "1255", "Slave already has been stopped"),)
    # Stopped: START SLAVE twice; START SLAVE's warning is the replica's too
    theirs, ours = both("root", "START SLAVE", "START SLAVE")
    assert ours == theirs and [answer[:2] for answer in ours] == [("ok", 0), ("ok", 1)], ours
    # Accepted by the grammar but not by the relay: ER_NOT_SUPPORTED_YET, naming what it does not do
    for sql, named in (("CHANGE MASTER TO MASTER_LOG_FILE='mysql-bin.000001', MASTER_LOG_POS=4", "MASTER_LOG_FILE"),
                       ("CHANGE MASTER 'other' TO MASTER_HOST='x'", "'other'"),
                       ("START SLAVE UNTIL MASTER_GTID_POS='0-1-5'", "UNTIL"),
                       ("CHANGE MASTER TO IGNORE_SERVER_IDS=(1, 2)", "IGNORE_SERVER_IDS")):
        answer = _admin(relay, sql)[0]
        assert answer[:3] == ("error", 1235, "42000") and named in answer[3], (sql, answer)


# ------------------------------------------------------------------ STOP SLAVE / START SLAVE, a refused upstream


def test_stop_slave_pauses_ingest_and_a_server_without_the_history_is_refused(mariadb_factory, relay_factory):
    primary = mariadb_factory(server_id=1)
    unrelated = mariadb_factory(server_id=3)
    _writes(unrelated, "other", 0, 5)  # a history of its own
    metrics_port = free_port()
    relay = relay_factory("relay", primary.port, users=USERS, metrics={"host": "127.0.0.1", "port": metrics_port})
    downstream = mariadb_factory(server_id=11)
    attach_replica(downstream, relay.port, use_gtid="slave_pos")
    _writes(primary, "shop", 0, 20)
    _wait_applied(downstream, primary, "the relay's replica")
    assert _admin(relay, "STOP SLAVE") == [("ok", 0, ("Level", "Code", "Message"), ())]
    # The connection to the primary is closed: its dump thread for the relay ends.
    wait_for(lambda: RELAY_SERVER_ID not in _dumping_from(primary), 30, "the relay's dump on the primary went on")
    assert http_get(metrics_port, "/readyz") == (200, "ready; ingest stopped (STOP SLAVE): serving what is stored\n")
    assert _metric(metrics_port, "binlog_relay_upstream_stopped") == 1
    assert _metric(metrics_port, "binlog_relay_upstream_connected") == 0
    # SHOW SLAVE STATUS says stopped, as a stopped replica's does
    shown = _slave_status(relay.port)
    assert (shown["Slave_IO_Running"], shown["Slave_SQL_Running"]) == ("No", "No"), shown
    assert shown["Master_Port"] == primary.port
    stopped_at = _relay_position(relay)
    with WriteLoad(primary) as load:
        wait_for(lambda: load.commits >= 20, 30, "the primary took no writes")
        deadline = time.monotonic() + NOTHING_MOVES_FOR
        while time.monotonic() < deadline:
            assert _relay_position(relay) == stopped_at, "the relay stored writes while stopped"
            time.sleep(POLL_INTERVAL)
        commits_while_stopped = load.commits
    assert commits_while_stopped > 20 and primary.master_status() != stopped_at
    assert_healthy(downstream)  # served from what is stored all along
    # A server that does not hold the relay's history is refused; the relay keeps its upstream.
    refused = _admin(relay, _change_master_to(unrelated))[0]
    assert refused[:3] == ("error", 1593, "HY000"), refused
    assert f"127.0.0.1:{unrelated.port}' cannot be followed" in refused[3], refused
    assert "which the relay never stored" in refused[3] or "which the relay stored" in refused[3], refused
    assert f"keeps its upstream 127.0.0.1:{primary.port}" in refused[3], refused
    unreachable = _admin(relay, f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={free_port()}")[0]
    assert unreachable[:3] == ("error", 1218, "08S01"), unreachable
    assert not (relay.data_dir / "upstream.json").exists()
    assert _admin(relay, "START SLAVE") == [("ok", 0, ("Level", "Code", "Message"), ())]
    wait_for(lambda: _relay_position(relay) == primary.master_status(), 30, "the relay did not catch up")
    _writes(primary, "shop", 100, 5)
    _wait_applied(downstream, primary, "the relay's replica")
    assert_same_tables(primary, downstream)
    assert http_get(metrics_port, "/readyz")[0] == 200 and _metric(metrics_port, "binlog_relay_upstream_stopped") == 0
    assert RELAY_SERVER_ID not in _dumping_from(unrelated)


# ------------------------------------------------------------------ the repoint a failover manager makes


def _switch_over(old: MariaDB, new: MariaDB) -> None:
    """A planned switchover: ``old`` stops taking writes, ``new`` catches up and is promoted, ``old``
    replicates from it."""
    old.sql("SET GLOBAL read_only = 1")
    _wait_applied(new, old, f"server_id {new.server_id}")
    new.execute_many(["STOP SLAVE", "RESET SLAVE ALL", "SET GLOBAL read_only = 0"])
    attach_replica(old, new.port, use_gtid="current_pos")  # its own transactions are its position
    old.sql("SET GLOBAL read_only = 0")  # as it was; the test writes on the primary only


def _repoint_relay(relay, old: MariaDB, new: MariaDB) -> None:
    """What a failover manager sends the relay, as it would a replica; the relay's dump moves from
    ``old`` to ``new``."""
    assert _ok(_admin(relay, "STOP SLAVE")[0])
    wait_for(lambda: RELAY_SERVER_ID not in _dumping_from(old), 30, "the relay's dump on the old primary went on")
    answers = _admin(relay, _change_master_to(new), "START SLAVE")
    assert all(_ok(answer) for answer in answers), answers
    wait_for(lambda: RELAY_SERVER_ID in _dumping_from(new), 30,
             f"the relay did not connect to server_id {new.server_id}")


def test_the_relay_is_repointed_between_two_primaries_while_its_replica_keeps_replicating(
        mariadb_factory, relay_factory):
    first = mariadb_factory(server_id=1, extra_args=["--log-slave-updates=1"])
    second = mariadb_factory(server_id=2, extra_args=["--log-slave-updates=1"])
    attach_replica(second, first.port, use_gtid="slave_pos")
    relay = relay_factory("relay", first.port, users=USERS)
    by_gtid = mariadb_factory(server_id=11)  # replicates from the relay throughout
    attach_replica(by_gtid, relay.port, use_gtid="slave_pos")
    moved = mariadb_factory(server_id=12)  # a replica moved to the relay and back by CHANGE MASTER TO
    attach_replica(moved, first.port, use_gtid="slave_pos")
    _writes(first, "shop", 0, 30)
    _wait_applied(moved, first, "the replica of the first primary")
    # A replica moves from the primary to the relay as from one primary to another.
    moved.execute_many(["STOP SLAVE", f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={relay.port}",
                        "START SLAVE"])
    _writes(first, "shop", 30, 10)
    _wait_applied(moved, first, "the replica moved to the relay")
    _wait_applied(by_gtid, first, "the relay's replica")
    assert RELAY_SERVER_ID not in _dumping_from(second)

    with WriteLoad(first) as load:
        wait_for(lambda: load.commits >= 50, 30, "no writes on the first primary")
    _switch_over(first, second)
    _repoint_relay(relay, first, second)
    saved = relay.data_dir / "upstream.json"
    assert saved.stat().st_mode & 0o777 == 0o600
    with WriteLoad(second, schema="second") as load:
        wait_for(lambda: load.commits >= 50, 30, "no writes on the second primary")
    _wait_applied(by_gtid, second, "the relay's replica, after the repoint")
    _wait_applied(moved, second, "the replica moved to the relay, after the repoint")

    # A restart on the same data_dir follows the CHANGE MASTER TO, not the YAML's upstream (the first).
    assert relay.stop() == 0
    relay.start()
    relay.wait_listening()
    # logged as the upstream starts, which may be just after the listener
    followed = f"upstream {REPL_USER}@127.0.0.1:{second.port} (MASTER_USE_GTID=slave_pos, from CHANGE MASTER)"
    wait_for(lambda: followed in relay.log_text(), 30, f"the restarted relay did not log {followed!r}")
    wait_for(lambda: RELAY_SERVER_ID in _dumping_from(second), 30, "the restarted relay did not follow the second")
    assert RELAY_SERVER_ID not in _dumping_from(first)
    shown = _slave_status(relay.port)  # the effective upstream: the CHANGE MASTER TO's
    assert (shown["Master_Port"], shown["Using_Gtid"], shown["Slave_SQL_Running"]) == (second.port, "Slave_Pos", "Yes")
    _writes(second, "shop", 100, 10)
    _wait_applied(by_gtid, second, "the relay's replica, after the restart")

    # And back, by the same statements.
    _switch_over(second, first)
    _repoint_relay(relay, second, first)
    with WriteLoad(first, schema="back") as load:
        wait_for(lambda: load.commits >= 50, 30, "no writes on the first primary again")
    _wait_applied(by_gtid, first, "the relay's replica, back on the first")
    _wait_applied(moved, first, "the replica moved to the relay, back on the first")
    # The moved replica goes back to the primary by CHANGE MASTER TO, as from one primary to another.
    moved.execute_many(["STOP SLAVE", f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={first.port}",
                        "START SLAVE"])
    _writes(first, "shop", 200, 10)
    _wait_applied(moved, first, "the replica moved back to the primary")
    _wait_applied(by_gtid, first, "the relay's replica, at the end")
    _wait_applied(second, first, "the second primary, now a replica")
    assert_same_tables(first, second, by_gtid, moved)
    assert_healthy(by_gtid)

    # RESET SLAVE forgets the CHANGE MASTER TO: the YAML's upstream (the first primary) again.
    assert _ok(_admin(relay, "STOP SLAVE")[0])
    wait_for(lambda: RELAY_SERVER_ID not in _dumping_from(first), 30, "the relay's dump went on")
    assert all(_ok(answer) for answer in _admin(relay, "RESET SLAVE ALL", "START SLAVE"))
    assert not saved.exists()
    wait_for(lambda: RELAY_SERVER_ID in _dumping_from(first), 30, "the relay did not follow the YAML's upstream")
    _writes(first, "shop", 300, 5)
    _wait_applied(by_gtid, first, "the relay's replica, after RESET SLAVE")
    log = relay.log_text()
    assert REPL_PASSWORD not in log and "switching from" in log and relay.alive()


# ------------------------------------------------------------------ upstream.start.gtid


def test_a_fresh_relay_starts_with_the_file_holding_upstream_start_gtid(mariadb_factory, relay_factory):
    primary = mariadb_factory(server_id=1)
    _writes(primary, "early", 0, 5)
    primary.sql("FLUSH BINARY LOGS")
    _writes(primary, "shop", 0, 4)
    middle = _gtid_binlog_pos(primary)  # a GTID in the middle of the second file
    _writes(primary, "shop", 4, 4)
    primary.sql("FLUSH BINARY LOGS")
    _writes(primary, "late", 0, 3)
    files = [name for name, _ in primary.binlog_files()]
    assert len(files) == 3
    relay = relay_factory("relay", primary.port, upstream={"start": {"gtid": middle}})
    wait_for(lambda: _relay_position(relay) == primary.master_status(), 30, "the relay did not catch up")
    assert relay.stored_files() == files[1:]
    # The file holding the GTID is stored whole, a byte copy of the primary's, and so is the next.
    assert first_difference(primary.binlog_path(files[1]), relay.data_dir / files[1], active=False) is None
    _writes(primary, "late", 3, 5)
    _wait_mirrored_from(primary, relay, files[1])


def _wait_mirrored_from(primary: MariaDB, relay, first: str) -> None:
    """Until the relay stores the primary's files from ``first`` on, each a byte copy (the active one
    but for the in-use flag)."""
    def mirrored() -> bool:
        relay.check_alive()
        names = [name for name, _ in primary.binlog_files()]
        names = names[names.index(first):]
        if relay.stored_files() != names or _relay_position(relay) != primary.master_status():
            return False
        return all(first_difference(primary.binlog_path(name), relay.data_dir / name, active=name == names[-1]) is None
                   for name in names)
    wait_for(mirrored, 30, "the relay's files are not the primary's")
