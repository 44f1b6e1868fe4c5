"""TLS to the primary (upstream.ssl.mode) against a real MariaDB with TLS on."""

from __future__ import annotations

import pytest

from relay.protocol.packets import ServerError
from relay.sandbox.client import BlockingClient
from relay.sandbox.mariadb import REPL_PASSWORD, REPL_USER
from relay.sandbox.polling import wait_for
from relay.sandbox.relayprocess import RelayProcess, relay_config
from tests.support.certs import make_certs
from tests.support.relay import wait_for_mirror


def _tls_primary(mariadb_factory, tmp_path):
    certs = make_certs(tmp_path / "certs")
    primary = mariadb_factory(server_id=1, extra_args=[
        f"--ssl-ca={certs.ca}", f"--ssl-cert={certs.cert}", f"--ssl-key={certs.key}"])
    # an account that cannot log in without TLS proves the relay really used it
    primary.execute_many(["CREATE USER 'tlsrepl'@'%' IDENTIFIED BY 'tlspass' REQUIRE SSL",
                          "GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'tlsrepl'@'%'",
                          "CREATE DATABASE tlsdb", "CREATE TABLE tlsdb.t (id INT PRIMARY KEY)",
                          "INSERT INTO tlsdb.t VALUES (1), (2)"])
    return primary, certs


def _upstream(port: int, **ssl) -> dict:
    return {"host": "127.0.0.1", "port": port, "user": "tlsrepl", "password": "tlspass", "ssl": ssl,
            "reconnect": {"initial_delay": 0.1, "max_delay": 0.5}}


@pytest.mark.parametrize("mode", ["required", "verify_ca", "verify_identity"])
def test_relay_replicates_over_tls(mariadb_factory, tmp_path, mode):
    primary, certs = _tls_primary(mariadb_factory, tmp_path)
    ssl = {"mode": mode} if mode == "required" else {"mode": mode, "ca": str(certs.ca)}
    relay = RelayProcess(tmp_path / "relay", relay_config(tmp_path / "data", primary.port,
                                                          upstream=_upstream(primary.port, **ssl)))
    relay.start()
    try:
        wait_for_mirror(primary, relay)
    finally:
        assert relay.stop() == 0


def test_wrong_ca_is_refused_and_retried(mariadb_factory, tmp_path):
    primary, _ = _tls_primary(mariadb_factory, tmp_path)
    other = make_certs(tmp_path / "other")
    relay = RelayProcess(tmp_path / "relay", relay_config(
        tmp_path / "data", primary.port, upstream=_upstream(primary.port, mode="verify_ca", ca=str(other.ca))))
    relay.start()
    try:
        wait_for(lambda: relay.log_text().count("CERTIFICATE_VERIFY_FAILED") >= 2, 30,
                 "no repeated certificate verification errors")
        assert not (relay.data_dir / "binlog.index").exists()
    finally:
        assert relay.stop() == 0


def test_tls_required_but_not_offered(mariadb_factory, tmp_path):
    primary = mariadb_factory(server_id=1)
    relay = RelayProcess(tmp_path / "relay", relay_config(tmp_path / "data", primary.port, upstream={
        "host": "127.0.0.1", "port": primary.port, "user": "repl", "password": "replpass",
        "ssl": {"mode": "required"}}))
    relay.start()
    try:
        wait_for(lambda: "does not offer TLS" in relay.log_text(), 30, "no clear TLS error")
    finally:
        assert relay.stop() == 0


def test_change_master_to_moves_ingest_onto_tls(mariadb_factory, tmp_path):
    """CHANGE MASTER TO with MASTER_SSL options, issued to a relay that replicates in the clear: a
    wrong CA is refused while vetting (the relay keeps its upstream), the right one is followed over
    TLS (by an account the primary refuses without it), and SHOW SLAVE STATUS shows the options."""
    primary, certs = _tls_primary(mariadb_factory, tmp_path)
    other = make_certs(tmp_path / "other")
    admin = {"name": "ops", "password": "ops-secret", "admin": True}
    relay = RelayProcess(tmp_path / "relay", relay_config(
        tmp_path / "data", primary.port, users=[{"name": REPL_USER, "password": REPL_PASSWORD}, admin]))
    relay.start()
    try:
        wait_for_mirror(primary, relay)
        change = ("CHANGE MASTER TO MASTER_USER='tlsrepl', MASTER_PASSWORD='tlspass', MASTER_SSL=1, "
                  "MASTER_SSL_VERIFY_SERVER_CERT=1, MASTER_SSL_CA='{ca}'")
        with BlockingClient(relay.port, admin["name"], admin["password"]) as client:
            client.query("STOP SLAVE")
            with pytest.raises(ServerError) as refused:
                client.query(change.format(ca=other.ca))
            assert refused.value.code == 1218 and "certificate" in refused.value.message.lower(), refused.value
            client.query(change.format(ca=certs.ca))
            client.query("START SLAVE")
        primary.execute_many(["INSERT INTO tlsdb.t VALUES (3), (4)", "FLUSH BINARY LOGS"])
        wait_for_mirror(primary, relay)
        with BlockingClient(relay.port, REPL_USER, REPL_PASSWORD) as client:
            shown = client.query("SHOW SLAVE STATUS")
        row = dict(zip(shown.columns, shown.rows[0]))
        assert (row["Master_User"], row["Master_SSL_Allowed"], row["Master_SSL_CA_File"],
                row["Master_SSL_Verify_Server_Cert"], row["Slave_IO_Running"]) == (
                    "tlsrepl", "Yes", str(certs.ca), "Yes", "Yes"), row
        assert "tlspass" not in relay.log_text()
    finally:
        assert relay.stop() == 0
