"""The "binlog" Spark data source (pyspark.sql.datasource, Spark 4): change rows of a relay data_dir.

    from relay.pipeline.source import BinlogDataSource
    spark.dataSource.register(BinlogDataSource)
    df = spark.read.format("binlog").option("tables", "shop.*").load("/var/lib/binlog-relay")
    stream = spark.readStream.format("binlog").load("/var/lib/binlog-relay")
    txns = spark.read.format("binlog").option("view", "transactions").load("/var/lib/binlog-relay")

Two views of the same committed groups. "changes" (the default): one row per changed table
row (and per DDL statement); columns in SCHEMA. "transactions": one row per committed
transaction with its row counts per table (relay.rows.transactions); columns in
TRANSACTIONS_SCHEMA. Options:

  view         changes (default) or transactions
  since        FILE:POS or a MariaDB GTID position (D-S-N[,D-S-N...]): only groups after it
  until        FILE:POS or GTID position: only groups up to it (inclusive)
  tables       db.t,db2.* : only these tables (and DDL naming them)
  splitBytes   target partition size when splitting large files at group ends (default 64m)
  segmentBytes memory per open transaction; beyond it the transaction's events are read
               again from the stored file when it commits (default 4m)
  ddl          false to leave out DDL rows (transactions view: DDL transactions) (default true)

Partitions: one per stored file, large files cut at group boundaries into ~splitBytes
ranges. The executors must see the data_dir at the same path (local mode, or a shared
file system) and must be able to import ``relay`` (see the README, "Data pipeline").
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.types import ArrayType, LongType, StringType, StructField, StructType, TimestampType

from ..rows.changes import GtidRange
from . import plan as pl

try:  # Spark 4.2+: lets trigger(availableNow=True) stop at the offset seen when it starts
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow as _AvailableNow

    _STREAM_BASES: tuple[type, ...] = (DataSourceStreamReader, _AvailableNow)
except ImportError:  # pragma: no cover - Spark 4.0/4.1
    _STREAM_BASES = (DataSourceStreamReader,)

COLUMNS = ["file", "pos", "gtid", "commit_ts", "server_id", "database", "table", "op", "seq",
           "before", "after", "query", "txn_pos"]

SCHEMA = StructType([
    StructField("file", StringType(), False),
    StructField("pos", LongType(), False),
    StructField("gtid", StringType(), True),
    StructField("commit_ts", TimestampType(), False),
    StructField("server_id", LongType(), False),
    StructField("database", StringType(), True),
    StructField("table", StringType(), True),
    StructField("op", StringType(), False),
    StructField("seq", LongType(), False),
    StructField("before", StringType(), True),
    StructField("after", StringType(), True),
    StructField("query", StringType(), True),
    StructField("txn_pos", LongType(), False),
])

VIEWS = ("changes", "transactions")

TABLE_CHANGES_TYPE = StructType([
    StructField("database", StringType(), False),
    StructField("table", StringType(), False),
    StructField("inserts", LongType(), False),
    StructField("updates", LongType(), False),
    StructField("deletes", LongType(), False),
])

TRANSACTIONS_SCHEMA = StructType([
    StructField("gtid", StringType(), True),
    StructField("server_id", LongType(), False),
    StructField("file", StringType(), False),
    StructField("pos", LongType(), False),
    StructField("end_pos", LongType(), False),
    StructField("first_ts", TimestampType(), False),
    StructField("commit_ts", TimestampType(), False),
    StructField("size", LongType(), False),
    StructField("changes", ArrayType(TABLE_CHANGES_TYPE, containsNull=False), False),
    StructField("statements", LongType(), False),
])
TRANSACTIONS_COLUMNS = TRANSACTIONS_SCHEMA.fieldNames()

BATCH_ROWS = 4096
# A batch also ends at this many bytes of row images: 4096 rows of 1 MB blobs would be 4 GB.
BATCH_BYTES = 8 << 20


_OPTION_NAMES = ("view", "since", "until", "tables", "splitBytes", "segmentBytes", "ddl")
_KNOWN_OPTIONS = frozenset(name.lower() for name in _OPTION_NAMES) | {"path"}  # path: .load(path)


@dataclass(frozen=True)
class Options:
    data_dir: str
    since: pl.Bound | None
    until: pl.Bound | None
    tables: str | None
    split_bytes: int
    segment_bytes: int
    ddl: bool
    view: str = "changes"

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> Options:
        opts = {str(k).lower(): v for k, v in options.items()}
        unknown = sorted(set(opts) - _KNOWN_OPTIONS)
        if unknown:
            # a misspelt filter must not silently export everything
            raise pl.PlanError(f"unknown option(s) of the binlog data source: {', '.join(unknown)} "
                               f"(known: {', '.join(_OPTION_NAMES)})")
        path = opts.get("path")
        if not path:
            raise pl.PlanError('the binlog data source needs a data_dir: .load("/path/to/data_dir")')
        tables = opts.get("tables") or None
        if tables:
            from ..rows.changes import TableFilter

            TableFilter(tables)  # fail early on a bad spec
        ddl = str(opts.get("ddl", "true")).strip().lower() not in ("false", "0", "no", "off")
        return cls(str(path), pl.parse_bound(opts.get("since"), "since"),
                   pl.parse_bound(opts.get("until"), "until"), tables,
                   pl.parse_size(opts.get("splitbytes"), pl.DEFAULT_SPLIT_BYTES),
                   pl.parse_size(opts.get("segmentbytes"), 4 << 20), ddl, parse_view(opts.get("view")))


def parse_view(value: str | None) -> str:
    """The view option: changes (default) or transactions; anything else is an error."""
    view = "changes" if value is None or not str(value).strip() else str(value).strip().lower()
    if view not in VIEWS:
        raise pl.PlanError(f"unknown view {value!r} of the binlog data source (valid views: {', '.join(VIEWS)})")
    return view


def schema_of(view: str) -> StructType:
    return TRANSACTIONS_SCHEMA if view == "transactions" else SCHEMA


class BinlogPartition(InputPartition):
    """One group-aligned range of one stored file, with the filters to apply."""

    def __init__(self, rng: pl.FileRange, since_gtids: dict[int, int], until_gtids: dict[int, int],
                 tables: str | None, segment_bytes: int, ddl: bool, view: str = "changes") -> None:
        super().__init__((rng.name, rng.start, rng.end))
        self.range = rng
        self.since_gtids = since_gtids
        self.until_gtids = until_gtids
        self.tables = tables
        self.segment_bytes = segment_bytes
        self.ddl = ddl
        self.view = view


def _partitions(ranges: list[pl.FileRange], gtids: Any, o: Options) -> list[BinlogPartition]:
    return [BinlogPartition(r, dict(gtids.since), dict(gtids.until), o.tables, o.segment_bytes, o.ddl, o.view)
            for r in ranges]


_ARROW_TYPES = {"pos": "int64", "server_id": "int64", "seq": "int64", "txn_pos": "int64",
                "commit_ts": "timestamp"}


def _arrow_schema() -> Any:
    import pyarrow as pa

    fields = []
    for f in SCHEMA.fields:
        kind = _ARROW_TYPES.get(f.name, "string")
        typ = (pa.int64() if kind == "int64" else pa.timestamp("us", tz="UTC") if kind == "timestamp"
               else pa.string())
        fields.append(pa.field(f.name, typ, nullable=f.nullable))
    return pa.schema(fields)


def read_partition(part: BinlogPartition) -> Iterator[Any]:
    """The rows of one partition, in its view, as Arrow record batches (the executor side)."""
    if part.view == "transactions":
        return read_transactions(part)
    return _read_changes(part)


def read_transactions(part: BinlogPartition) -> Iterator[Any]:
    """The transactions of one partition as Arrow record batches (TRANSACTIONS_SCHEMA)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    from ..rows.changes import GtidRange
    from .read import iter_transactions

    # Exactly the schema Spark checks a Python data source's batches against.
    schema = to_arrow_schema(TRANSACTIONS_SCHEMA, timezone="UTC")
    rng = part.range
    txns = iter_transactions(rng.path, rng.start, rng.end, file=rng.name,
                             gtids=GtidRange(part.since_gtids, part.until_gtids), tables=part.tables,
                             segment_bytes=part.segment_bytes, with_ddl=part.ddl)
    rows: list[tuple[Any, ...]] = []
    for t in txns:
        rows.append((t.gtid, t.server_id, t.file, t.pos, t.end_pos, t.first_ts * 1_000_000,
                     t.commit_ts * 1_000_000, t.size,
                     [(c.database, c.table, c.inserts, c.updates, c.deletes) for c in t.changes], t.statements))
        if len(rows) >= BATCH_ROWS:  # a row is small: its changes list grows with its tables, not its rows
            yield _transaction_batch(pa, schema, rows)
            rows.clear()
    if rows:
        yield _transaction_batch(pa, schema, rows)


