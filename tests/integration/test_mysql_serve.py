"""A MySQL-flavoured history served to MySQL's own client library: python-mysql-replication in
MySQL mode with auto_position sends COM_BINLOG_DUMP_GTID with the GTID set it has, and must get
only the transactions outside it, or MySQL's refusals.  No MySQL server can run here: the history
is a binlog file a MySQL 8.0.26 server wrote (tests/fixtures/mysql), and the client's own GTID
parser checks what the relay sends."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import mysql.connector
import pymysql
import pytest
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import GtidEvent

from relay.sandbox.mariadb import REPL_PASSWORD, REPL_USER
from relay.sandbox.polling import wait_for
from relay.sandbox.ports import free_port
from relay.sandbox.relayprocess import RelayProcess, relay_config
from tests.support.certs import make_certs
from tests.support.metrics import Scrape

MYSQL = Path(__file__).resolve().parents[1] / "fixtures" / "mysql"
SOURCE = "97c7af02-4c50-11ec-acd8-681842034964"  # the 8.0.26 file's transactions: SOURCE:1-5


def _serve(tmp_path: Path, fixture: str | list[Path], **overrides) -> RelayProcess:
    """A relay whose data_dir was seeded by ``binlog-relay import`` with MySQL-written files (one
    fixture, or files named as the chain they make); its upstream unreachable: it serves what it
    imported."""
    data_dir = tmp_path / "data"
    files = [MYSQL / fixture] if isinstance(fixture, str) else fixture
    imported = subprocess.run([sys.executable, "-m", "relay.cli", "import", "--data-dir", str(data_dir),
                               *map(str, files)], capture_output=True, text=True, timeout=60)
    assert imported.returncode == 0, imported.stderr
    assert all((data_dir / path.name).read_bytes() == path.read_bytes() for path in files)
    relay = RelayProcess(tmp_path, relay_config(data_dir, free_port(), **overrides))
    relay.start()
    relay.wait_listening()
    return relay


def _gtids_read(relay: RelayProcess, auto_position: str) -> list[str]:
    reader = BinLogStreamReader(
        connection_settings={"host": "127.0.0.1", "port": relay.port, "user": REPL_USER, "password": REPL_PASSWORD},
        server_id=77, auto_position=auto_position, blocking=False, only_events=[GtidEvent])
    try:
        return [event.gtid for event in reader]
    finally:
        reader.close()


def test_only_the_transactions_outside_the_replicas_set_are_sent(tmp_path):
    relay = _serve(tmp_path, "binlog-invisible-columns.000001")
    try:
        assert _gtids_read(relay, f"{SOURCE}:1-2") == [f"{SOURCE}:{n}" for n in (3, 4, 5)]
        assert _gtids_read(relay, f"{SOURCE}:1:3:5") == [f"{SOURCE}:{n}" for n in (2, 4)]
        other = "00000000-0000-0000-0000-000000000001:1-7"  # another source's: nothing of ours
        assert _gtids_read(relay, other) == [f"{SOURCE}:{n}" for n in range(1, 6)]
        assert _gtids_read(relay, f"{SOURCE}:1-5") == []
    finally:
        assert relay.stop() == 0


def test_show_replicas_lists_a_mysql_replica_with_its_uuid(tmp_path):
    relay = _serve(tmp_path, "binlog-invisible-columns.000001")
    replica_uuid = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
    reader = BinLogStreamReader(
        connection_settings={"host": "127.0.0.1", "port": relay.port, "user": REPL_USER, "password": REPL_PASSWORD},
        server_id=77, auto_position=f"{SOURCE}:1-2", blocking=True, only_events=[GtidEvent],
        report_slave="replica-a", slave_uuid=replica_uuid)
    try:
        assert reader.fetchone().gtid == f"{SOURCE}:3"  # registered and dumping
        conn = pymysql.connect(host="127.0.0.1", port=relay.port, user=REPL_USER, password=REPL_PASSWORD)
        try:
            with conn.cursor() as cursor:
                cursor.execute("SHOW REPLICAS")
                assert [d[0] for d in cursor.description] == ["Server_Id", "Host", "Port", "Source_Id",
                                                              "Replica_UUID"]
                assert cursor.fetchall() == ((77, "replica-a", 0, 1001, replica_uuid),)
        finally:
            conn.close()
    finally:
        reader.close()
        assert relay.stop() == 0


def test_a_replica_with_more_of_the_sources_gtids_is_refused(tmp_path):
    relay = _serve(tmp_path, "binlog-invisible-columns.000001")
    try:
        with pytest.raises(pymysql.err.OperationalError) as refused:
            _gtids_read(relay, f"{SOURCE}:1-9")
        assert refused.value.args[0] == 1236
        assert "more GTIDs than the source" in refused.value.args[1]
        assert _gtids_read(relay, f"{SOURCE}:1-2") == [f"{SOURCE}:{n}" for n in (3, 4, 5)]  # still serving
    finally:
        assert relay.stop() == 0


def test_a_replica_lacking_purged_transactions_is_refused(tmp_path):
    relay = _serve(tmp_path, "binlog_transaction_previous_GTID_no_tag.000001")  # PREVIOUS_GTIDS b9b88c66...:1-2
    purged = "b9b88c66-0755-11f1-9899-4a9da94c4d71"
    try:
        with pytest.raises(pymysql.err.OperationalError) as refused:
            _gtids_read(relay, f"{purged}:1")
        assert refused.value.args[0] == 1236
        assert "the source purged required binary logs" in refused.value.args[1]
        assert f"missing transactions are '{purged}:2'" in refused.value.args[1]
        assert _gtids_read(relay, f"{purged}:1-2") == []
    finally:
        assert relay.stop() == 0


def test_mysql_clients_log_in_with_caching_sha2_password(tmp_path):
    """PyMySQL and MySQL's own connector: the first login of a user is a full authentication (RSA
    without TLS, the password itself over TLS), later ones the fast path; a wrong password is 1045."""
    certs = make_certs(tmp_path / "certs")
    relay = _serve(tmp_path, "binlog-invisible-columns.000001",
                   listen={"ssl": {"cert": str(certs.cert), "key": str(certs.key)}},
                   users=[{"name": "rsa", "password": "rsa-pass"}, {"name": "tls", "password": "tls-pass"},
                          {"name": "connector", "password": "connector-pass"}])
    try:
        def pymysql_login(user: str, password: str, **options) -> str:
            conn = pymysql.connect(host="127.0.0.1", port=relay.port, user=user, password=password,
                                   connect_timeout=10, **options)
            try:
                return conn.get_server_info()
            finally:
                conn.close()

        assert pymysql_login("rsa", "rsa-pass", ssl_disabled=True) == "8.0.26"  # full: RSA key asked for
        assert pymysql_login("rsa", "rsa-pass", ssl_disabled=True) == "8.0.26"  # fast
        assert pymysql_login("tls", "tls-pass", ssl={"ca": str(certs.ca)}) == "8.0.26"  # full over TLS
        with pytest.raises(pymysql.err.OperationalError) as refused:
            pymysql_login("rsa", "wrong", ssl_disabled=True)
        assert refused.value.args[0] == 1045
        for _ in range(2):  # full authentication over TLS, then the fast path
            conn = mysql.connector.connect(host="127.0.0.1", port=relay.port, user="connector",
                                           password="connector-pass", ssl_ca=str(certs.ca), use_pure=True)
            assert conn.server_info == "8.0.26"
            conn.close()
        with pytest.raises(mysql.connector.errors.ProgrammingError) as refused_connector:
            mysql.connector.connect(host="127.0.0.1", port=relay.port, user="connector", password="wrong",
                                    ssl_ca=str(certs.ca), use_pure=True)
        assert refused_connector.value.errno == 1045
        log = relay.log_text()
        assert not any(secret in log for secret in ("rsa-pass", "tls-pass", "connector-pass"))
    finally:
        assert relay.stop() == 0


@pytest.mark.parametrize("login", ["rsa-key-asked", "rsa-key-configured", "tls"])
def test_a_relay_replicates_a_mysql_history_from_another_relay(tmp_path, login):
    """Relay B follows relay A, which serves a MySQL 8.0.26-written history as a MySQL primary:
    caching_sha2_password full authentication (over RSA, the key asked for or configured, or over
    TLS), heartbeat v2 while idle (B asks for it as a MySQL 8.0.26+ replica does), and B's copy is
    byte for byte A's."""
    certs = make_certs(tmp_path / "certs")
    a = _serve(tmp_path / "a", "binlog-invisible-columns.000001",
               listen={"ssl": {"cert": str(certs.cert), "key": str(certs.key)}})
    upstream: dict = {"heartbeat_period": 0.5}
    if login == "rsa-key-configured":
        upstream["server_public_key"] = str(a.data_dir / "rsa_public_key.pem")
    if login == "tls":
        upstream["ssl"] = {"mode": "verify_ca", "ca": str(certs.ca)}
    b = RelayProcess(tmp_path / "b", relay_config(tmp_path / "b" / "data", a.port, server_id=1002,
                                                  upstream=upstream, metrics={"port": free_port()}))
    b.start()
    try:
        b.wait_listening()
        wait_for_mirror_of(a, b)
        quiet_since = len(b.log_text())

        def heartbeats(version: str) -> float:
            return Scrape.fetch(b.metrics_port).value("binlog_relay_upstream_heartbeats_total", version=version) or 0

        # six heartbeat periods with nothing to send: A keeps B's connection alive with v2 heartbeats
        wait_for(lambda: heartbeats("2") >= 6, 10, "relay B received no heartbeat v2 from relay A")
        assert heartbeats("1") == 0
        assert "reconnecting" not in b.log_text()[quiet_since:], b.log_text()[quiet_since:]
    finally:
        b.stop()
        a.stop()


