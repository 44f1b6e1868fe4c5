"""The Spark pipeline against binlogs written by a real MariaDB 10.11 primary and stored by the relay.

One primary and one relay (`binlog-relay run`) serve the module: every column type through
inserts/updates/deletes, rollbacks (InnoDB with and without MyISAM, savepoints), then the
tests read the relay's data_dir with the "binlog" data source on ONE shared SparkSession.
The million-row transaction has its own primary (its binlog copied: the relay stores files
byte-identical) so the other tests do not pay for decoding it.

Expected values always come from the server (SELECT with CAST(... AS CHAR) / HEX(), see
tests/fixtures/make_rows_fixtures.py), never from the decoder.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import shutil
import struct
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession  # noqa: E402 - no skip: pyspark is in the test extra
from pyspark.sql import functions as F  # noqa: E402

from relay.pipeline.source import COLUMNS, BinlogDataSource  # noqa: E402
from relay.sandbox.relayprocess import RelayProcess, relay_config  # noqa: E402
from tests.fixtures import make_rows_fixtures as mrf  # noqa: E402
from tests.support.mariadb import MariaDB, MariaDBFactory  # noqa: E402
from tests.support.relay import wait_for_mirror  # noqa: E402

pytestmark = pytest.mark.timeout(600)

FULL_METADATA = ["--binlog-row-metadata=FULL"]
REPO = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------- Spark, once


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = (SparkSession.builder.master("local[2]").appName("binlog-relay tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.default.parallelism", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.pyspark.python", sys.executable)
               .config("spark.pyspark.driver.python", sys.executable)
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(BinlogDataSource)
    yield session
    session.stop()


def read(spark: SparkSession, data_dir: Path, **options: str) -> list[dict[str, Any]]:
    rows = spark.read.format("binlog").options(**options).load(str(data_dir)).collect()
    return [r.asDict() for r in rows]


def order(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: (r["file"], r["txn_pos"], r["seq"], r["pos"]))


def as_counter(rows: list[dict[str, Any]]) -> Counter:
    return Counter(tuple(r[c] for c in COLUMNS) for r in rows)


# --------------------------------------------------------------------------- the shared primary + relay

BIG_BLOCK = random.Random(7).randbytes(1024)
EXTRA_STATEMENTS = [
    # a 4 MiB blob: its rows events are bigger than the scanner's 1 MiB blocks
    ("bigblob", f"INSERT INTO bigblob VALUES (2, 'huge', REPEAT(X'{BIG_BLOCK.hex()}', 4096))"),
    ("bigblob", "UPDATE bigblob SET note = 'huger' WHERE id = 2"),
    ("strs", "UPDATE strs SET c10 = '𝄞😀', lt = REPEAT('𝄞', 1000) WHERE id = 1"),
]

ROLLBACK_WORKLOAD = [
    "CREATE DATABASE rb",
    "CREATE TABLE rb.inno (id INT PRIMARY KEY, v VARCHAR(20)) ENGINE=InnoDB",
    "CREATE TABLE rb.my (id INT PRIMARY KEY, v VARCHAR(20)) ENGINE=MyISAM",
    "INSERT INTO rb.inno VALUES (1, 'kept'), (2, 'kept')",
    "INSERT INTO rb.my VALUES (1, 'kept')",
    # InnoDB and MyISAM, rolled back: the MyISAM changes persist (and are logged on their own)
    "BEGIN",
    "INSERT INTO rb.inno VALUES (10, 'rolled back')",
    "UPDATE rb.inno SET v = 'rolled back' WHERE id = 1",
    "INSERT INTO rb.my VALUES (10, 'persists')",
    "UPDATE rb.my SET v = 'persists' WHERE id = 1",
    "DELETE FROM rb.inno WHERE id = 2",
    "ROLLBACK",
    # InnoDB alone, rolled back
    "BEGIN",
    "INSERT INTO rb.inno VALUES (20, 'rolled back')",
    "DELETE FROM rb.inno WHERE id = 1",
    "ROLLBACK",
    # a savepoint rolled back inside a committed transaction (MariaDB logs the undone rows)
    "BEGIN",
    "INSERT INTO rb.inno VALUES (30, 'kept')",
    "SAVEPOINT a",
    "INSERT INTO rb.inno VALUES (31, 'undone')",
    "UPDATE rb.inno SET v = 'undone' WHERE id = 30",
    "INSERT INTO rb.my VALUES (31, 'persists')",
    "ROLLBACK TO SAVEPOINT a",
    "INSERT INTO rb.inno VALUES (32, 'kept')",
    "COMMIT",
    # committed, both engines
    "BEGIN",
    "UPDATE rb.inno SET v = 'committed' WHERE id = 2",
    "INSERT INTO rb.my VALUES (40, 'committed')",
    "DELETE FROM rb.my WHERE id = 10",
    "COMMIT",
]


@dataclass
class World:
    primary: MariaDB
    relay: RelayProcess
    data_dir: Path
    statements: list[dict[str, Any]] = field(default_factory=list)  # the types workload, per statement


def run_types_workload(primary: MariaDB) -> list[dict[str, Any]]:
    """tests/fixtures/make_rows_fixtures.py's workload (every column type), one autocommitted
    statement at a time, with the server's own text of each changed row before and after."""
    conn = primary.connect(charset="utf8mb4")
    out = []
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION sql_mode = 'NO_ENGINE_SUBSTITUTION'")
            cur.execute("SET SESSION time_zone = '+00:00'")
            cur.execute("CREATE DATABASE types")
            cur.execute("USE types")
            mrf.create_tables(cur)
            for table, sql in mrf.workload() + EXTRA_STATEMENTS:
                before = mrf.snapshot(cur, table)
                cur.execute(sql)
                after = mrf.snapshot(cur, table)
                cur.execute("SELECT @@last_gtid")
                gtid = cur.fetchone()[0]
                changes = mrf.changes(before, after)
                assert changes, sql
                out.append({"gtid": gtid, "table": table, "sql": sql, "changes": changes})
    finally:
        conn.close()
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, mariadb_template_parent: Path) -> Iterator[World]:
    factory = MariaDBFactory(lambda name: tmp_path_factory.mktemp(f"pipeline-{name}-"))
    work = tmp_path_factory.mktemp("pipeline-relay")
    try:
        primary = factory(server_id=1, extra_args=FULL_METADATA)
        relay = RelayProcess(work, relay_config(work / "data", primary.port))
        relay.start()
        try:
            statements = run_types_workload(primary)
            primary.sql("FLUSH BINARY LOGS")
            primary.execute_many(ROLLBACK_WORKLOAD)
            wait_for_mirror(primary, relay, timeout=90)
            yield World(primary, relay, relay.data_dir, statements)
        finally:
            assert relay.stop() == 0
        assert "Traceback" not in relay.log_text()
    finally:
        factory.close(remove_dirs=True)


