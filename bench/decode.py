"""Row decoding throughput on one core: relay.rows.changes reading a local binlog file vs
mysql-replication streaming the same file from mariadbd over TCP.

    python3 -m bench.decode [--oltp 20000] [--bulk 200000] [--rounds 3] [--json PATH] [--keep]

1. A throw-away MariaDB primary (relay.sandbox.mariadb, binlog_format=ROW, binlog_row_metadata=FULL,
   in a temp dir) gets a sysbench-like table and two workloads, each in its own binlog file:
   *oltp*: ``--oltp`` small transactions (UPDATE by key, DELETE, INSERT of one row each, run by
   a server-side procedure); *bulk*: one ``INSERT ... SELECT`` of ``--bulk`` rows (few large
   rows events).
2. **relay**: ``relay.pipeline.read.iter_changes`` over the primary's binlog files, every
   change row produced (all values decoded to Python objects); a second figure adds
   ``row_json`` (what the Spark source does per row).
3. **mysql-replication**: ``BinLogStreamReader(is_mariadb=False, blocking=False,
   resume_stream=True, log_file=FILE, log_pos=4)`` streaming the same file from the primary
   (mariadbd, over TCP on loopback) from its first event to its own ROTATE, ``.rows`` read for
   every rows event so its values are decoded.  ``is_mariadb=False`` makes it send the plain
   COM_BINLOG_DUMP by file name and position, which MariaDB serves (``is_mariadb=True`` would
   send an empty file name, a GTID start, and ignore ``log_file``); it still declares CRC32
   checksums and ``@mariadb_slave_capability=4``, so it gets MariaDB's GTID events, and it sets
   no flag but non-blocking (no ANNOTATE_ROWS events).
4. **discard reader** (``bench/rawclient.py`` ``discard_file_dump``, the raw client of the
   capacity and ingest benchmarks, on one file's dump): the same dump (file, position, flags,
   checksum and capability settings) received into a buffer it throws away, up to the same
   ROTATE, no packet parsed.  The relay reads a local file, mysql-replication a socket: this is
   the socket's share of mysql-replication's CPU seconds, a row of its own, in no ratio.
5. CPU time of this process only (``time.process_time``; the server's dump thread is another
   process), events/s and rows/s, median of ``--rounds``; the ratio is mysql-replication's CPU
   seconds over the relay's for the same file (the same rows decoded).  Goals: decoding >= 20x,
   the export form (relay+json) >= 10x, in both workloads.

Each side counts the events it handled: the relay every event of the files; mysql-replication
the events its reader yields (it hides a few, e.g. its own fake rotate; the table reports both
counts). The rows/s column compares row values decoded, which both produce in full.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .common import BenchError, bench_main, bench_parser, log, machine_info, parse_bench_args, table
from .rawclient import discard_file_dump, file_dump_wire

DECODE_GOAL = 20.0
EXPORT_GOAL = 10.0
MYSQL_REPLICATION_SERVER_ID = 4242
DISCARD_SERVER_ID = 4243
DISCARD = "discard reader (socket only)"

TABLE_SQL = """CREATE TABLE bench.sbtest (
  id INT NOT NULL PRIMARY KEY, k INT NOT NULL, c CHAR(120) NOT NULL, pad CHAR(60) NOT NULL,
  price DECIMAL(12,2), note VARCHAR(255), created DATETIME(6), flag TINYINT UNSIGNED
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"""

PROCEDURE_SQL = """CREATE PROCEDURE bench.oltp(n INT)
BEGIN
  DECLARE i INT DEFAULT 0;
  WHILE i < n DO
    START TRANSACTION;
    UPDATE bench.sbtest SET k = k + 1, note = CONCAT('upd ', i) WHERE id = 1 + (i * 7919) % 10000;
    DELETE FROM bench.sbtest WHERE id = 99999 + i;
    INSERT INTO bench.sbtest VALUES (100000 + i, i, REPEAT('c', 120), REPEAT('p', 60), i / 100,
      CONCAT('row ', i), NOW(6), i % 256);
    COMMIT;
    SET i = i + 1;
  END WHILE;
END"""


def make_primary(base: Path, oltp: int, bulk: int) -> tuple[Any, list[Path], dict[str, int]]:
    import pymysql

    from relay.sandbox.mariadb import LocalMariaDB

    server = LocalMariaDB(base / "primary", 1, extra_args=["--binlog-row-metadata=FULL",
                                                           "--max-binlog-size=1073741824"])
    server.start()
    conn = pymysql.connect(host="127.0.0.1", port=server.port, user="root", autocommit=True)
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE bench")
        cur.execute(TABLE_SQL)
        cur.execute(PROCEDURE_SQL)
        cur.execute("INSERT INTO bench.sbtest SELECT seq, seq, REPEAT('c', 120), REPEAT('p', 60), seq / 7, "
                    "CONCAT('seed ', seq), NOW(6), seq % 256 FROM bench.seq_1_to_10000")
        started = time.monotonic()
        cur.execute("FLUSH BINARY LOGS")
        cur.execute(f"CALL bench.oltp({oltp})")
        cur.execute("FLUSH BINARY LOGS")
        cur.execute(f"INSERT INTO bench.sbtest SELECT 1000000 + seq, seq, REPEAT('b', 120), REPEAT('q', 60), "
                    f"seq / 3, NULL, NOW(6), 1 FROM bench.seq_1_to_{bulk}")
        cur.execute("FLUSH BINARY LOGS")
        log(f"workload written in {time.monotonic() - started:.1f} s")
        cur.execute("SHOW BINARY LOGS")
        names = [row[0] for row in cur.fetchall()]
    conn.close()
    # the oltp file and the bulk file (the first holds the setup, the last is empty)
    files = [server.binlog_path(n) for n in names[1:3]]
    counts = {"oltp": oltp, "bulk": bulk}
    return server, files, counts


def count_events(path: Path) -> int:
    from relay.storage.scan import iter_events

    with open(path, "rb") as stream:
        return sum(1 for _ in iter_events(stream, 4, path.stat().st_size))


def run_relay(files: list[Path], with_json: bool) -> dict[str, float]:
    from relay.pipeline.jsonform import row_json
    from relay.pipeline.read import iter_changes

    rows = 0
    started = time.process_time()
    for path in files:
        if with_json:
            for c in iter_changes(path):
                row_json(c.before, c.table_map)
                row_json(c.after, c.table_map)
                rows += 1
        else:
            for _ in iter_changes(path):
                rows += 1
    return {"cpu_s": time.process_time() - started, "rows": rows}


def run_mysql_replication(port: int, files: list[Path]) -> dict[str, float]:
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.event import RotateEvent
    from pymysqlreplication.row_event import RowsEvent

    settings = {"host": "127.0.0.1", "port": port, "user": "root", "password": ""}
    events = rows = 0
    started = time.process_time()
    for path in files:
        stream = BinLogStreamReader(connection_settings=settings, server_id=MYSQL_REPLICATION_SERVER_ID, blocking=False,
                                    resume_stream=True, log_file=path.name, log_pos=4, is_mariadb=False,
                                    enable_logging=False)
        try:
            for event in stream:
                events += 1
                if isinstance(event, RowsEvent):
                    rows += len(event.rows)
                if isinstance(event, RotateEvent) and event.next_binlog != path.name:
                    break  # the file's own ROTATE: it is done (the first, fake one names it)
        finally:
            stream.close()
    return {"cpu_s": time.process_time() - started, "rows": rows, "events": events}


def run_discard_reader(port: int, path: Path, wire: dict[str, Any]) -> dict[str, float]:
    """The discard reader of the dump mysql-replication reads: CPU seconds of this process, as theirs."""
    started = time.process_time()
    discard_file_dump(port, DISCARD_SERVER_ID, path.name, wire["wire_bytes"], wire["rotate"])
    return {"cpu_s": time.process_time() - started}


def measure(server: Any, label: str, path: Path, rounds: int) -> dict[str, Any]:
    """One workload's file, every tool ``rounds`` times alternating; medians and ratios; and the
    discard reader of mysql-replication's dump (the socket's share of its CPU seconds)."""
    events = count_events(path)
    size = path.stat().st_size
    wire = file_dump_wire(server.port, DISCARD_SERVER_ID, path.name)
    log(f"{label}: {path.name}, {size / (1 << 20):.1f} MiB, {events} events; its dump "
        f"{wire['wire_bytes'] / (1 << 20):.1f} MiB, {wire['events']} events")
    figures: dict[str, list[dict[str, float]]] = {"relay": [], "relay+json": [], "mysql-replication": []}
    discard: list[dict[str, float]] = []
    for _ in range(rounds):
        figures["relay"].append(run_relay([path], False))
        figures["relay+json"].append(run_relay([path], True))
        figures["mysql-replication"].append(run_mysql_replication(server.port, [path]))
        discard.append(run_discard_reader(server.port, path, wire))
    if len({r["rows"] for runs in figures.values() for r in runs}) != 1:
        raise BenchError(f"{label}: the tools decoded different numbers of rows: {figures}")
    summary = {}
    for tool, runs in figures.items():
        cpu = statistics.median(r["cpu_s"] for r in runs)
        n_events = runs[0].get("events", events)
        summary[tool] = {"cpu_s": cpu, "cpu_s_min": min(r["cpu_s"] for r in runs),
                         "cpu_s_max": max(r["cpu_s"] for r in runs), "events": n_events, "rows": runs[0]["rows"],
                         "events_per_s": n_events / cpu, "rows_per_s": runs[0]["rows"] / cpu}
    # The same file and the same rows for every tool: the ratio is of CPU seconds (events/s would
    # flatter the relay, which counts the events mysql-replication reads but does not yield).
    ref = summary["mysql-replication"]["cpu_s"]
    for tool in summary:
        summary[tool]["ratio"] = ref / summary[tool]["cpu_s"]
    socket_cpu = statistics.median(r["cpu_s"] for r in discard)
    socket = {"cpu_s": socket_cpu, "cpu_s_min": min(r["cpu_s"] for r in discard),
              "cpu_s_max": max(r["cpu_s"] for r in discard), "wire_bytes": wire["wire_bytes"],
              "events": wire["events"], "share_of_mysql_replication": socket_cpu / ref}
    return {"file_bytes": size, "file_events": events, "tools": summary, "socket": socket,
            "goals": {"decode": summary["relay"]["ratio"] >= DECODE_GOAL,
                      "export": summary["relay+json"]["ratio"] >= EXPORT_GOAL}}


def run_benchmark(args: argparse.Namespace) -> dict[str, Any]:
    base = Path(tempfile.mkdtemp(prefix="binlog-relay-decode-"))
    server = None
    try:
        server, files, _ = make_primary(base, args.oltp, args.bulk)
        workloads = {label: measure(server, label, path, args.rounds) for label, path in zip(("oltp", "bulk"), files)}
        return {"machine": machine_info(), "rounds": args.rounds, "oltp": args.oltp, "bulk": args.bulk,
                "goals": {"decode": DECODE_GOAL, "export": EXPORT_GOAL}, "workloads": workloads}
    finally:
        if server is not None:
            server.stop()
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)


SOURCES_NOTE = ("the relay decodes the local binlog file; mysql-replication streams the same file from mariadbd "
                "over TCP (loopback)")


def socket_note(socket: dict[str, Any]) -> str:
    """What receiving the dump costs mysql-replication: the discard reader's share of its CPU seconds."""
    return (f"the socket's share of mysql-replication's CPU: {100 * socket['share_of_mysql_replication']:.1f}% "
            f"({socket['cpu_s']:.3f} s for a discard reader of the same dump, "
            f"{socket['wire_bytes'] / (1 << 20):.1f} MiB)")


