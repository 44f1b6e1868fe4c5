"""PURGE BINARY LOGS as a query handler: which statements it takes and the errors it answers
before touching the stored files (tests/integration/test_retention.py purges for real)."""

import time

from relay.downstream.purge import PurgeHandler, PurgeRequest, parse_purge
from relay.downstream.queries import Error


def test_only_purge_statements_are_taken():
    assert parse_purge("SELECT 1") is None
    assert parse_purge("purge  binary logs to 'mysql-bin.000003';") == PurgeRequest(to_file="mysql-bin.000003")
    assert parse_purge("PURGE MASTER LOGS BEFORE '2026-01-02 03:04:05'") == PurgeRequest(
        before=time.mktime((2026, 1, 2, 3, 4, 5, 0, 0, -1)))


def test_bad_dates_and_users_without_the_privilege_get_the_servers_errors():
    handler = PurgeHandler(retention=None, is_admin=lambda user: user == "admin")  # type: ignore[arg-type]
    assert handler.answer("SHOW BINARY LOGS", "repl") is None
    bad_date = handler.answer("PURGE BINARY LOGS BEFORE 'yesterday'", "admin")
    assert isinstance(bad_date, Error) and bad_date.code == 1411
    refused = handler.answer("PURGE BINARY LOGS TO 'mysql-bin.000002'", "repl")
    assert isinstance(refused, Error) and (refused.code, refused.sqlstate) == (1227, "42000")