def wait_for_mirror_of(source: RelayProcess, copy: RelayProcess) -> None:
    def same() -> bool:
        names = source.stored_files()
        return copy.stored_files() == names and all(
            (copy.data_dir / n).exists() and (copy.data_dir / n).read_bytes() == (source.data_dir / n).read_bytes()
            for n in names)
    wait_for(same, 30, "relay B did not become a copy of relay A")


def test_a_gtid_dump_starts_in_a_file_only_the_archive_holds(tmp_path, s3_server):
    """Two MySQL-written files chained as binlog.000001 (8.0.26: SOURCE:1-5, then a STOP) and
    binlog.000002 (9.6.0: its PREVIOUS_GTIDS is another source's 1-13:mytag:1-2, then mytag:3).
    One relay archives the first and purges its local copy; COM_BINLOG_DUMP_GTID then finds where
    to start from what the archive keeps of each file, and sends what a relay holding both files
    locally sends, for sets starting in either file."""
    from relay.storage.index import read_index
    from tests.integration.test_archive import archive_config

    chain = tmp_path / "chain"
    chain.mkdir()
    files = [chain / "binlog.000001", chain / "binlog.000002"]
    files[0].write_bytes((MYSQL / "binlog-invisible-columns.000001").read_bytes())
    files[1].write_bytes((MYSQL / "binlog_transaction_with_GTID_TAG.000001").read_bytes())
    local = _serve(tmp_path / "local", files)
    archiving = _serve(tmp_path / "archiving", files, archive=archive_config(s3_server),
                       storage={"retention": {"max_size": "1K", "min_files": 1, "replica_grace": 0}})
    try:
        wait_for(lambda: read_index(archiving.data_dir) == ["binlog.000002"], 60,
                 "binlog.000001 was not archived and purged")
        # (a set starting in binlog.000002 must name the tagged GTIDs, which this client's parser refuses)
        for replica_has in (f"{SOURCE}:1-2", "00000000-0000-0000-0000-000000000001:1-7", f"{SOURCE}:1-5"):
            assert _gtids_read(archiving, replica_has) == _gtids_read(local, replica_has), replica_has
        assert _gtids_read(archiving, f"{SOURCE}:1-2")[:3] == [f"{SOURCE}:{n}" for n in (3, 4, 5)]
        for variable in ("gtid_purged", "gtid_executed"):
            assert _variable(archiving, variable) == _variable(local, variable), variable
    finally:
        assert local.stop() == 0 and archiving.stop() == 0


def _variable(relay: RelayProcess, name: str) -> str:
    conn = pymysql.connect(host="127.0.0.1", port=relay.port, user=REPL_USER, password=REPL_PASSWORD)
    try:
        with conn.cursor() as cursor:
            cursor.execute(f"SELECT @@{name}")
            return str(cursor.fetchone()[0])
    finally:
        conn.close()