# --------------------------------------------------------------------------- (a) every column type


def f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def check_value(spec: dict[str, Any], expected: Any, got: Any, where: str) -> None:
    """An exported JSON value against the server's CAST(... AS CHAR) / HEX() text."""
    kind = spec["kind"]
    if expected is None:
        assert got is None, where
    elif kind in ("int", "bit", "year"):
        assert type(got) is int and got == int(expected), where
    elif kind == "float":
        assert f32(got) == f32(float(expected)), where
    elif kind == "double":
        assert got == float(expected), where
    elif kind in ("decimal", "date", "datetime", "timestamp", "time", "text"):
        assert got == expected, where  # decimals as strings, temporals in the server's text form
    elif kind == "binary":
        assert base64.b64decode(got).hex().upper() == expected, where
    elif kind == "digest":
        digest, length = expected.split(":")
        raw = base64.b64decode(got)
        assert (hashlib.sha256(raw).hexdigest(), len(raw)) == (digest, int(length)), where
    elif kind in ("enum", "set"):
        assert got == expected[0], where  # the member names, as the server shows them
    else:
        raise AssertionError(f"{where}: unknown kind {kind}")


def check_image(table: str, expected: dict[str, Any] | None, got_json: str | None, where: str) -> None:
    if expected is None:
        assert got_json is None, where
        return
    got = json.loads(got_json)
    assert set(got) == set(expected), where
    assert got["id"] == int(expected["id"]), where
    specs = {c["name"]: c for c in mrf.TABLES[table]}
    for name in specs:
        check_value(specs[name], expected[name], got[name], f"{where} column {name}")


