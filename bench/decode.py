"""Row decoding throughput on one core: relay.binlog.changes vs mysql-replication, same binlog.

    python3 -m bench.decode [--oltp 20000] [--bulk 200000] [--rounds 3] [--json PATH] [--keep]

1. A throw-away MariaDB primary (relay.localdb, binlog_format=ROW, binlog_row_metadata=FULL,
   in a temp dir) gets a sysbench-like table and two workloads, each in its own binlog file:
   *oltp*: ``--oltp`` small transactions (UPDATE by key, DELETE, INSERT of one row each, run by
   a server-side procedure); *bulk*: one ``INSERT ... SELECT`` of ``--bulk`` rows (few large
   rows events).
2. **relay**: ``relay.pipeline.read.iter_changes`` over the primary's binlog files, every
   change row produced (all values decoded to Python objects); a second figure adds
   ``row_json`` (what the Spark source does per row).
3. **mysql-replication**: ``BinLogStreamReader`` (is_mariadb, blocking=False) reading the
   same files from the primary from their first byte to their end, ``.rows`` read for every
   rows event so its values are decoded.
4. CPU time of this process only (``time.process_time``; the server's dump thread is another
   process), events/s and rows/s, median of ``--rounds``; the ratio is relay events/s over
   mysql-replication events/s (the goal: >= 20).

Each side counts the events it handled: the relay every event of the files; mysql-replication
the events its reader yields (it hides a few, e.g. its own fake rotate; the table reports both
counts). The rows/s column compares row values decoded, which both produce in full.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

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


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def make_primary(base: Path, oltp: int, bulk: int) -> tuple[Any, list[Path], dict[str, int]]:
    import pymysql

    from relay.localdb import LocalMariaDB

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
    from relay.binlog.changes import row_json
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
        stream = BinLogStreamReader(connection_settings=settings, server_id=4242, blocking=False,
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--oltp", type=int, default=20000, help="small transactions (3 rows each)")
    parser.add_argument("--bulk", type=int, default=200000, help="rows of the one bulk INSERT ... SELECT")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", default=None, help="also write the results as JSON here")
    parser.add_argument("--keep", action="store_true", help="keep the primary's directory")
    args = parser.parse_args(argv)

    base = Path(tempfile.mkdtemp(prefix="binlog-relay-decode-"))
    server = None
    try:
        server, files, _ = make_primary(base, args.oltp, args.bulk)
        results: dict[str, Any] = {"machine": {"python": platform.python_version(), "cpu": platform.processor()},
                                   "workloads": {}}
        for label, path in zip(("oltp", "bulk"), files):
            events = count_events(path)
            size = path.stat().st_size
            log(f"{label}: {path.name}, {size / (1 << 20):.1f} MiB, {events} events")
            figures: dict[str, list[dict[str, float]]] = {"relay": [], "relay+json": [], "mysql-replication": []}
            for _ in range(args.rounds):
                figures["relay"].append(run_relay([path], False))
                figures["relay+json"].append(run_relay([path], True))
                figures["mysql-replication"].append(run_mysql_replication(server.port, [path]))
            summary = {}
            for tool, runs in figures.items():
                cpu = statistics.median(r["cpu_s"] for r in runs)
                n_events = runs[0].get("events", events)
                summary[tool] = {"cpu_s": cpu, "events": n_events, "rows": runs[0]["rows"],
                                 "events_per_s": n_events / cpu, "rows_per_s": runs[0]["rows"] / cpu}
            ref = summary["mysql-replication"]["events_per_s"]
            for tool in summary:
                summary[tool]["ratio"] = summary[tool]["events_per_s"] / ref
            results["workloads"][label] = {"file_bytes": size, "file_events": events, "tools": summary}
            print(f"\n{label}: {size / (1 << 20):.1f} MiB, {events} events, median of {args.rounds} "
                  "(CPU seconds of this process, one core)")
            print(f"  {'tool':<20}{'CPU s':>8}{'events':>10}{'rows':>10}{'k events/s':>12}{'k rows/s':>10}"
                  f"{'ratio':>8}")
            for tool, s in summary.items():
                print(f"  {tool:<20}{s['cpu_s']:>8.2f}{s['events']:>10}{s['rows']:>10}"
                      f"{s['events_per_s'] / 1000:>12.1f}{s['rows_per_s'] / 1000:>10.1f}{s['ratio']:>8.1f}")
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    finally:
        if server is not None:
            server.stop()
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
