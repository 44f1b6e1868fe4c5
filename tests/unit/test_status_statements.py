"""The status statements without a server (relay/downstream/replicastatus.py, globalstatus.py):
what a live MariaDB replica cannot check.  No MySQL server can run here, so MySQL 8's SHOW
REPLICA STATUS / SHOW SLAVE STATUS columns are checked against the lists below, copied from MySQL
8.0's sql/rpl_replica.cc (show_slave_status_metadata) and the MySQL 8.0.21 names its
rename_fields_use_old_replica_source_terms restores for SHOW SLAVE STATUS.  The MariaDB column set
is checked against a real replica by tests/integration/test_show_status.py."""

from __future__ import annotations

import dataclasses

import pytest

from relay.downstream import globalstatus, replicastatus
from relay.downstream.queries import Error, Rows, ServerFacts, SessionVariables, answer
from relay.protocol.resultset import TYPE_LONG, TYPE_LONGLONG

MYSQL_REPLICA_STATUS = [
    "Replica_IO_State", "Source_Host", "Source_User", "Source_Port", "Connect_Retry", "Source_Log_File",
    "Read_Source_Log_Pos", "Relay_Log_File", "Relay_Log_Pos", "Relay_Source_Log_File", "Replica_IO_Running",
    "Replica_SQL_Running", "Replicate_Do_DB", "Replicate_Ignore_DB", "Replicate_Do_Table", "Replicate_Ignore_Table",
    "Replicate_Wild_Do_Table", "Replicate_Wild_Ignore_Table", "Last_Errno", "Last_Error", "Skip_Counter",
    "Exec_Source_Log_Pos", "Relay_Log_Space", "Until_Condition", "Until_Log_File", "Until_Log_Pos",
    "Source_SSL_Allowed", "Source_SSL_CA_File", "Source_SSL_CA_Path", "Source_SSL_Cert", "Source_SSL_Cipher",
    "Source_SSL_Key", "Seconds_Behind_Source", "Source_SSL_Verify_Server_Cert", "Last_IO_Errno", "Last_IO_Error",
    "Last_SQL_Errno", "Last_SQL_Error", "Replicate_Ignore_Server_Ids", "Source_Server_Id", "Source_UUID",
    "Source_Info_File", "SQL_Delay", "SQL_Remaining_Delay", "Replica_SQL_Running_State", "Source_Retry_Count",
    "Source_Bind", "Last_IO_Error_Timestamp", "Last_SQL_Error_Timestamp", "Source_SSL_Crl", "Source_SSL_Crlpath",
    "Retrieved_Gtid_Set", "Executed_Gtid_Set", "Auto_Position", "Replicate_Rewrite_DB", "Channel_Name",
    "Source_TLS_Version", "Source_public_key_path", "Get_Source_public_key", "Network_Namespace",
]
MYSQL_SLAVE_STATUS = [
    "Slave_IO_State", "Master_Host", "Master_User", "Master_Port", "Connect_Retry", "Master_Log_File",
    "Read_Master_Log_Pos", "Relay_Log_File", "Relay_Log_Pos", "Relay_Master_Log_File", "Slave_IO_Running",
    "Slave_SQL_Running", "Replicate_Do_DB", "Replicate_Ignore_DB", "Replicate_Do_Table", "Replicate_Ignore_Table",
    "Replicate_Wild_Do_Table", "Replicate_Wild_Ignore_Table", "Last_Errno", "Last_Error", "Skip_Counter",
    "Exec_Master_Log_Pos", "Relay_Log_Space", "Until_Condition", "Until_Log_File", "Until_Log_Pos",
    "Master_SSL_Allowed", "Master_SSL_CA_File", "Master_SSL_CA_Path", "Master_SSL_Cert", "Master_SSL_Cipher",
    "Master_SSL_Key", "Seconds_Behind_Master", "Master_SSL_Verify_Server_Cert", "Last_IO_Errno", "Last_IO_Error",
    "Last_SQL_Errno", "Last_SQL_Error", "Replicate_Ignore_Server_Ids", "Master_Server_Id", "Master_UUID",
    "Master_Info_File", "SQL_Delay", "SQL_Remaining_Delay", "Slave_SQL_Running_State", "Master_Retry_Count",
    "Master_Bind", "Last_IO_Error_Timestamp", "Last_SQL_Error_Timestamp", "Master_SSL_Crl", "Master_SSL_Crlpath",
    "Retrieved_Gtid_Set", "Executed_Gtid_Set", "Auto_Position", "Replicate_Rewrite_DB", "Channel_Name",
    "Master_TLS_Version", "Master_public_key_path", "Get_master_public_key", "Network_Namespace",
]
# Item_return_int columns of show_slave_status_metadata, by their new names (the rest are strings)
MYSQL_LONG = {"Source_Port", "Connect_Retry", "Last_Errno", "Skip_Counter", "Last_IO_Errno", "Last_SQL_Errno",
              "Source_Server_Id", "SQL_Delay", "SQL_Remaining_Delay", "Auto_Position", "Get_Source_public_key"}