def _transaction_batch(pa: Any, schema: Any, rows: list[tuple[Any, ...]]) -> Any:
    # a struct value may be a tuple of its fields, in order
    return pa.RecordBatch.from_arrays([pa.array(col, type=f.type) for col, f in zip(zip(*rows), schema)],
                                      schema=schema)


def _read_changes(part: BinlogPartition) -> Iterator[Any]:
    """The change rows of one partition as Arrow record batches (SCHEMA)."""
    import pyarrow as pa

    from ..rows.changes import GtidRange
    from .jsonform import row_json
    from .read import iter_changes

    schema = _arrow_schema()
    rng = part.range
    changes = iter_changes(rng.path, rng.start, rng.end, file=rng.name,
                           gtids=GtidRange(part.since_gtids, part.until_gtids), tables=part.tables,
                           segment_bytes=part.segment_bytes, with_ddl=part.ddl)
    cols: list[list[Any]] = [[] for _ in range(13)]
    (c_file, c_pos, c_gtid, c_ts, c_sid, c_db, c_table, c_op, c_seq, c_before, c_after, c_query,
     c_txn) = cols
    n = size = 0
    for c in changes:
        c_file.append(c.file)
        c_pos.append(c.pos)
        c_gtid.append(c.gtid)
        c_ts.append(c.commit_ts * 1_000_000)
        c_sid.append(c.server_id)
        c_db.append(c.database)
        c_table.append(c.table)
        c_op.append(c.op)
        c_seq.append(c.seq)
        tm = c.table_map
        before = None if c.before is None else row_json(c.before, tm)
        after = None if c.after is None else row_json(c.after, tm)
        c_before.append(before)
        c_after.append(after)
        c_query.append(c.query)
        c_txn.append(c.txn_pos)
        n += 1
        size += len(before or "") + len(after or "") + len(c.query or "")
        if n >= BATCH_ROWS or size >= BATCH_BYTES:
            yield pa.RecordBatch.from_arrays([pa.array(col, type=f.type) for col, f in zip(cols, schema)],
                                             schema=schema)
            for col in cols:
                col.clear()
            n = size = 0
    if n:
        yield pa.RecordBatch.from_arrays([pa.array(col, type=f.type) for col, f in zip(cols, schema)],
                                         schema=schema)


