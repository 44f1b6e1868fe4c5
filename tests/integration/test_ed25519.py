"""MariaDB's ed25519 authentication against real servers, on both legs of the relay: the relay logs
in to a primary whose replication account is IDENTIFIED VIA ed25519, and serves an ed25519 user
(its hash copied from the primary's mysql.user) to PyMySQL, the mariadb client and a MariaDB
replica.  The primary is the oracle for the hashes, the answers and the refusals."""

from __future__ import annotations

import glob
import subprocess
import sys
from pathlib import Path

import pymysql
import pytest

from relay.protocol.client import AuthenticationError
from relay.sandbox.mariadb import find_program
from relay.sandbox.polling import wait_for
from relay.sandbox.ports import LOOPBACK
from relay.sandbox.replication import wait_caught_up
from tests.support.mariadb import MariaDB
from tests.support.relay import wait_for_mirror
from tests.support.replication import assert_healthy, assert_same_data, mixed_workload

ED_USER, ED_PASSWORD = "edrepl", "ed-S3cret pw"
# Debian ships the client side of the plugin with libmariadb3, outside mariadbd's plugin_dir, where
# a replica's IO thread looks for it.
CLIENT_PLUGIN_GLOB = "/usr/lib/*/libmariadb3/plugin/client_ed25519.so"


def _ed25519_account(server: MariaDB, user: str, password: str) -> str:
    """CREATE USER ... IDENTIFIED VIA ed25519 (with REPLICATION SLAVE) out of the binlog, since a
    replica has no auth_ed25519 to replay it with; returns the hash mysql.user keeps for it."""
    server.sql("SET sql_log_bin = 0")  # the thread's one cached connection runs all of these
    try:
        server.sql("INSTALL SONAME 'auth_ed25519'")
        server.sql("CREATE USER %s@'%%' IDENTIFIED VIA ed25519 USING PASSWORD(%s)", user, password)
        server.sql("GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO %s@'%%'", user)
    finally:
        server.sql("SET sql_log_bin = 1")
    rows = server.sql("SELECT plugin, authentication_string FROM mysql.user WHERE user = %s", user)
    assert rows and rows[0][0] == "ed25519", rows
    return str(rows[0][1])


def _hash_password(password: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "relay.cli", "hash-password", "--plugin", "ed25519"],
                          input=password + "\n", capture_output=True, text=True, timeout=60)


def test_hash_password_is_what_mariadb_keeps_and_the_primary_takes_our_signature(primary):
    for number, password in enumerate(["s3cret-pw", "pässwörd ✓ with spaces", "x" * 200]):
        stored = _ed25519_account(primary, f"ed{number}", password)
        result = _hash_password(password)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == stored
        # the relay's own client signs the primary's nonce, as it does when it replicates
        primary.client(user=f"ed{number}", password=password).quit()
        with pytest.raises(AuthenticationError, match=r"1045.*using password: YES"):
            primary.client(user=f"ed{number}", password=password + "!")
    # PASSWORD('') keeps an empty string, which no ed25519 login matches: the relay refuses to hash it
    assert _ed25519_account(primary, "edempty", "") == ""
    assert _hash_password("").returncode == 1


def _replica_plugin_dir(tmp_path: Path) -> Path:
    found = glob.glob(CLIENT_PLUGIN_GLOB)
    assert found, f"no {CLIENT_PLUGIN_GLOB}: install libmariadb3 (mariadb-client depends on it)"
    plugin_dir = tmp_path / "replica-plugins"
    plugin_dir.mkdir()
    (plugin_dir / "client_ed25519.so").symlink_to(found[0])
    return plugin_dir


def _pymysql(port: int, password: str) -> pymysql.connections.Connection:
    return pymysql.connect(host=LOOPBACK, port=port, user=ED_USER, password=password, connect_timeout=10)


def _answer(port: int, sql: str) -> tuple[list[str], list[tuple]]:
    conn = _pymysql(port, ED_PASSWORD)
    try:
        with conn.cursor() as cursor:
            cursor.execute(sql)
            return [column[0] for column in cursor.description], list(cursor.fetchall())
    finally:
        conn.close()


def _refusal(port: int, password: str) -> tuple[int, str]:
    with pytest.raises(pymysql.err.OperationalError) as refused:
        _pymysql(port, password)
    return refused.value.args


def _mariadb_client(port: int, password: str, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([find_program("mariadb"), f"--host={LOOPBACK}", f"--port={port}", f"--user={ED_USER}",
                           f"--password={password}", *options, "-N", "-B", "-e", "SELECT @@gtid_binlog_pos"],
                          capture_output=True, text=True, timeout=30)


def test_ed25519_on_both_legs(mariadb_factory, relay_factory, tmp_path):
    primary = mariadb_factory(server_id=1, extra_args=["--max-binlog-size=16384"])
    replica = mariadb_factory(server_id=2, extra_args=[f"--plugin-dir={_replica_plugin_dir(tmp_path)}"])
    stored = _ed25519_account(primary, ED_USER, ED_PASSWORD)
    relay = relay_factory("relay", primary.port, upstream={"user": ED_USER, "password": ED_PASSWORD},
                          users=[{"name": ED_USER, "password_hash": stored}])
    replica.change_master(LOOPBACK, relay.port, user=ED_USER, password=ED_PASSWORD,
                          log_file="mysql-bin.000001", log_pos=4)
    replica.start_slave()
    mixed_workload(primary, batches=3)

    # upstream: the relay logged in to the primary with client_ed25519 and copied its binlogs
    wait_for_mirror(primary, relay)
    # downstream: a MariaDB replica logged in to the relay as the ed25519 user and replicated it all
    wait_caught_up(primary, replica)
    assert_healthy(replica)
    assert_same_data(primary, replica)

    # PyMySQL (client_ed25519 over PyNaCl) and the mariadb client (libmariadb's plugin) get the primary's answers
    for sql in ("SHOW BINARY LOGS", "SELECT @@gtid_binlog_pos"):
        assert _answer(relay.port, sql) == _answer(primary.port, sql)
    # (also when it starts with client_ed25519 instead of the greeting's mysql_native_password)
    for options in ((), ("--default-auth=client_ed25519",)):
        cli, at_primary = _mariadb_client(relay.port, ED_PASSWORD, *options), _mariadb_client(primary.port, ED_PASSWORD)
        assert cli.returncode == at_primary.returncode == 0, (options, cli.stderr, at_primary.stderr)
        assert cli.stdout == at_primary.stdout
    # a wrong or empty password: the primary's 1045, word for word
    for wrong in ("not-the-password", ""):
        refusal = _refusal(primary.port, wrong)
        assert refusal[0] == 1045 and _refusal(relay.port, wrong) == refusal
    cli = _mariadb_client(relay.port, "not-the-password")
    assert cli.returncode != 0 and "1045" in cli.stderr, cli.stderr
    assert_healthy(replica)  # the refusals did not disturb the replica
    assert relay.stop() == 0
    assert "Traceback" not in relay.log_text()


def test_wrong_upstream_password_is_reported_and_retried(primary, relay_factory):
    _ed25519_account(primary, ED_USER, ED_PASSWORD)
    relay = relay_factory("relay", primary.port, upstream={"user": ED_USER, "password": "not-the-password",
                                                            "reconnect": {"initial_delay": 0.1, "max_delay": 0.4}})
    wait_for(lambda: relay.log_text().count(f"Access denied for user '{ED_USER}'") >= 3, 30,
             "no repeated access-denied errors")
    assert relay.alive()
    assert "not-the-password" not in relay.log_text()
    assert relay.stop() == 0