def test_every_column_type_matches_select(spark: SparkSession, world: World) -> None:
    rows = order([r for r in read(spark, world.data_dir) if r["database"] == "types"])
    by_gtid: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_gtid.setdefault(r["gtid"], []).append(r)
    ddl = [r["query"] for r in rows if r["op"] == "ddl"]
    assert any(q.startswith("CREATE TABLE temporal") for q in ddl)
    for stmt in world.statements:
        got = by_gtid.pop(stmt["gtid"])
        where = f"{stmt['gtid']} {stmt['sql'][:80]}"
        assert [r["seq"] for r in got] == list(range(len(got))), where
        assert {(r["table"], r["query"]) for r in got} == {(stmt["table"], stmt["sql"])}, where
        by_id = {json.loads(r["after"] or r["before"])["id"]: r for r in got}
        assert sorted(by_id) == [ch["id"] for ch in stmt["changes"]], where
        for ch in stmt["changes"]:
            r = by_id[ch["id"]]
            assert r["op"] == ch["kind"], where
            check_image(stmt["table"], ch["before"], r["before"], f"{where} id {ch['id']} before")
            check_image(stmt["table"], ch["after"], r["after"], f"{where} id {ch['id']} after")
    assert all(rs[0]["op"] == "ddl" for rs in by_gtid.values())  # nothing else was exported
    assert {r["server_id"] for r in rows} == {1}
    assert all(r["commit_ts"].year >= 2024 for r in rows)


# --------------------------------------------------------------------------- (b) rollbacks


def replay(rows: list[dict[str, Any]], database: str, table: str) -> dict[int, dict[str, Any]]:
    """Apply the exported changes of one table in order, from nothing."""
    state: dict[int, dict[str, Any]] = {}
    for r in order(rows):
        if (r["database"], r["table"]) != (database, table):
            continue
        before = json.loads(r["before"]) if r["before"] else None
        after = json.loads(r["after"]) if r["after"] else None
        if r["op"] in ("update", "delete"):
            assert state.pop(before["id"]) == before, r
        if r["op"] in ("insert", "update"):
            assert after["id"] not in state, r
            state[after["id"]] = after
    return state


def test_export_holds_exactly_what_persisted(spark: SparkSession, world: World) -> None:
    rows = [r for r in read(spark, world.data_dir) if r["database"] == "rb"]
    for table in ("inno", "my"):
        persisted = {int(i): {"id": int(i), "v": v}
                     for i, v in world.primary.sql(f"SELECT id, v FROM rb.{table} ORDER BY id")}
        assert replay(rows, "rb", table) == persisted, table
    text = " ".join(str(r["after"]) + str(r["before"]) for r in rows)
    assert "rolled back" not in text and "undone" not in text
    assert text.count("persists") >= 3
    # the MyISAM changes made inside the rolled-back transactions are groups of their own
    my = [r for r in rows if r["table"] == "my" and r["after"] and "persists" in r["after"]]
    inno_gtids = {r["gtid"] for r in rows if r["table"] == "inno"}
    assert my and not {r["gtid"] for r in my} & inno_gtids


# --------------------------------------------------------------------------- (e) options