class BinlogBatchReader(DataSourceReader):
    def __init__(self, options: Options) -> None:
        self.options = options

    def partitions(self) -> list[BinlogPartition]:
        o = self.options
        p = pl.plan_ranges(o.data_dir, o.since, o.until, o.split_bytes)
        return _partitions(p.ranges, p.gtids, o)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, BinlogPartition)
        return read_partition(partition)


class BinlogStreamReader(*_STREAM_BASES):  # type: ignore[misc]
    """Offsets are {"file": name, "pos": group end}. latestOffset is the last complete group end
    of the newest stored file; a micro-batch reads the ranges between two offsets."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self._tail = pl.TailScanner(options.data_dir)
        self._available_now: dict[str, Any] | None = None

    def initialOffset(self) -> dict[str, Any]:
        o = self.options
        files = pl.stored_files(o.data_dir)
        if o.since and o.since.file_pos:
            fp = o.since.file_pos
            if fp.file not in files:
                raise pl.PlanError(f"since: {fp.file} is not among the stored files")
            last = fp.file == files[-1]
            end = pl.file_end(Path(o.data_dir), fp.file, last, self._tail)
            return {"file": fp.file, "pos": pl.snap_up(str(Path(o.data_dir) / fp.file), end, fp.pos)}
        if not files:
            return {"file": "", "pos": 0}
        return {"file": files[0], "pos": 4}

    def _latest(self) -> dict[str, Any]:
        latest = pl.latest_position(self.options.data_dir, self._tail)
        if latest is None:
            return {"file": "", "pos": 0}
        until = self.options.until.file_pos if self.options.until else None
        if until is not None:
            files = pl.stored_files(self.options.data_dir)
            if until.file in files and (files.index(until.file), until.pos) < (
                    files.index(latest.file), latest.pos):
                end = pl.file_end(Path(self.options.data_dir), until.file, until.file == files[-1])
                pos = pl.snap_down(str(Path(self.options.data_dir) / until.file), end, until.pos)
                return {"file": until.file, "pos": pos}
        return {"file": latest.file, "pos": latest.pos}

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:
        latest = self._available_now or self._latest()
        if start and start.get("file") and latest.get("file"):
            files = pl.stored_files(self.options.data_dir)
            if start["file"] in files and latest["file"] in files and (
                    files.index(start["file"]), start["pos"]) > (files.index(latest["file"]), latest["pos"]):
                return dict(start)  # never go backwards (until reached)
        return latest

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = self._latest()

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return self._latest()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[BinlogPartition]:
        o = self.options
        ranges = pl.stream_ranges(o.data_dir, pl.FilePos(start.get("file", ""), int(start.get("pos", 0))),
                                  pl.FilePos(end.get("file", ""), int(end.get("pos", 0))), o.split_bytes)
        gtids = GtidRange(o.since.gtids if o.since else None, o.until.gtids if o.until else None)
        return _partitions(ranges, gtids, o)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, BinlogPartition)
        return read_partition(partition)

    def commit(self, end: dict[str, Any]) -> None:
        pass

    def stop(self) -> None:
        pass


class BinlogDataSource(DataSource):
    """``spark.dataSource.register(BinlogDataSource)``, then ``format("binlog")``."""

    @classmethod
    def name(cls) -> str:
        return "binlog"

    def schema(self) -> StructType:
        # the view's columns; an unknown view fails here, when the DataFrame is made
        return schema_of(parse_view(self.options.get("view")))

    def reader(self, schema: StructType) -> DataSourceReader:
        return BinlogBatchReader(Options.parse(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return BinlogStreamReader(Options.parse(self.options))
