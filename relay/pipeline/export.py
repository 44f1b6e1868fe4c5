"""``binlog-relay export``: a relay data_dir to change-data files (Parquet, JSON or CSV) with Spark.

Locally:         binlog-relay export --data-dir /var/lib/binlog-relay --out /tmp/changes
Transactions:    binlog-relay export --view transactions --data-dir /var/lib/binlog-relay --out /tmp/txns
On a cluster:    spark-submit --master spark://host:7077 --py-files relay.zip \\
                     relay/pipeline/export.py --data-dir /mnt/relay-data --out /mnt/changes

(This file runs as the spark-submit application too, hence the absolute imports.)
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
import zipfile
from pathlib import Path
from typing import Any, TextIO

FORMATS = ("parquet", "json", "csv")
MODES = ("error", "overwrite", "append", "ignore")
VIEWS = ("changes", "transactions")  # relay.pipeline.source.VIEWS (not imported: it needs pyspark)

VIEWS_HELP = """\
views (--view):
  changes       one row per changed table row, per DDL and per statement-based DML statement:
                file, pos, gtid, txn_pos, commit_ts, server_id, database, table, op
                (insert|update|delete|ddl|statement), seq, before, after (JSON), query
  transactions  one row per committed transaction (none that ended in ROLLBACK):
                gtid            string     D-S-N (MariaDB) or uuid:n (MySQL); null without GTIDs
                server_id       long       the server that wrote it
                file            string     the stored binlog file
                pos, end_pos    long       offset of its first event (GTID/BEGIN), offset after its
                                           commit event (XID/COMMIT/the DDL)
                first_ts        timestamp  header time of its first event (seconds, UTC)
                commit_ts       timestamp  header time of its commit event (seconds, UTC)
                size            long       end_pos - pos: its bytes in the binlog
                changes         array<struct<database: string, table: string, inserts: long,
                                updates: long, deletes: long>>: rows changed per table, in the
                                order the tables first appear; empty for DDL
                statements      long       statement-based DML statements (not in changes)
                --tables keeps the transactions with a change in those tables (or a DDL naming
                them), their changes holding those tables only; --no-ddl leaves out DDL
                transactions; with --format csv, changes is written as a JSON string.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # the views' columns after the options in --help, laid out as written
    parser.epilog = VIEWS_HELP
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--data-dir", required=True, help="the relay's data_dir (binlog.index and the binlog files)")
    parser.add_argument("--out", required=True, help="output directory (local path, hdfs://, s3a://...)")
    parser.add_argument("--view", choices=VIEWS, default="changes",
                        help="changes: one row per changed table row (default); transactions: one row per "
                             "committed transaction with its row counts per table (columns below)")
    parser.add_argument("--format", choices=FORMATS, default="parquet", help="output format (default parquet)")
    parser.add_argument("--master", default=None,
                        help="Spark master: local[*] (default), local[N], spark://host:7077, yarn, k8s://...")
    parser.add_argument("--since", default=None, help="FILE:POS or MariaDB GTID position: only groups after it")
    parser.add_argument("--until", default=None, help="FILE:POS or MariaDB GTID position: only groups up to it")
    parser.add_argument("--tables", default=None, help="db.t,db2.* : only these tables (and their DDL)")
    parser.add_argument("--mode", choices=MODES, default="error",
                        help="when --out exists: error (default), overwrite, append, ignore")
    parser.add_argument("--split-bytes", default=None, help="partition size for large files (default 64m)")
    parser.add_argument("--no-ddl", action="store_true", help="leave out DDL rows (DDL transactions)")
    parser.add_argument("--no-progress", action="store_true", help="no progress line on stderr")


class Progress:
    """A one-line progress display on stderr, from Spark's status tracker: partitions done of
    the write stage, and the bytes of binlog they stand for (partitions are ~equal ranges)."""

    def __init__(self, spark: Any, total_partitions: int, total_bytes: int, files: int,
                 out: TextIO = sys.stderr, interval: float = 0.5) -> None:
        self.tracker = spark.sparkContext.statusTracker()
        self.total_partitions = max(total_partitions, 1)
        self.total_bytes = total_bytes
        self.files = files
        self.out = out
        self.interval = interval
        self.tty = out.isatty()
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="export-progress", daemon=True)
        self._last_line = ""
        self._last_print = 0.0
        self.done = 0

    def __enter__(self) -> Progress:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _poll(self) -> int:
        done = 0
        for stage_id in self.tracker.getActiveStageIds():
            info = self.tracker.getStageInfo(stage_id)
            if info is not None and info.numTasks == self.total_partitions:
                done = max(done, info.numCompletedTasks)
        return done

    def line(self, done: int) -> str:
        fraction = done / self.total_partitions
        mib = self.total_bytes / (1 << 20)
        return (f"export: {done}/{self.total_partitions} partitions of {self.files} file(s), "
                f"{fraction * mib:,.1f}/{mib:,.1f} MiB of binlog, {time.monotonic() - self.started:.0f} s")

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.done = max(self.done, self._poll())
            except Exception:  # noqa: BLE001 - the display must never break the export
                continue
            self.show(self.done)

    def show(self, done: int, final: bool = False) -> None:
        text = self.line(done)
        if self.tty:
            self.out.write("\r" + text.ljust(len(self._last_line)) + ("\n" if final else ""))
            self.out.flush()
        elif final or (text != self._last_line and time.monotonic() - self._last_print >= 5):
            self.out.write(text + "\n")
            self.out.flush()
            self._last_print = time.monotonic()
        self._last_line = text


