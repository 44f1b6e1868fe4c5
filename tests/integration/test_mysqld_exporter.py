"""A peer nobody here wrote: Debian's prometheus-mysqld-exporter (0.14) scrapes the relay with its
default collectors (global_status, global_variables, slave_status, info_schema.innodb_cmp,
info_schema.innodb_cmpmem, info_schema.query_response_time), logged in as a user of the relay's
users[].  Every collector succeeds, and its replica-status metrics carry the relay's upstream
position and lag: after a known write on the primary, mysql_slave_status_read_master_log_pos and
exec_master_log_pos are the primary's SHOW MASTER STATUS position.  The only statement the relay
refuses is the one a MariaDB server refuses too (SELECT @@query_response_time_stats, a Percona
plugin's variable), which the exporter reads as "not available"."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pymysql
import pytest

from relay.sandbox.mariadb import REPL_PASSWORD, REPL_USER
from relay.sandbox.polling import wait_for
from relay.sandbox.ports import LOOPBACK, free_port
from relay.sandbox.relayprocess import http_get, start_relay
from tests.support.relay import wait_for_mirror

EXPORTER = "prometheus-mysqld-exporter"  # scripts/test.sh installs it (apt)
SAMPLE = re.compile(r"^(\w+)(?:\{([^}]*)\})? (\S+)$")
REFUSED = re.compile(r"downstream \S+: (.*) -> ERROR (\d+) ")


def _samples(text: str) -> dict[str, float]:
    """Metric name -> value, labels dropped (one replica connection: one sample per name)."""
    samples = {}
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if match:
            samples[match.group(1)] = float(match.group(3))
    return samples


@pytest.fixture
def exporter(tmp_path: Path) -> Iterator[Callable[[int], int]]:
    """start(relay_port) -> the exporter's metrics port; stopped at teardown."""
    assert shutil.which(EXPORTER), f"{EXPORTER} is not installed: bash scripts/test.sh installs it"
    started: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(relay_port: int) -> int:
        cnf = tmp_path / "exporter.cnf"
        cnf.write_text(f"[client]\nuser={REPL_USER}\npassword={REPL_PASSWORD}\nhost={LOOPBACK}\nport={relay_port}\n")
        port = free_port()
        log = tmp_path / "exporter.log"
        with open(log, "wb") as out:
            process = subprocess.Popen([EXPORTER, f"--config.my-cnf={cnf}", f"--web.listen-address={LOOPBACK}:{port}",
                                        "--log.level=debug"], stdout=out, stderr=subprocess.STDOUT)
        started.append((process, log))
        wait_for(lambda: http_get(port, "/")[0] == 200, 30, "the exporter does not answer", ignore=(OSError,))
        return port

    yield start
    for process, log in started:
        process.terminate()
        process.wait(10)
        print(log.read_text())


def test_mysqld_exporter_scrapes_the_relay_as_a_replica(mariadb_factory, tmp_path, exporter):
    primary = mariadb_factory(server_id=1)
    relay = start_relay(tmp_path / "relay", primary.port, logging={"level": "DEBUG"})
    try:
        primary.execute_many(["CREATE DATABASE shop", "CREATE TABLE shop.orders (id INT PRIMARY KEY)",
                              "INSERT INTO shop.orders VALUES (1)"])
        wait_for_mirror(primary, relay)
        file, position = primary.master_status()
        port = exporter(relay.port)

        status, text = http_get(port, "/metrics")
        assert status == 200
        metrics = _samples(text)
        assert metrics["mysql_up"] == 1
        assert metrics["mysql_exporter_last_scrape_error"] == 0
        assert not any(name.startswith("mysql_exporter_scrape_errors") and value for name, value in metrics.items())
        assert metrics["mysql_slave_status_read_master_log_pos"] == position
        assert metrics["mysql_slave_status_exec_master_log_pos"] == position
        assert metrics["mysql_slave_status_relay_log_pos"] == position
        assert metrics["mysql_slave_status_seconds_behind_master"] == 0
        assert metrics["mysql_slave_status_slave_io_running"] == 1
        assert metrics["mysql_slave_status_slave_sql_running"] == 1
        assert metrics["mysql_slave_status_master_server_id"] == primary.server_id
        assert metrics["mysql_global_status_slave_running"] == 1
        assert metrics["mysql_slave_status_master_port"] == primary.port
        assert f'master_host="{LOOPBACK}"' in text
        assert 'mysql_global_status_commands_total{command="show_slave_status"}' in text
        assert 'mysql_version_info{' in text

        log = (tmp_path / "exporter.log").read_text()
        assert "level=error" not in log, log
        refused = {(match.group(1), int(match.group(2))) for match in REFUSED.finditer(relay.log_text())}
        # a variable of Percona's plugin: MariaDB has none either, and refuses it with the same error
        asked = "SELECT @@query_response_time_stats"
        with pytest.raises(pymysql.MySQLError) as theirs:
            primary.sql(asked)
        assert refused == {(asked, theirs.value.args[0])}, refused
        assert "Traceback" not in relay.log_text()
    finally:
        assert relay.stop() == 0
