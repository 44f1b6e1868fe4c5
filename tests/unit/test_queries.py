"""The SQL replicas and tools send, answered without a database (relay/downstream/queries.py).
Expected replies are what a MariaDB 10.11 primary gives for the same statements (error numbers,
SQLSTATEs and texts from its error message file), or the relay's own facts."""

import pytest

from relay.downstream.queries import Error, Ok, Rows, ServerFacts, SessionVariables, answer


def _facts(is_mariadb: bool = True, **changes) -> ServerFacts:
    base = dict(
        version="10.11.19-MariaDB-log" if is_mariadb else "8.0.26", server_id=1001,
        server_uuid="6a1e3c9e-0000-5000-8000-000000001001", binlog_checksum="CRC32", is_mariadb=is_mariadb,
        gtid_domain_id=0, master_status=lambda: ("mysql-bin.000003", 1234, ""),
        binary_logs=lambda: [("mysql-bin.000002", 500), ("mysql-bin.000003", 1234)],
        slave_hosts=lambda: [(11, "replica-a", 3306, 1001, "")],
        binlog_gtid_pos=lambda name, pos: "0-1-7" if name == "mysql-bin.000003" else None,
        gtid_binlog_pos=lambda: "0-1-9")
    return ServerFacts(**{**base, **changes})


def _ask(sql: str, session: SessionVariables | None = None, **facts) -> object:
    return answer(sql, session or SessionVariables(), _facts(**facts), connection_id=42, user="repl")


@pytest.mark.parametrize("sql", [
    "SET NAMES utf8mb4", "SET autocommit = 1", "SET SESSION sql_mode = 'ANSI'", "SET GLOBAL net_read_timeout = 60",
    "set session wait_timeout=28800", "SET LOCAL sql_log_bin = 0", "SET @@SESSION.net_write_timeout = 3600",
    "SET @master_heartbeat_period= 30000000000, @master_binlog_checksum= @@global.binlog_checksum",
    "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
])
def test_the_set_statements_tools_send_are_accepted(sql):
    assert _ask(sql) == Ok()


def test_user_variables_are_kept_per_connection_and_read_back():
    session = SessionVariables()
    assert _ask("SET @master_binlog_checksum= @@global.binlog_checksum, @mariadb_slave_capability=4",
                session) == Ok()
    assert _ask("SELECT @master_binlog_checksum", session) == Rows(("@master_binlog_checksum",), (("CRC32",),))
    assert session.values["mariadb_slave_capability"] == 4
    assert _ask("SELECT @never_set", session) == Rows(("@never_set",), ((None,),))


@pytest.mark.parametrize("is_mariadb", [True, False])
def test_the_gtid_variables_are_read_from_the_stored_files_only_when_asked_for(is_mariadb):
    """Reading them walks the newest stored file: SELECT @@version must not."""
    reads: list[str] = []

    def read(name: str, value: str):  # type: ignore[no-untyped-def]
        return lambda: reads.append(name) or value

    facts = dict(is_mariadb=is_mariadb, gtid_binlog_pos=read("gtid_binlog_pos", "0-1-9"),
                 mysql_gtid_executed=read("gtid_executed", "u:1-5"), mysql_gtid_purged=read("gtid_purged", ""))
    assert _ask("SELECT @@version, @@server_id", **facts) != Ok()
    assert _ask("SHOW VARIABLES LIKE 'server_%'", **facts) != Ok()
    assert reads == []
    name = "gtid_binlog_pos" if is_mariadb else "gtid_executed"
    value = "0-1-9" if is_mariadb else "u:1-5"
    assert _ask(f"SELECT @@{name}", **facts) == Rows((f"@@{name}",), ((value,),))
    assert reads == [name]