def report(results: dict[str, Any]) -> str:
    lines = [f"Row decoding on one core, median of {results['rounds']} (CPU seconds of this process): "
             f"{SOURCES_NOTE}; goals: decoding >= {DECODE_GOAL:.0f}x, the export form (relay+json) >= "
             f"{EXPORT_GOAL:.0f}x"]
    for label, w in results["workloads"].items():
        rows = [[tool, f"{s['cpu_s']:.2f}", s["events"], s["rows"], f"{s['events_per_s'] / 1000:.1f}",
                 f"{s['rows_per_s'] / 1000:.1f}", f"{s['ratio']:.1f}"] for tool, s in w["tools"].items()]
        notes = []
        if "socket" in w:  # not in the results of runs before it was measured
            rows.append([DISCARD, f"{w['socket']['cpu_s']:.2f}", w["socket"]["events"], "-", "-", "-", "-"])
            notes.append(socket_note(w["socket"]))
        lines += ["", f"{label}: {w['file_bytes'] / (1 << 20):.1f} MiB, {w['file_events']} events",
                  table(["tool", "CPU s", "events", "rows", "k events/s", "k rows/s", "ratio"], rows),
                  *notes,
                  f"decoding {'met' if w['goals']['decode'] else 'NOT met'}, "
                  f"export form {'met' if w['goals']['export'] else 'NOT met'}"]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = bench_parser("decode", __doc__, keep="keep the primary's directory")
    parser.add_argument("--oltp", type=int, default=20000, help="small transactions (3 rows each)")
    parser.add_argument("--bulk", type=int, default=200000, help="rows of the one bulk INSERT ... SELECT")
    args = parse_bench_args(parser, argv)
    if args.oltp < 1 or args.bulk < 1:
        parser.error("--oltp and --bulk must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    return bench_main(argv, parse_args, run_benchmark, report)


if __name__ == "__main__":
    sys.exit(main())
