"""The pipeline's transactions view against a real MariaDB 10.11 primary, compared with what the real
`mariadb-binlog` tool reads in the primary's own binlog files.

One primary (binlog_format=ROW, binlog_row_metadata=FULL) runs a workload over two binlog files:
multi-table transactions, inserts/updates/deletes of several rows, DDL, a plain rollback, a
rollback with a MyISAM write inside (which persists as a group of its own), a second GTID domain
and server id, statement-based DML inside a transaction, a transaction of thousands of rows.
Header times are set (SET timestamp) so that every transaction has its own. The files go into a
data_dir with `binlog-relay import`; the expected transactions come from
`mariadb-binlog --base64-output=decode-rows -vv` on the primary's files (tests/support/binlogtext.py),
never from the decoder; a few are also checked against the workload itself.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from relay.pipeline.export import run_export
from relay.pipeline.source import (
    TRANSACTIONS_COLUMNS,
    TRANSACTIONS_SCHEMA,
    BinlogDataSource,
)
from tests.support.binlogtext import binlog_transactions
from tests.support.mariadb import MariaDBFactory

pytestmark = pytest.mark.timeout(600)

REPO = Path(__file__).resolve().parents[2]
T0 = 1_750_000_000  # the workload's header times: SET timestamp

FIRST_FILE = [
    f"SET timestamp = {T0}",
    "CREATE DATABASE shop",
    "CREATE TABLE shop.orders (id INT PRIMARY KEY, customer VARCHAR(20), total DECIMAL(10,2)) ENGINE=InnoDB",
    "CREATE TABLE shop.items (order_id INT, sku VARCHAR(20), qty INT, PRIMARY KEY (order_id, sku)) ENGINE=InnoDB",
    "CREATE TABLE shop.audit (id INT AUTO_INCREMENT PRIMARY KEY, note VARCHAR(40)) ENGINE=MyISAM",
    "CREATE TABLE shop.notes (id INT PRIMARY KEY, body TEXT) ENGINE=InnoDB",
    # two tables, orders first
    f"SET timestamp = {T0 + 10}", "BEGIN",
    "INSERT INTO shop.orders VALUES (1, 'ann', 10), (2, 'bob', 20), (3, 'cid', 30)",
    "INSERT INTO shop.items VALUES (1, 'a', 1), (1, 'b', 2), (2, 'a', 5), (3, 'c', 1)",
    f"SET timestamp = {T0 + 11}", "COMMIT",
    # items first; updates and deletes of several rows
    f"SET timestamp = {T0 + 20}", "BEGIN",
    "UPDATE shop.items SET qty = qty + 1 WHERE order_id = 1",
    "DELETE FROM shop.items WHERE order_id = 3",
    "DELETE FROM shop.orders WHERE id = 3",
    "UPDATE shop.orders SET total = total * 2",
    f"SET timestamp = {T0 + 22}", "COMMIT",
    # rolled back: no transaction
    f"SET timestamp = {T0 + 25}", "BEGIN",
    "INSERT INTO shop.orders VALUES (9, 'zed', 99)", "UPDATE shop.items SET qty = 0", "ROLLBACK",
    # rolled back, with a MyISAM write inside: that write persisted, logged as a group of its own
    f"SET timestamp = {T0 + 30}", "BEGIN",
    "INSERT INTO shop.orders VALUES (10, 'yan', 1)",
    "INSERT INTO shop.audit (note) VALUES ('kept'), ('kept too')", "ROLLBACK",
    f"SET timestamp = {T0 + 40}", "ALTER TABLE shop.orders ADD COLUMN status VARCHAR(10) DEFAULT 'new'",
    # another GTID domain and server id
    "SET SESSION gtid_domain_id = 1", "SET SESSION server_id = 2",
    f"SET timestamp = {T0 + 50}", "BEGIN",
    "INSERT INTO shop.notes VALUES (1, 'x'), (2, 'y')",
    "UPDATE shop.orders SET status = 'paid' WHERE id IN (1, 2)",
    "DELETE FROM shop.items WHERE order_id = 2",
    f"SET timestamp = {T0 + 53}", "COMMIT",
    # statement-based DML inside a transaction: no rows to count, two statements
    "SET SESSION binlog_format = 'STATEMENT'", f"SET timestamp = {T0 + 60}", "BEGIN",
    "INSERT INTO shop.notes VALUES (3, 'stmt')", "UPDATE shop.notes SET body = 'z' WHERE id = 3",
    f"SET timestamp = {T0 + 61}", "COMMIT", "SET SESSION binlog_format = 'ROW'",
    "SET SESSION gtid_domain_id = 0", "SET SESSION server_id = 1",
]
SECOND_FILE = [
    f"SET timestamp = {T0 + 70}", "DELETE FROM shop.notes WHERE id IN (1, 2)",  # autocommitted
    # thousands of rows: several rows events per statement
    f"SET timestamp = {T0 + 80}", "BEGIN",
    "INSERT INTO shop.items SELECT seq, 'bulk', seq FROM shop.seq_1000_to_3999",
    "UPDATE shop.items SET qty = qty + 1 WHERE sku = 'bulk' AND order_id < 2000",
    "INSERT INTO shop.orders (id, customer, total) VALUES (4, 'dee', 40)",
    f"SET timestamp = {T0 + 81}", "COMMIT",
    f"SET timestamp = {T0 + 90}", "DROP TABLE shop.audit",
    "SET timestamp = DEFAULT",
]

Txn = tuple[Any, ...]  # (gtid, server_id, file, pos, end_pos, first_ts, commit_ts, size, changes, statements)


@dataclass(frozen=True)
class World:
    data_dir: Path
    files: list[str]
    expected: list[Txn]  # mariadb-binlog's reading of the primary's files
    gtid_binlog_pos: str


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    # test_pipeline.py's session may be running: share it, and leave its stopping to it
    existing = SparkSession.getActiveSession()
    session = existing or (SparkSession.builder.master("local[2]").appName("binlog-relay transactions tests")
                           .config("spark.ui.enabled", "false")
                           .config("spark.ui.showConsoleProgress", "false")
                           .config("spark.sql.shuffle.partitions", "2")
                           .config("spark.sql.session.timeZone", "UTC")
                           .config("spark.pyspark.python", sys.executable)
                           .config("spark.pyspark.driver.python", sys.executable)
                           .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(BinlogDataSource)
    yield session
    if existing is None:
        session.stop()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, mariadb_template_parent: Path) -> Iterator[World]:
    factory = MariaDBFactory(lambda name: tmp_path_factory.mktemp(f"txns-{name}-"))
    try:
        primary = factory(server_id=1, extra_args=["--binlog-row-metadata=FULL", "--binlog-format=ROW"])
        primary.execute_many(FIRST_FILE)
        primary.sql("FLUSH BINARY LOGS")
        primary.execute_many(SECOND_FILE)
        gtid_binlog_pos = primary.sql("SELECT @@gtid_binlog_pos")[0][0]
        names = [name for name, _ in primary.binlog_files()]
        primary.stop()  # its files complete; they stay where they are
        paths = [primary.binlog_path(name) for name in names]
        data_dir = tmp_path_factory.mktemp("txns-relay") / "data"
        imported = subprocess.run([sys.executable, "-m", "relay.cli", "import", "--data-dir", str(data_dir),
                                   *map(str, paths)], cwd=REPO, capture_output=True, text=True, timeout=120,
                                  check=False)
        assert imported.returncode == 0, imported.stderr
        expected = [(t.gtid, t.server_id, name, t.pos, t.end_pos, t.first_ts, t.commit_ts, t.size, t.changes,
                     t.statements) for name, path in zip(names, paths) for t in binlog_transactions(path)]
        yield World(data_dir, names, expected, gtid_binlog_pos)
    finally:
        factory.close(remove_dirs=True)


def load(spark: SparkSession, data_dir: Path, **options: str) -> DataFrame:
    return spark.read.format("binlog").option("view", "transactions").options(**options).load(str(data_dir))


def rows_of(df: DataFrame) -> list[Txn]:
    """Every column; the timestamps as epoch seconds (an instant, whatever the time zones)."""
    cols = [F.col(c).cast("long").alias(c) if c.endswith("_ts") else F.col(c) for c in TRANSACTIONS_COLUMNS]
    return [(r.gtid, r.server_id, r.file, r.pos, r.end_pos, r.first_ts, r.commit_ts, r.size,
             tuple((c.database, c.table, c.inserts, c.updates, c.deletes) for c in r.changes), r.statements)
            for r in df.select(*cols).collect()]


def by_position(world: World, rows: list[Txn]) -> list[Txn]:
    return sorted(rows, key=lambda t: (world.files.index(t[2]), t[3]))


def only_tables(expected: list[Txn], tables: set[tuple[str, str]]) -> list[Txn]:
    """Transactions with a change in these tables, their changes cut down to them."""
    out = []
    for t in expected:
        kept = tuple(c for c in t[8] if (c[0], c[1]) in tables)
        if kept:
            out.append((*t[:8], kept, t[9]))
    return out


def seq_of(t: Txn) -> tuple[int, int]:
    domain, _, seq = t[0].split("-")
    return int(domain), int(seq)


# --------------------------------------------------------------------------- every column


def test_transactions_match_mariadb_binlog(spark: SparkSession, world: World) -> None:
    df = load(spark, world.data_dir)
    assert df.schema == TRANSACTIONS_SCHEMA
    got = rows_of(df)
    assert got == world.expected  # every column, in binlog order
    assert len(world.files) == 2 and {t[2] for t in got} == set(world.files)

    # what the workload itself says, beside mariadb-binlog
    changes = [t[8] for t in got]
    assert (("shop", "orders", 3, 0, 0), ("shop", "items", 4, 0, 0)) in changes
    assert (("shop", "items", 0, 2, 1), ("shop", "orders", 0, 2, 1)) in changes
    assert (("shop", "audit", 2, 0, 0),) in changes  # the MyISAM write inside a rollback
    assert (("shop", "items", 3000, 1000, 0), ("shop", "orders", 1, 0, 0)) in changes
    # ids 1, 2, 3 and 4: not 9 and 10, rolled back
    assert sum(c[2] for cs in changes for c in cs if c[:2] == ("shop", "orders")) == 4
    domain1 = [t for t in got if t[0].startswith("1-")]
    assert [(t[0], t[1], t[5], t[6], t[8], t[9]) for t in domain1] == [
        ("1-2-1", 2, T0 + 53, T0 + 53,
         (("shop", "notes", 2, 0, 0), ("shop", "orders", 0, 2, 0), ("shop", "items", 0, 0, 1)), 0),
        ("1-2-2", 2, T0 + 61, T0 + 61, (), 2)]
    ddl = [t for t in got if not t[8] and not t[9]]
    assert [t[6] for t in ddl] == [T0] * 5 + [T0 + 40, T0 + 90]  # CREATE x5, ALTER, DROP
    assert all(t[7] == t[4] - t[3] > 0 for t in got)
    # every GTID the primary logged, none twice, none rolled back among them
    last = dict(g.split("-", 1) for g in world.gtid_binlog_pos.split(","))
    for domain, server_seq in last.items():
        seqs = [seq_of(t)[1] for t in got if t[0].startswith(f"{domain}-")]
        assert seqs == list(range(1, int(server_seq.split("-")[1]) + 1))


def test_transactions_are_the_change_view_summed(spark: SparkSession, world: World) -> None:
    rows = spark.read.format("binlog").load(str(world.data_dir)).collect()
    summed: dict[tuple[str, int], dict[tuple[str, str], list[int]]] = {}
    statements: dict[tuple[str, int], int] = {}
    for r in rows:
        key = (r.file, r.txn_pos)
        tables = summed.setdefault(key, {})
        if r.op in ("insert", "update", "delete"):
            tables.setdefault((r.database, r.table), [0, 0, 0])[("insert", "update", "delete").index(r.op)] += 1
        statements[key] = statements.get(key, 0) + (r.op == "statement")
    got = {(t[2], t[3]): (t[8], t[9]) for t in rows_of(load(spark, world.data_dir))}
    assert got == {k: (tuple((*t, *c) for t, c in v.items()), statements[k]) for k, v in summed.items()}


# --------------------------------------------------------------------------- options


def test_since_until_tables_and_partitioning(spark: SparkSession, world: World) -> None:
    expected = world.expected
    rows_filtered = [t for t in expected if t[8] or t[9]]  # without DDL
    assert rows_of(load(spark, world.data_dir, ddl="false")) == rows_filtered
    assert rows_of(load(spark, world.data_dir, tables="shop.items", ddl="false")) == only_tables(
        expected, {("shop", "items")})
    # the statement-based DML names shop.notes: its transaction is in, with its statements
    notes = rows_of(load(spark, world.data_dir, tables="shop.no*", ddl="false"))
    assert notes == [(*t[:8], tuple(c for c in t[8] if c[:2] == ("shop", "notes")), t[9]) for t in expected
                     if t[9] or any(c[:2] == ("shop", "notes") for c in t[8])]
    assert [t[8] for t in notes] == [(("shop", "notes", 2, 0, 0),), (), (("shop", "notes", 0, 0, 2),)]
    # with DDL: those naming the table too
    items = rows_of(load(spark, world.data_dir, tables="shop.items"))
    assert [t for t in items if t[8]] == only_tables(expected, {("shop", "items")})
    assert len([t for t in items if not t[8]]) == 1  # CREATE TABLE shop.items

    files = world.files

    def key(t):
        return files.index(t[2]), t[3]

    pivot = [t for t in expected if t[8] and t[0].startswith("0-")][2]  # the MyISAM group
    assert rows_of(load(spark, world.data_dir, since=f"{pivot[2]}:{pivot[3]}")) == [
        t for t in expected if key(t) >= key(pivot)]
    assert rows_of(load(spark, world.data_dir, since=f"{pivot[2]}:{pivot[3] + 1}")) == [
        t for t in expected if key(t) > key(pivot)]
    assert rows_of(load(spark, world.data_dir, until=f"{pivot[2]}:{pivot[4]}")) == [
        t for t in expected if key(t) <= key(pivot)]
    domain, seq = seq_of(pivot)
    assert domain == 0
    # a GTID bound limits its own domain only
    assert rows_of(load(spark, world.data_dir, since=pivot[0])) == [
        t for t in expected if seq_of(t)[0] != 0 or seq_of(t)[1] > seq]
    assert rows_of(load(spark, world.data_dir, until=f"0-1-{seq},1-2-1")) == [
        t for t in expected if seq_of(t)[1] <= (seq if seq_of(t)[0] == 0 else 1)]

    assert max(t[7] for t in expected) > 64 << 10  # the big transaction outgrows a 16k segment
    small = load(spark, world.data_dir, splitBytes="1k", segmentBytes="16k")
    assert small.rdd.getNumPartitions() > len(files) + 1  # cut at group ends (the big group stays whole)
    assert rows_of(small) == expected  # and the big transaction read again from its file
    with pytest.raises(Exception, match=r"unknown view 'rows'.*valid views: changes, transactions"):
        spark.read.format("binlog").option("view", "rows").load(str(world.data_dir)).collect()


def test_stream_of_transactions_equals_the_batch(spark: SparkSession, world: World, tmp_path: Path) -> None:
    got: list[Txn] = []
    query = (load_stream(spark, world.data_dir).writeStream
             .foreachBatch(lambda df, _: got.extend(rows_of(df)))
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    query.awaitTermination(180)
    assert query.exception() is None
    assert by_position(world, got) == world.expected


def load_stream(spark: SparkSession, data_dir: Path) -> DataFrame:
    return spark.readStream.format("binlog").option("view", "transactions").load(str(data_dir))


# --------------------------------------------------------------------------- the export command


def export(world: World, out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "relay.cli", "export", "--data-dir", str(world.data_dir), "--out", str(out),
         "--master", "local[1]", "--view", "transactions", "--no-progress", *args],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def test_export_view_transactions(spark: SparkSession, world: World, tmp_path: Path) -> None:
    result = export(world, tmp_path / "json", "--format", "json")
    assert "exported the transactions of 2 file(s)" in result.stderr, result.stderr[-2000:]
    exported = spark.read.schema(TRANSACTIONS_SCHEMA).json(str(tmp_path / "json"))
    assert by_position(world, rows_of(exported)) == world.expected

    # The other formats through the function the command runs, in this session's Spark (a command
    # each would start a JVM of its own: half a minute here, for the same code)
    run_export(spark, str(world.data_dir), str(tmp_path / "parquet"), tables="shop.orders", ddl=False,
               progress=False, view="transactions")
    exported = spark.read.parquet(str(tmp_path / "parquet"))
    assert by_position(world, rows_of(exported)) == only_tables(world.expected, {("shop", "orders")})

    # CSV has no arrays: changes is a JSON string there
    run_export(spark, str(world.data_dir), str(tmp_path / "csv"), "csv", progress=False, view="transactions")
    lines = spark.read.option("header", "true").csv(str(tmp_path / "csv")).collect()
    from_csv = sorted(((r.file, int(r.pos)), json.loads(r.changes), int(r.statements)) for r in lines)
    assert from_csv == sorted(((t[2], t[3]), [dict(zip(("database", "table", "inserts", "updates", "deletes"), c))
                                              for c in t[8]], t[9]) for t in world.expected)
