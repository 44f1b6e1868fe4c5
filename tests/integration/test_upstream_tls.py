"""TLS to the primary (upstream.ssl.mode) against a real MariaDB with TLS on."""

from __future__ import annotations

import pytest

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