def test_options_since_until_tables_and_splits(spark: SparkSession, world: World) -> None:
    everything = order(read(spark, world.data_dir))
    files = sorted({r["file"] for r in everything})
    assert len(files) >= 2
    key = lambda r: (r["file"], r["txn_pos"])  # noqa: E731

    rb = read(spark, world.data_dir, tables="rb.inno")
    assert as_counter([r for r in rb if r["op"] != "ddl"]) == as_counter(
        [r for r in everything if (r["database"], r["table"]) == ("rb", "inno")])
    ddl = [r["query"] for r in rb if r["op"] == "ddl"]
    assert any("CREATE TABLE rb.inno" in q for q in ddl) and not any("rb.my" in q for q in ddl)
    two = read(spark, world.data_dir, tables="types.ints,rb.*")
    assert {(r["database"], r["table"]) for r in two if r["op"] != "ddl"} == {
        ("types", "ints"), ("rb", "inno"), ("rb", "my")}

    pivot = [r for r in everything if r["op"] != "ddl"][len(everything) // 2]
    after_pivot = [r for r in everything if key(r) > key(pivot)]
    got = read(spark, world.data_dir, since=f"{pivot['file']}:{pivot['txn_pos'] + 1}")
    assert as_counter(got) == as_counter(after_pivot)  # not a boundary: from the next group
    got = read(spark, world.data_dir, since=f"{pivot['file']}:{pivot['txn_pos']}")
    assert as_counter(got) == as_counter([r for r in everything if key(r) >= key(pivot)])
    got = read(spark, world.data_dir, until=f"{pivot['file']}:{pivot['txn_pos']}")
    assert as_counter(got) == as_counter([r for r in everything if key(r) < key(pivot)])

    seq_no = int(pivot["gtid"].split("-")[2])
    gtid_seq = lambda r: int(r["gtid"].split("-")[2])  # noqa: E731
    got = read(spark, world.data_dir, since=pivot["gtid"])
    assert as_counter(got) == as_counter([r for r in everything if gtid_seq(r) > seq_no])
    got = read(spark, world.data_dir, since=f"0-1-{seq_no - 5}", until=pivot["gtid"], tables="types.*")
    assert as_counter(got) == as_counter([r for r in everything if seq_no - 5 < gtid_seq(r) <= seq_no
                                          and r["database"] == "types"])

    df = spark.read.format("binlog").option("splitBytes", "16k").load(str(world.data_dir))
    assert df.rdd.getNumPartitions() > len(files) + 2  # large files cut at group ends
    assert as_counter([r.asDict() for r in df.collect()]) == as_counter(everything)
    with pytest.raises(Exception, match="FILE:POS"):
        read(spark, world.data_dir, since="last tuesday")
    # a misspelt filter is an error, not an export of every table
    with pytest.raises(Exception, match="unknown option.*tabels"):
        spark.read.format("binlog").option("tabels", "rb.inno").load(str(world.data_dir)).collect()


# --------------------------------------------------------------------------- (d) streaming


def test_stream_follows_the_live_relay_and_equals_the_batch(spark: SparkSession, world: World,
                                                           tmp_path: Path) -> None:
    batches: list[list[dict[str, Any]]] = []

    def collect(df: Any, batch_id: int) -> None:
        batches.append([r.asDict() for r in df.collect()])

    query = (spark.readStream.format("binlog").load(str(world.data_dir)).writeStream
             .foreachBatch(collect).option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(processingTime="200 milliseconds").start())
    try:
        query.processAllAvailable()
        first = sum(len(b) for b in batches)
        assert first > 0
        # the primary goes on writing; the relay stores it; the query follows
        p = world.primary
        p.execute_many(["CREATE DATABASE live",
                        "CREATE TABLE live.t (id INT PRIMARY KEY, v INT) ENGINE=InnoDB"])
        for i in range(5):
            p.execute_many(["BEGIN", f"INSERT INTO live.t VALUES ({i}, {i})",
                            f"UPDATE live.t SET v = v + 100 WHERE id = {i}", "COMMIT"])
        p.sql("FLUSH BINARY LOGS")
        p.execute_many(["DELETE FROM live.t WHERE id < 2", "INSERT INTO live.t SELECT seq + 10, seq FROM "
                        "live.seq_1_to_3000"])
        wait_for_mirror(p, world.relay, timeout=60)
        query.processAllAvailable()
    finally:
        query.stop()
    streamed = [r for b in batches for r in b]
    assert len([b for b in batches if b]) >= 2 and len(streamed) > first
    live = [r for r in streamed if r["database"] == "live" and r["op"] != "ddl"]
    assert len(live) == 5 + 5 + 2 + 3000
    assert as_counter(streamed) == as_counter(read(spark, world.data_dir))

    # trigger(availableNow=True) on a fresh checkpoint: the same rows again, then it stops
    again: list[dict[str, Any]] = []
    q2 = (spark.readStream.format("binlog").option("tables", "live.t").load(str(world.data_dir))
          .writeStream.foreachBatch(lambda df, _: again.extend(r.asDict() for r in df.collect()))
          .option("checkpointLocation", str(tmp_path / "checkpoint2")).trigger(availableNow=True).start())
    q2.awaitTermination(120)
    assert as_counter(again) == as_counter(read(spark, world.data_dir, tables="live.t"))


# --------------------------------------------------------------------------- the CLI


def test_export_command_writes_what_the_source_reads(spark: SparkSession, world: World, tmp_path: Path) -> None:
    out = tmp_path / "export"
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "relay.cli", "export", "--data-dir", str(world.data_dir), "--out", str(out),
         "--format", "json", "--master", "local[1]", "--tables", "rb.*"],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "exported" in result.stderr and "partitions of" in result.stderr, result.stderr[-2000:]
    exported = spark.read.schema(spark.read.format("binlog").load(str(world.data_dir)).schema).json(str(out))
    assert as_counter([r.asDict() for r in exported.collect()]) == as_counter(
        read(spark, world.data_dir, tables="rb.*"))
    assert time.monotonic() - started < 120
    bad = subprocess.run([sys.executable, "-m", "relay.cli", "export", "--data-dir", str(world.data_dir),
                          "--out", str(tmp_path / "x"), "--since", "nonsense"],
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "FILE:POS" in bad.stderr


# --------------------------------------------------------------------------- (c) a million rows

RSS_PROBE = textwrap.dedent("""
    import json, sys
    from relay.pipeline import plan as pl
    data_dir, mode = sys.argv[1], sys.argv[2]
    p = pl.plan_ranges(data_dir)
    rows = reread = 0
    if mode == "changes":
        from relay.pipeline.jsonform import row_json
        from relay.pipeline.read import iter_changes
        for r in p.ranges:
            decoders = []
            for c in iter_changes(r.path, r.start, r.end, file=r.name, decoder_out=decoders):
                row_json(c.after, c.table_map)
                rows += 1
            reread += decoders[0].reread_groups
    else:  # what a Spark executor's Python worker runs: Arrow batches of JSON rows
        from relay.pipeline.source import Options, BinlogBatchReader
        reader = BinlogBatchReader(Options.parse({"path": data_dir}))
        for part in reader.partitions():
            for batch in reader.read(part):
                rows += batch.num_rows
    hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
    print(json.dumps({"rows": rows, "reread_groups": reread, "peak_rss_mib": hwm / 1024}))
""")


def probe(data_dir: Path, mode: str) -> dict[str, Any]:
    result = subprocess.run([sys.executable, "-c", RSS_PROBE, str(data_dir), mode], cwd=REPO,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_million_row_transaction_in_bounded_memory(spark: SparkSession, mariadb_factory: Any,
                                                   tmp_path: Path) -> None:
    primary = mariadb_factory(server_id=1, extra_args=FULL_METADATA)
    primary.execute_many([
        "CREATE DATABASE big", "CREATE TABLE big.t (id INT PRIMARY KEY, v INT) ENGINE=InnoDB",
        "CREATE TABLE big.m (id INT PRIMARY KEY) ENGINE=MyISAM",
        "BEGIN",
        "INSERT INTO big.t SELECT seq, seq * 2 FROM big.seq_1_to_1000000",
        "SAVEPOINT more",
        "INSERT INTO big.t SELECT seq, 0 FROM big.seq_1000001_to_1200000",  # undone below
        # A non-transactional change after the savepoint: MariaDB can no longer cut the
        # undone rows out of the transaction's binlog cache, so it logs them followed by
        # ROLLBACK TO (with InnoDB alone it would simply drop them).
        "INSERT INTO big.m VALUES (1)",
        "ROLLBACK TO SAVEPOINT more",
        "COMMIT",
    ])
    assert primary.sql("SELECT COUNT(*), SUM(id), SUM(v) FROM big.t")[0] == (1_000_000, 500000500000,
                                                                           1000001000000)
    data = tmp_path / "data"  # the relay stores the primary's files byte for byte
    data.mkdir()
    names = [name for name, _ in primary.binlog_files()]
    primary.stop()
    for name in names:
        shutil.copyfile(primary.binlog_path(name), data / name)
    (data / "binlog.index").write_text("".join(f"./{n}\n" for n in names))
    binlog_mib = sum((data / n).stat().st_size for n in names) / (1 << 20)

    assert binlog_mib > 10  # 1.2 M rows logged (1 M would be 8.6 MiB)
    decoder = probe(data, "changes")
    assert decoder["rows"] == 1_000_000 + 3 + 1  # + CREATE DATABASE, 2 x CREATE TABLE, big.m's row
    assert decoder["reread_groups"] >= 1
    executor = probe(data, "arrow")
    assert executor["rows"] == decoder["rows"]
    print(f"\n1M-row transaction ({binlog_mib:.1f} MiB of binlog, 1.2M rows logged): peak RSS "
          f"{decoder['peak_rss_mib']:.0f} MiB (changes + JSON), {executor['peak_rss_mib']:.0f} MiB "
          "(Arrow batches, as an executor)")
    assert decoder["peak_rss_mib"] < 300 and executor["peak_rss_mib"] < 300

    df = spark.read.format("binlog").load(str(data)).where("op = 'insert' AND table = 't'")
    stats = df.agg(F.count("*").alias("n"), F.countDistinct("gtid").alias("groups"),
                   F.max("seq").alias("max_seq"),
                   F.sum(F.get_json_object("after", "$.id").cast("long")).alias("ids"),
                   F.sum(F.get_json_object("after", "$.v").cast("long")).alias("vs")).first()
    assert (stats.n, stats.groups, stats.max_seq, stats.ids, stats.vs) == (
        1_000_000, 1, 999_999, 500000500000, 1000001000000)
