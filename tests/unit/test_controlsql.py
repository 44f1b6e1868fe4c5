"""The runtime control statements as MariaDB's grammar reads them (relay/downstream/controlsql.py),
what CHANGE MASTER TO makes of the upstream (relay/ingest/settings.py), and the upstream it keeps in
data_dir (relay/storage/upstreamfile.py, relay/ingest/repoint.py).  The parse errors themselves are
compared with a real MariaDB's by tests/integration/test_runtime_control.py."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest

from relay.candidates import CandidateFacts, CandidateRefused, check_position_follow, parse_binlog_state
from relay.downstream.controlsql import (
    ChangeMaster,
    ResetSlave,
    StartSlave,
    StopSlave,
    parse_control,
    without_passwords,
)
from relay.downstream.queries import Error
from relay.ingest.repoint import save_upstream, saved_or_yaml
from relay.ingest.settings import Candidate, EffectiveUpstream, UpstreamChange, UpstreamSettings
from relay.storage.files import DataDirError
from relay.storage.upstreamfile import UPSTREAM_FILE, forget_upstream, read_saved_upstream


def _change(sql: str) -> UpstreamChange:
    statement = parse_control(sql)
    assert isinstance(statement, ChangeMaster) and not statement.unsupported, statement
    return statement.change


def test_statements_that_are_not_control_statements_are_left_to_the_others():
    for sql in ("SELECT 1", "START TRANSACTION", "start transaction read only", "SHOW SLAVE STATUS",
                "RESET MASTER", "CHANGE REPLICATION FILTER x", "SET @a = 'STOP SLAVE'", ""):
        assert parse_control(sql) is None, sql


def test_stop_and_start_in_every_spelling():
    assert parse_control("STOP SLAVE") == StopSlave()
    assert parse_control("  stop replica ;") == StopSlave()
    assert parse_control("Start Slave ''") == StartSlave()
    assert parse_control("START SLAVE IO_THREAD, SQL_THREAD") == StartSlave()  # one thread on the relay
    assert parse_control("STOP /* why */ SLAVE -- now\n") == StopSlave()
    assert parse_control("RESET SLAVE") == ResetSlave(all=False)
    assert parse_control("reset replica '' all") == ResetSlave(all=True)


def test_change_master_values_quoted_numbered_and_case_insensitive():
    change = _change("change master to master_host = 'db-2.example', MASTER_PORT=3307, Master_User=\"repl\", "
                     "MASTER_PASSWORD='it''s a \\'secret\\'\\n', MASTER_SSL=1, MASTER_SSL_CA='/etc/ca.pem', "
                     "MASTER_SSL_VERIFY_SERVER_CERT=0, MASTER_USE_GTID=Current_Pos")
    assert change == UpstreamChange(host="db-2.example", port=3307, user="repl", password="it's a 'secret'\n",
                                    ssl=True, ssl_ca="/etc/ca.pem", ssl_verify_server_cert=False,
                                    use_gtid="current_pos")
    assert _change("CHANGE MASTER TO MASTER_PORT=0x0CEB").port == 3307  # MariaDB's ulong_num: hex too
    assert _change("CHANGE MASTER TO MASTER_SSL=2").ssl is True
    assert _change("CHANGE MASTER TO MASTER_HOST='a', MASTER_HOST='b'").host == "b"  # the last one counts
    assert "secret" not in repr(change)


@pytest.mark.parametrize("sql, near", [
    ("CHANGE MASTER TO MASTER_FOO=1", "MASTER_FOO=1"),
    ("CHANGE MASTER TO MASTER_PORT='3306'", "'3306'"),
    ("CHANGE MASTER TO MASTER_HOST=db2", "db2"),
    ("CHANGE MASTER TO", ""),
    ("CHANGE MASTER TO MASTER_HOST='a' MASTER_PORT=1", "MASTER_PORT=1"),
    ("CHANGE MASTER TO `MASTER_HOST`='a'", "`MASTER_HOST`='a'"),  # a quoted identifier is no keyword
    ("CHANGE MASTER TO MASTER_HOST='unclosed", "'unclosed"),
    ("STOP SLAVE FOO", "FOO"),
    ("STOP SLAVES", "SLAVES"),
    ("START", ""),
])
def test_what_the_grammar_refuses_is_a_parse_error_near_where_it_stops(sql, near):
    error = parse_control(sql)
    assert isinstance(error, Error) and (error.code, error.sqlstate) == (1064, "42000"), error
    assert error.message.endswith(f"near '{near}' at line 1"), error.message


def test_the_parse_error_names_the_line_and_at_most_80_characters():
    error = parse_control("CHANGE MASTER TO MASTER_HOST='a',\n MASTER_X='" + "x" * 100 + "'")
    assert isinstance(error, Error)
    assert error.message.endswith(f"near 'MASTER_X='{'x' * 70}' at line 2"), error.message


@pytest.mark.parametrize("sql, named", [
    ("CHANGE MASTER TO MASTER_LOG_FILE='mysql-bin.000003', MASTER_LOG_POS=4", "MASTER_LOG_FILE"),
    ("CHANGE MASTER TO MASTER_DELAY=10", "MASTER_DELAY"),
    ("CHANGE MASTER TO MASTER_HEARTBEAT_PERIOD=1.5", "MASTER_HEARTBEAT_PERIOD"),
    ("CHANGE MASTER TO IGNORE_SERVER_IDS=()", "IGNORE_SERVER_IDS"),
    ("CHANGE MASTER TO DO_DOMAIN_IDS=(1, 2)", "DO_DOMAIN_IDS"),
    ("CHANGE MASTER TO MASTER_DEMOTE_TO_SLAVE=TRUE", "MASTER_DEMOTE_TO_SLAVE"),
    ("CHANGE MASTER 'east' TO MASTER_HOST='x'", "'east'"),
    ("STOP SLAVE 'east'", "'east'"),
    ("STOP ALL SLAVES", "ALL SLAVES"),
    ("START SLAVE UNTIL MASTER_LOG_FILE='x', MASTER_LOG_POS=4", "UNTIL"),
    ("CHANGE MASTER TO MASTER_HOST='x' FOR CHANNEL 'c'", "CHANNEL 'c'"),
])
def test_what_mariadb_takes_but_the_relay_does_not_do_is_listed(sql, named):
    statement = parse_control(sql)
    assert not isinstance(statement, Error) and statement is not None, statement
    assert any(named in item for item in statement.unsupported), statement


def test_passwords_are_kept_out_of_log_lines():
    sql = "CHANGE MASTER TO MASTER_HOST='x', master_password = 'a''b\\'c', MASTER_USER='u'"
    assert without_passwords(sql) == "CHANGE MASTER TO MASTER_HOST='x', master_password = '***', MASTER_USER='u'"
    assert without_passwords('CHANGE MASTER TO MASTER_PASSWORD="s"') == "CHANGE MASTER TO MASTER_PASSWORD='***'"


# ------------------------------------------------------------------ the upstream CHANGE MASTER TO makes


YAML = UpstreamSettings(host="", port=3306, user="repl", password="yaml-secret", relay_server_id=1001,
                        candidates=(Candidate("db-1", 3306), Candidate("db-2", 3306)), ssl_mode="preferred",
                        ssl_ca="/etc/ca.pem")


def test_options_left_out_keep_their_values_and_the_candidates_give_way_to_one_upstream():
    settings = UpstreamChange(host="db-3").applied_to(YAML, Candidate("db-2", 3307))
    assert (settings.host, settings.port, settings.candidates, settings.user, settings.password) == \
        ("db-3", 3307, (), "repl", "yaml-secret")
    assert (settings.ssl_mode, settings.ssl_ca, settings.use_gtid, settings.repointed) == \
        ("preferred", "/etc/ca.pem", "slave_pos", True)
    assert EffectiveUpstream.of(settings, Candidate("db-2", 3307), running=False) == EffectiveUpstream(
        "db-3", 3307, "repl", "slave_pos", True, "/etc/ca.pem", False, "CHANGE MASTER", False)
    assert EffectiveUpstream.of(YAML, Candidate("db-2", 3306), running=True).source == "upstream.hosts"


@pytest.mark.parametrize("change, mode, ca", [
    (UpstreamChange(ssl=False), "disabled", "/etc/ca.pem"),
    (UpstreamChange(ssl=True, ssl_ca=""), "required", None),  # an empty CA clears it
    (UpstreamChange(ssl=True), "verify_ca", "/etc/ca.pem"),
    (UpstreamChange(ssl_verify_server_cert=True), "verify_identity", "/etc/ca.pem"),
])
def test_mariadbs_tls_options_as_the_relays_ssl_mode(change, mode, ca):
    settings = change.applied_to(YAML, Candidate("db-1", 3306))
    assert (settings.ssl_mode, settings.ssl_ca) == (mode, ca)


def test_master_use_gtid_no_follows_only_the_writer_of_the_stored_files():
    writer = CandidateFacts(1, False, "", False, parse_binlog_state("0-1-100"))
    promoted = CandidateFacts(2, False, "", False, parse_binlog_state("0-1-100,0-2-101"))
    check_position_follow(writer, 1, own_files=False)
    for facts, own in ((promoted, False), (writer, True)):
        with pytest.raises(CandidateRefused) as refused:
            check_position_follow(facts, 1, own_files=own)
        assert refused.value.reason == "position"


# ------------------------------------------------------------------ kept in data_dir


def test_the_saved_upstream_overrides_the_yaml_until_the_yamls_upstream_changes(tmp_path):
    assert saved_or_yaml(YAML, tmp_path) is YAML
    chosen = UpstreamChange(host="db-3", port=3310, password="new-secret", use_gtid="no").applied_to(
        YAML, Candidate("db-1", 3306))
    save_upstream(chosen, YAML, tmp_path)
    path = tmp_path / UPSTREAM_FILE
    assert path.stat().st_mode & 0o777 == 0o600 and json.loads(path.read_text())["password"] == "new-secret"
    assert saved_or_yaml(YAML, tmp_path) == chosen
    # Another password or TLS option in the YAML keeps it; another host, port, candidate list or user does not.
    assert saved_or_yaml(replace(YAML, password="rotated", ssl_mode="disabled"), tmp_path).host == "db-3"
    moved = replace(YAML, candidates=(Candidate("db-9", 3306),))
    assert saved_or_yaml(moved, tmp_path) is moved and not path.exists()
    assert read_saved_upstream(tmp_path) is None and not forget_upstream(tmp_path)


def test_a_damaged_saved_upstream_stops_the_relay_with_its_path(tmp_path):
    (tmp_path / UPSTREAM_FILE).write_text('{"version": 1, "host": ')
    with pytest.raises(DataDirError, match=UPSTREAM_FILE):
        saved_or_yaml(YAML, tmp_path)
    os.unlink(tmp_path / UPSTREAM_FILE)
