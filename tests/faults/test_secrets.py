"""No password in anything a relay says: every log line, metric and endpoint body, every error text sent to
a client, and `binlog-relay check-config` output.

Two parts:
- a relay of its own, given distinct passwords in every way the configuration takes them (upstream password
  inline, replica users inline, from a file and from the environment), driven through the paths that report
  errors: the primary refusing its login (the upstream user does not exist yet), then accepting it; clients
  logging in with wrong passwords and unknown users, bad queries and dumps, a real replica; SIGTERM. Its log,
  /metrics, /healthz, /readyz, the ERR texts and check-config's output of a broken configuration are searched.
- every relay the fault suite started earlier in this session (tests/faults/conftest.py records them): their
  logs, the endpoint bodies saved before they stopped, and the ERR texts the hostile clients received.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from relay.protocol.client import AuthenticationError
from relay.protocol.packets import ServerError
from relay.sandbox.polling import wait_for
from relay.sandbox.replication import FIRST_FILE, wait_caught_up
from tests.support.faults import ENDPOINTS_FILE, STARTED_RELAYS, endpoint_texts, metric
from tests.support.replication import RawClient

UPSTREAM_PASSWORD = "Up-s3cret-7f3a9c1e"
INLINE_PASSWORD = "Inline-s3cret-91c2d8"
FILE_PASSWORD = "File-s3cret-55d0b4"
ENV_PASSWORD = "Env-s3cret-0e6a27"
SECRETS = (UPSTREAM_PASSWORD, INLINE_PASSWORD, FILE_PASSWORD, ENV_PASSWORD)


def _leaks(text: str, secrets: tuple[str, ...]) -> list[str]:
    """The secrets found in text, and where (a line of context each)."""
    found = []
    for secret in secrets:
        for line in text.splitlines():
            if secret in line:
                found.append(f"{secret!r} in: {line[:300]}")
    return found


def _client_errors(port: int) -> list[str]:
    """ERR texts of logins and commands that go wrong."""
    texts = []
    for user, password in (("inline", "wrong-" + INLINE_PASSWORD), ("nobody", INLINE_PASSWORD),
                           ("filed", UPSTREAM_PASSWORD), ("envuser", FILE_PASSWORD)):
        try:
            RawClient(port, user, password).close()
            texts.append(f"LOGIN ACCEPTED: {user}")
        except (ServerError, AuthenticationError) as err:
            texts.append(str(err))
    for user, password in (("inline", INLINE_PASSWORD), ("filed", FILE_PASSWORD), ("envuser", ENV_PASSWORD)):
        with RawClient(port, user, password) as client:
            for query in ("SELECT * FROM mysql.user", f"SET @x = '{'a' * 10}'", "SHOW GRANTS",
                          "SELECT @@password", "SHOW VARIABLES LIKE '%pass%'", "PURGE BINARY LOGS TO 'x'"):
                try:
                    texts.append(repr(client.query(query)))
                except ServerError as err:
                    texts.append(f"{err.code} {err.message}")
            client.start_dump("mysql-bin.999999", 4, server_id=970, flags=1)
            texts.append(repr(client.dump_reply()))
    return texts


def test_no_password_in_what_the_relay_says(mariadb_factory, fault_relay, tmp_path, monkeypatch):
    primary = mariadb_factory(server_id=1)
    password_file = tmp_path / "filed.password"
    password_file.write_text(FILE_PASSWORD + "\n")
    monkeypatch.setenv("BINLOG_RELAY_USERS_ENVUSER_PASSWORD", ENV_PASSWORD)
    users = [{"name": "inline", "password": INLINE_PASSWORD}, {"name": "filed", "password_file": str(password_file)},
             {"name": "envuser"}, {"name": "repl", "password": INLINE_PASSWORD}]
    # the upstream account does not exist yet: the primary refuses the relay's logins first
    relay = fault_relay("relay", primary.port, users=users,
                        upstream={"user": "relayup", "password": UPSTREAM_PASSWORD})
    wait_for(lambda: "relayup" in relay.log_text() or "denied" in relay.log_text().lower(), 30,
             "the relay never reported the primary's refusal")
    primary.execute_many([f"CREATE USER 'relayup'@'%' IDENTIFIED BY '{UPSTREAM_PASSWORD}'",
                          "GRANT REPLICATION SLAVE, REPLICATION CLIENT, BINLOG MONITOR ON *.* TO 'relayup'@'%'",
                          "CREATE DATABASE s", "CREATE TABLE s.t (id INT PRIMARY KEY)", "INSERT INTO s.t VALUES (1)"])
    wait_for(lambda: metric(relay, "binlog_relay_upstream_connected") == 1, 30, "the relay never connected")
    replica = mariadb_factory(server_id=11)
    replica.change_master("127.0.0.1", relay.port, user="envuser", password=ENV_PASSWORD, log_file=FIRST_FILE,
                          log_pos=4)
    replica.start_slave()
    wait_caught_up(primary, replica)
    texts = _client_errors(relay.port)
    assert not [t for t in texts if t.startswith("LOGIN ACCEPTED")], texts
    texts.append(endpoint_texts(relay))
    texts.append(str(replica.slave_status()))

    broken = dict(relay.config,
                  upstream={**relay.config["upstream"], "port": "not-a-port", "passwrd": UPSTREAM_PASSWORD})
    broken_path = tmp_path / "broken.yaml"
    broken_path.write_text(yaml.safe_dump(broken))
    check = subprocess.run([sys.executable, "-m", "relay.cli", "check-config", "--config", str(broken_path)],
                           capture_output=True, text=True, timeout=60)
    assert check.returncode != 0, check.stdout + check.stderr
    texts.append(check.stdout + check.stderr)

    assert relay.stop() == 0
    texts.append(relay.log_text())
    leaks = _leaks("\n".join(texts), SECRETS)
    assert not leaks, "\n".join(leaks)


def test_no_password_in_what_the_suites_relays_said(fault_figures):
    """Everything the fault suite's relays said: the earlier tests' (when run with them) and the one above."""
    leaks, searched = [], 0
    for work_dir, secrets in STARTED_RELAYS:
        for name in ("relay.log", ENDPOINTS_FILE, "errors-seen.txt"):
            path = Path(work_dir) / name
            if path.exists():
                searched += 1
                leaks += [f"{path}: {leak}" for leak in _leaks(path.read_text(errors="replace"), secrets)]
    assert searched, "no relay recorded: this test runs after the others of tests/faults (this file's first test)"
    assert not leaks, "\n".join(leaks[:20])
    fault_figures("secrets", fault="Secrets: every log line, /metrics, /healthz, /readyz body, ERR text sent to "
                  "clients and `check-config` output searched for the passwords (inline, password_file, environment; "
                  "upstream refusal, wrong logins)",
                  injected=f"the logs of every relay of the run ({len(STARTED_RELAYS)} relays, {searched} files)",
                  recovery="no password found")