def _ship_code(spark: Any) -> None:
    """Make ``relay`` importable on remote executors: zip the package and addPyFile it."""
    import relay

    root = Path(relay.__file__).resolve().parent
    target = Path(tempfile.mkdtemp(prefix="binlog-relay-py-")) / "relay.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in root.rglob("*.py"):
            zf.write(path, Path("relay") / path.relative_to(root))
    spark.sparkContext.addPyFile(str(target))


def spark_session(master: str | None, app_name: str = "binlog-relay export") -> Any:
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    under_submit = "PYSPARK_GATEWAY_PORT" in os.environ  # spark-submit already chose the master
    if master is None and not under_submit:
        master = "local[*]"
    if master is not None:
        builder = builder.master(master)
    builder = (builder.config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.session.timeZone", "UTC"))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    effective = spark.sparkContext.master
    assert effective is not None  # set once the context runs
    if not effective.startswith("local"):
        _ship_code(spark)
    return spark


def run_export(spark: Any, data_dir: str, out: str, fmt: str = "parquet", *, since: str | None = None,
               until: str | None = None, tables: str | None = None, mode: str = "error",
               split_bytes: str | None = None, ddl: bool = True, progress: bool = True,
               progress_out: TextIO = sys.stderr, view: str = "changes") -> dict[str, Any]:
    """Export the changes (or transactions: view) of ``data_dir`` to ``out``; returns a summary."""
    from relay.pipeline import plan as pl
    from relay.pipeline.source import BinlogDataSource, Options

    options = {"path": os.path.abspath(data_dir) if "://" not in data_dir else data_dir, "view": view}
    for key, value in (("since", since), ("until", until), ("tables", tables), ("splitBytes", split_bytes)):
        if value:
            options[key] = value
    if not ddl:
        options["ddl"] = "false"
    parsed = Options.parse(options)  # validates the options before Spark starts working
    the_plan = pl.plan_ranges(parsed.data_dir, parsed.since, parsed.until, parsed.split_bytes)
    files = len({r.name for r in the_plan.ranges})
    spark.dataSource.register(BinlogDataSource)
    df = spark.read.format("binlog").options(**options).load()
    if fmt == "csv" and parsed.view == "transactions":
        from pyspark.sql import functions as F

        df = df.withColumn("changes", F.to_json("changes"))  # CSV has no arrays or structs
    writer = df.write.format(fmt).mode(mode)
    if fmt == "csv":
        writer = writer.option("header", "true")
    started = time.monotonic()
    if progress:
        with Progress(spark, len(the_plan.ranges), the_plan.total_bytes, files, progress_out) as display:
            writer.save(out)
            display.show(len(the_plan.ranges), final=True)
    else:
        writer.save(out)
    seconds = time.monotonic() - started
    return {"out": out, "format": fmt, "view": parsed.view, "files": files, "partitions": len(the_plan.ranges),
            "binlog_bytes": the_plan.total_bytes, "seconds": seconds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="binlog-relay export", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return cmd_export(parser.parse_args(argv))


def cmd_export(args: argparse.Namespace) -> int:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        print("binlog-relay export needs PySpark 4 (and Java 17+): pip install 'binlog-relay[spark]'",
              file=sys.stderr)
        return 1
    from relay.pipeline.plan import PlanError

    try:
        from relay.pipeline.plan import parse_bound, stored_files

        parse_bound(args.since, "since")
        parse_bound(args.until, "until")
        if not stored_files(args.data_dir) and "://" not in args.data_dir:
            print(f"binlog-relay export: {args.data_dir} holds no binlog files (no binlog.index)",
                  file=sys.stderr)
            return 1
    except PlanError as exc:
        print(f"binlog-relay export: {exc}", file=sys.stderr)
        return 2
    spark = spark_session(args.master)
    try:
        summary = run_export(spark, args.data_dir, args.out, args.format, since=args.since, until=args.until,
                             tables=args.tables, mode=args.mode, split_bytes=args.split_bytes,
                             ddl=not args.no_ddl, progress=not args.no_progress, view=args.view)
    except PlanError as exc:
        print(f"binlog-relay export: {exc}", file=sys.stderr)
        return 2
    finally:
        spark.stop()
    print(f"exported the {summary['view']} of {summary['files']} file(s), "
          f"{summary['binlog_bytes'] / (1 << 20):,.1f} MiB of binlog "
          f"in {summary['partitions']} partition(s) to {summary['out']} ({summary['format']}) "
          f"in {summary['seconds']:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