MYSQL_LONGLONG = {"Read_Source_Log_Pos", "Relay_Log_Pos", "Exec_Source_Log_Pos", "Relay_Log_Space", "Until_Log_Pos",
                  "Seconds_Behind_Source", "Source_Retry_Count"}

STATUS = replicastatus.ReplicaStatus(
    io_running="Connecting", host="db1", user="repl", port=3306, connect_retry=30, read_file="binlog.000007",
    read_position=900, exec_file="binlog.000007", exec_position=900, relay_log_space=5000, seconds_behind=None,
    caught_up=True, master_server_id=1, using_gtid="No", gtid_position="3E11FA47-71CA-11E1-9E33-C80AA9429562:1-5",
    ignore_server_ids=(7, 9), last_io_errno=2003, last_io_error="connection refused", last_io_error_time=1.7e9,
    reconnecting=True)


def _facts(is_mariadb: bool, status: replicastatus.ReplicaStatus | None = STATUS) -> ServerFacts:
    return ServerFacts(
        version="10.11.19-MariaDB-log" if is_mariadb else "8.0.26", server_id=1001, server_uuid="u",
        binlog_checksum="CRC32", is_mariadb=is_mariadb, gtid_domain_id=0, master_status=lambda: ("", 4, ""),
        binary_logs=list, slave_hosts=list, binlog_gtid_pos=lambda name, pos: None, gtid_binlog_pos=lambda: "",
        replica_status=lambda: status)


def _ask(sql: str, is_mariadb: bool, status: replicastatus.ReplicaStatus | None = STATUS) -> object:
    return answer(sql, SessionVariables(), _facts(is_mariadb, status))


@pytest.mark.parametrize("sql, names", [("SHOW REPLICA STATUS", MYSQL_REPLICA_STATUS),
                                        ("show slave status", MYSQL_SLAVE_STATUS),
                                        ("SHOW REPLICA STATUS FOR CHANNEL ''", MYSQL_REPLICA_STATUS)])
def test_a_mysql_history_gets_mysql_8s_columns(sql, names):
    reply = _ask(sql, is_mariadb=False)
    assert isinstance(reply, Rows) and list(reply.columns) == names
    types = dict(zip(MYSQL_REPLICA_STATUS, reply.types))
    assert {name for name, kind in types.items() if kind == TYPE_LONG} == MYSQL_LONG
    assert {name for name, kind in types.items() if kind == TYPE_LONGLONG} == MYSQL_LONGLONG
    row = dict(zip(names, reply.rows[0]))
    assert row[names[10]] == "Connecting" and row[names[0]] == "Reconnecting after a failed source event read"
    assert row["Last_IO_Errno"] == 2003 and len(row["Last_IO_Error_Timestamp"]) == len("YYMMDD HH:MM:SS")
    assert row["Retrieved_Gtid_Set"] == row["Executed_Gtid_Set"] == STATUS.gtid_position
    assert row["Replicate_Ignore_Server_Ids"] == "7, 9"


def test_mysql_has_no_show_all_slaves_status():
    """MySQL's parser stops at ALL: mysqld_exporter then falls back to SHOW SLAVE STATUS."""
    reply = _ask("SHOW ALL SLAVES STATUS", is_mariadb=False)
    assert isinstance(reply, Error) and (reply.code, reply.sqlstate) == (1064, "42000")
    assert "near 'ALL SLAVES STATUS' at line 1" in reply.message