def test_system_variables_and_functions():
    assert _ask("SELECT @@GLOBAL.server_id, @@version AS v, connection_id()") == Rows(
        ("@@GLOBAL.server_id", "v", "connection_id()"), ((1001, "10.11.19-MariaDB-log", 42),))
    assert _ask("SHOW VARIABLES LIKE 'server_id'") == Rows(("Variable_name", "Value"), (("server_id", 1001),))
    assert _ask("SHOW GLOBAL VARIABLES LIKE 'BINLOG_CHECKSUM'") == Rows(
        ("Variable_name", "Value"), (("binlog_checksum", "CRC32"),))
    assert _ask("SELECT @@GLOBAL.gtid_binlog_pos") == Rows(("@@GLOBAL.gtid_binlog_pos",), (("0-1-9",),))
    assert _ask("SELECT binlog_gtid_pos('mysql-bin.000003', 1234)") == Rows(
        ("binlog_gtid_pos('mysql-bin.000003',1234)",), (("0-1-7",),))


def test_errors_as_a_mariadb_primary_gives_them():
    assert _ask("SELECT @@nope") == Error(1193, "Unknown system variable 'nope'", "HY000")
    assert _ask("   ;") == Error(1065, "Query was empty", "42000")
    refused = _ask("DROP DATABASE shop")
    assert isinstance(refused, Error) and refused.code == 1235


def test_show_statements():
    assert _ask("SHOW MASTER STATUS") == Rows(("File", "Position", "Binlog_Do_DB", "Binlog_Ignore_DB"),
                                              (("mysql-bin.000003", 1234, "", ""),))
    assert _ask("SHOW BINARY LOGS") == Rows(("Log_name", "File_size"),
                                            (("mysql-bin.000002", 500), ("mysql-bin.000003", 1234)))
    assert _ask("SHOW SLAVE HOSTS") == Rows(("Server_id", "Host", "Port", "Master_id"),
                                            ((11, "replica-a", 3306, 1001),))


def test_show_warnings_shows_the_conditions_of_the_last_statement_that_raised_any():
    from relay.downstream.queries import conditions_of

    session = SessionVariables()
    assert _ask("SHOW WARNINGS", session) == Rows(("Level", "Code", "Message"), ())
    note = ("Note", 1255, "Slave already has been stopped")
    assert conditions_of(Ok(warnings=(note,))) == (note,)
    assert conditions_of(Error(1198, "running")) == (("Error", 1198, "running"),)
    assert conditions_of(Ok()) == () and conditions_of(Rows(("a",), ())) == ()
    session.warnings = (note,)
    assert _ask("show  warnings;", session) == Rows(("Level", "Code", "Message"), (note,))


def test_a_mysql_history_shows_its_gtid_set_and_gtid_mode():
    executed = "97c7af02-4c50-11ec-acd8-681842034964:1-5"
    mysql = dict(is_mariadb=False, mysql_gtid_executed=lambda: executed,
                 master_status=lambda: ("binlog.000001", 1800, executed))
    assert _ask("SELECT @@GLOBAL.GTID_MODE", **mysql) == Rows(("@@GLOBAL.GTID_MODE",), (("ON",),))
    assert _ask("SHOW BINARY LOG STATUS", **mysql) == Rows(
        ("File", "Position", "Binlog_Do_DB", "Binlog_Ignore_DB", "Executed_Gtid_Set"),
        (("binlog.000001", 1800, "", "", executed),))
    assert _ask("SELECT @@GLOBAL.GTID_MODE", is_mariadb=False) == Rows(("@@GLOBAL.GTID_MODE",), (("OFF",),))


def test_a_mysql_history_shows_its_replicas_with_their_uuids():
    uuid = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
    mysql = dict(is_mariadb=False, slave_hosts=lambda: [(11, "replica-a", 3306, 1001, uuid)])
    assert _ask("SHOW REPLICAS", **mysql) == Rows(("Server_Id", "Host", "Port", "Source_Id", "Replica_UUID"),
                                                  ((11, "replica-a", 3306, 1001, uuid),))
    assert _ask("SHOW SLAVE HOSTS", **mysql) == Rows(("Server_Id", "Host", "Port", "Master_Id", "Slave_UUID"),
                                                     ((11, "replica-a", 3306, 1001, uuid),))