def test_a_channel_or_connection_the_relay_does_not_have_is_refused():
    assert _ask("SHOW REPLICA STATUS FOR CHANNEL 'other'", is_mariadb=False) == Error(
        3074, "Replication channel 'other' does not exist.")
    assert _ask("SHOW SLAVE 'other' STATUS", is_mariadb=True) == Error(1617, "There is no master connection 'other'")


@pytest.mark.parametrize("is_mariadb", [True, False])
def test_without_an_upstream_the_columns_come_without_a_row(is_mariadb):
    """As a server that is no replica answers: the result set's metadata, no row."""
    reply = _ask("SHOW SLAVE STATUS", is_mariadb, status=None)
    assert isinstance(reply, Rows) and reply.rows == () and len(reply.columns) == len(reply.types) > 50


def test_mariadb_states_follow_the_io_thread():
    def state(**changes: object) -> object:
        status = dataclasses.replace(STATUS, **changes)  # type: ignore[arg-type]
        reply = _ask("SHOW SLAVE STATUS", True, status)
        assert isinstance(reply, Rows)
        return reply.rows[0][0]

    assert state(io_running="Yes") == "Waiting for master to send event"
    assert state(reconnecting=False) == "Connecting to master"
    assert state() == "Reconnecting after a failed master event read"
    assert state(waiting_for_space=True) == "Waiting for the slave SQL thread to free enough relay log space"


def _figures(**changes: object) -> globalstatus.StatusFigures:
    base = dict(uptime=10, threads_connected=2, threads_running=1, connections=5, max_used_connections=3,
                aborted_connects=1, slave_running=True, slaves_connected=0, semi_sync_slave=False,
                semi_sync_master=False, semi_sync_master_clients=0, received_heartbeats=4, heartbeat_period=15.0,
                binlog_bytes_written=100, bytes_received=200, bytes_sent=300, questions=7, commands={"select": 2})
    return globalstatus.StatusFigures(**{**base, **changes})  # type: ignore[arg-type]


def _status(sql: str) -> list[tuple[str, object]]:
    request = globalstatus.parse(sql)
    assert request is not None, sql
    return list(globalstatus.rows(request, _figures()))


def test_status_patterns_and_scopes():
    assert _status("SHOW GLOBAL STATUS LIKE 'com\\_sel%'") == [("Com_select", 2)]
    assert _status("show status like 'COM_SELECT'") == []  # a session's counters: global scope only
    assert _status("SHOW SESSION STATUS WHERE Variable_name = 'uptime'") == [("Uptime", 10)]
    assert _status("SHOW STATUS WHERE variable_name LIKE 'slave\\_%'") == [
        ("Slave_heartbeat_period", "15.000"), ("Slave_received_heartbeats", 4), ("Slave_running", "ON")]
    names = [name for name, _ in _status("SHOW GLOBAL STATUS")]
    assert names == sorted(names, key=str.lower) and "Questions" in names
    assert globalstatus.parse("SHOW STATUS FROM somewhere") is None


@pytest.mark.parametrize("sql, command", [
    ("SELECT @@version", "select"), ("set names utf8", "set_option"), ("SHOW SLAVE STATUS", "show_slave_status"),
    ("show all replicas status", "show_slave_status"), ("SHOW BINLOG STATUS", "show_binlog_status"),
    ("SHOW MASTER LOGS", "show_binlogs"), ("SHOW GLOBAL STATUS LIKE 'x'", "show_status"),
    ("SHOW VARIABLES", "show_variables"), ("PURGE BINARY LOGS BEFORE '2024-01-01'", "purge_before_date"),
    ("PURGE BINARY LOGS TO 'mysql-bin.000002'", "purge"), ("START TRANSACTION", "begin"), ("USE shop", "change_db"),
    ("SHOW SLAVE HOSTS", "show_slave_hosts"), ("DROP TABLE t", None), ("SHOW ENGINES", None),
    ("SHOW SLAVE STATUS NOLOCK", None),
])
def test_each_statement_counts_as_mariadb_counts_it(sql, command):
    assert globalstatus.command_of(sql) == command
