"""The archive (S3, zstd): does it keep up with ingest, what do its objects cost, and how fast is a
file only the archive holds served back, against the same file served from the local disk.

    python3 -m bench.archive [--size-mb 300] [--max-binlog-size 64M] [--rounds 3] [--reuse] [--json PATH]

The primary: a sandbox of its own (``bencharchive``, port 26346; ``--reuse`` keeps it), filled by
sysbench oltp_write_only to --size-mb MiB in files of --max-binlog-size (about five closed files).
The store: moto's S3 server (relay/sandbox/s3.py) on a loopback port, in memory.  Four parts, in
one run:

1. **Archive vs ingest**, --rounds times: the relay (the real program, fresh data_dir, ``sync:
   none``, ``archive:`` the moto bucket, zstd level --level, encrypted with --encrypted;
   ``storage.retention`` max_size 16K, min_files 1, replica_grace 0, so a closed file leaves the disk
   as soon as it is archived) ingests the whole binlog while the archiver uploads every file (the
   newest as ingest writes it, then its events checked, the upload completed and compared with the
   store's CRC32 of the object, meta; a closed file left behind, all of it once closed).  /metrics is
   polled every 50 ms from the moment the relay listens: *ingest* ends when the committed end is the
   primary's, the *archive* when every closed file is archived (``archive_lag_files`` 0,
   ``archive_files`` the closed count).  Before each round the same relay without an archive
   ingests the binlog alone: ingest at full speed.  Goal: the archive keeps up with ingest at full
   speed, the closed files' MiB over the time to archive them (archive MiB/s end to end) / ingest
   alone's MiB/s >= 1.0.  Beside it: whether the archive kept up with the ingest it shared the
   machine with (ingest's seconds / the archive's, from the same start: 1.0 when every closed file
   was archived by the time ingest was done; it cannot pass 1.0), and what archiving cost ingest
   (ingest's time while archiving / alone).  Also reported: ingest MiB/s (what the relay stored
   from the first look on over the ingest time; it may have stored some before it listened), the
   time the archive lagged (a closed file not archived yet) and the closed files' bytes over it, the
   drain after ingest ended.  CPU: the relay's and moto's (/proc) over the round.  moto is forgotten
   (reset) between rounds.  Beside the goal, the best ratio the machine allows whatever the relay
   does (cpu_bound): the CPU seconds no archive can skip (ingest's own, measured alone;
   compressing the closed files, part 4; the store's) spread perfectly over every CPU.
2. **Serving an archived file**, --rounds times: the relay of the last round, restarted (its shelf
   of fetched copies is emptied at start), serves the largest closed file, which only the archive
   holds now, to ``mariadb-binlog --read-from-remote-server --raw FILE``: the *first read* fetches it
   back from the store frame by frame, the *second* reads the shelf's copy; the reference is the same
   file *local*: a second relay (no archive) whose data_dir got that file by ``binlog-relay import``
   of the primary's copy.  Every copy is compared byte for byte with the primary's file; seconds are
   the mariadb-binlog process's.  Goal: archived (first read) MiB/s / local MiB/s >= 0.5.  Beside it,
   the best the machine allows (cpu_bound): a local read's CPU seconds, decoding the file
   (part 4) and the store's CPU seconds during a first read, spread perfectly over every CPU.
3. **Following a live primary**, once: a second primary (its own sandbox in the work dir, the same
   max_binlog_size) written by sysbench oltp_write_only at full speed (4 threads, no rate limit) for
   --live-seconds, a fresh relay with the archive following it from its first file.  /metrics every
   50 ms: the archive's lag (closed files, and their bytes, not yet archived) at its largest; when
   the load ends, how long until every closed file is archived.  The primary's write rate is its
   binlog's growth over the load.  The archive keeps up with the load when it never lags by more
   than the file being archived and is done within moments of the load's end; part 1's catch-up
   burst is the harder case, where ingest runs as fast as the relay can store.
4. **zstd and AES cost**, --rounds times: the closed files compressed here with the archive's own
   ``ObjectWriter`` (4 MiB frames, level --level), plain and encrypted (a random KEK), and every frame
   decoded back with ``ObjectReader.decode_frame`` (checked against the file): CPU seconds of this
   process (one core) per GiB of file, and the compression ratio (file bytes / object bytes).  The
   plain (or, with --encrypted, the encrypted) objects must add up to exactly the bytes the relay
   uploaded.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from relay.archive.objectformat import DEFAULT_LEVEL
from relay.sandbox.mariadb import REPL_PASSWORD, REPL_USER, LocalMariaDB
from relay.sandbox.ports import LOOPBACK, free_port
from relay.sandbox.relayprocess import RELAY_SERVER_ID, RelayProcess, http_get, start_relay
from relay.sandbox.replication import wait_binlog_settled
from relay.sandbox.s3 import REGION, MotoServer, start_moto_server

from .common import (
    MARIADB_BINLOG,
    PRIMARY_SERVER_ID,
    REPO_ROOT,
    BenchError,
    BinlogFile,
    bench_main,
    bench_parser,
    binlog_bytes,
    cpu_seconds,
    fresh_dir,
    git_commit,
    log,
    machine_info,
    median,
    mib,
    parse_bench_args,
    require_programs,
    run_measured,
    run_quietly,
    running_pid,
    server_version,
    settle,
    stop_relay,
    sysbench_command,
    sysbench_prepare,
    table,
)
from .ingest import child_env, finish_primary, measured_binlog, prepare_primary

GIB = 1 << 30
BUCKET = "bench-archive"
PREFIX = "relay"
POLL = 0.05  # seconds between two looks at /metrics
ARCHIVE_GOAL = 1.0  # the archive's MiB/s end to end / ingest's alone, at full speed
SERVE_GOAL = 0.5  # archived (first read) MiB/s / local MiB/s
LOCAL_SERVER_ID = RELAY_SERVER_ID + 1  # the reference relay: a primary ends an older dump of the same id
FIRST, SHELF, LOCAL = "archived, first read", "archived, second read (shelf)", "local"
M = "binlog_relay_"
SHELF_DIR = "archive-cache"  # in data_dir: relay/storage/shelf.py CACHE_DIR


# ================================================================ the relays


@dataclass
class Store:
    """The moto server, and what a relay's archive: section needs to reach its bucket."""

    moto: MotoServer
    key_id_file: Path
    secret_file: Path
    kek_file: Path | None

    def archive_config(self, level: int) -> dict[str, Any]:
        config: dict[str, Any] = {"url": f"s3://{BUCKET}/{PREFIX}", "endpoint_url": self.moto.endpoint,
                                  "region": REGION, "access_key_id_file": str(self.key_id_file),
                                  "secret_access_key_file": str(self.secret_file), "compression_level": level}
        if self.kek_file is not None:
            config["encryption_key_file"] = str(self.kek_file)
        return config


def start_store(work: Path, encrypted: bool) -> Store:
    moto = start_moto_server(work / "moto.log")
    secrets = work / "secrets"
    secrets.mkdir(mode=0o700, exist_ok=True)
    key_id, secret = secrets / "s3.key_id", secrets / "s3.secret"
    for path, value in ((key_id, "bench"), (secret, "bench-secret")):  # moto checks no key unless told to
        path.write_text(value + "\n")
        path.chmod(0o600)
    kek = None
    if encrypted:
        kek = secrets / "archive.key"
        kek.write_bytes(os.urandom(32))
        kek.chmod(0o600)
    return Store(moto, key_id, secret, kek)


def start_archiving_relay(work: Path, primary_port: int, store: Store | None, level: int) -> RelayProcess:
    """The relay measured: fresh data_dir, archive to the store, an archived closed file purged once
    the local files pass 16K; without a store, the same relay with no archive (what ingest does
    alone)."""
    fresh_dir(work / "data")
    archive = {"archive": store.archive_config(level)} if store is not None else {}
    return start_relay(work, primary_port, metrics_port=free_port(), listen={"port": free_port()},
                       storage={"sync": "none", "retention": {"max_size": "16K", "max_age": None, "min_files": 1,
                                                              "replica_grace": 0}},
                       logging={"level": "INFO"}, **archive)


def metric_samples(port: int) -> dict[str, float]:
    """Every sample of a relay's /metrics, by name with its labels (``name{label="x"}``)."""
    status, text = http_get(port, "/metrics", timeout=10)
    if status != 200:
        raise BenchError(f"/metrics on port {port} answered {status}: {text[:200]}")
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            try:
                values[name] = float(value)
            except ValueError:
                pass
    return values


def _committed(values: dict[str, float]) -> tuple[float | None, float | None]:
    return values.get(f"{M}committed_file_number"), values.get(f"{M}committed_position_bytes")


def _target(files: list[BinlogFile]) -> tuple[float, float]:
    last = files[-1]
    return float(int(last.name.rsplit(".", 1)[1])), float(last.size)


def _archive_errors(values: dict[str, float]) -> dict[str, float]:
    return {name: value for name, value in values.items()
            if name.startswith(f"{M}archive_errors_total") and value}


def check_clean(relay: RelayProcess, values: dict[str, float]) -> None:
    """A run with archive errors (the store refused or failed something) or upstream reconnects
    measured something else than the archive at work."""
    errors = _archive_errors(values)
    if errors or values.get(f"{M}archive_damaged_reads_total"):
        raise BenchError(f"the relay's archive failed: {errors}\n{relay.log_tail()}")
    if values.get(f"{M}upstream_reconnects_total"):
        raise BenchError(f"the relay reconnected to the primary {values[f'{M}upstream_reconnects_total']:.0f} "
                         f"times: not a clean run\n{relay.log_tail()}")


def sample(relay: RelayProcess) -> dict[str, float]:
    """The relay's /metrics now, from a live relay whose run is clean (check_clean)."""
    relay.check_alive()
    values = metric_samples(relay.metrics_port)
    check_clean(relay, values)
    return values


def wait_metrics(relay: RelayProcess, ready: Any, timeout: float, what: str) -> dict[str, float]:
    """Poll the relay's /metrics until ``ready(values)``; the values then."""
    deadline = time.monotonic() + timeout
    while True:
        values = sample(relay)
        if ready(values):
            return values
        if time.monotonic() > deadline:
            raise BenchError(f"{what} (not within {timeout:g} s)\n{relay.log_tail()}")
        time.sleep(POLL)


# ================================================================ 1. archive vs ingest


def ingest_alone_round(args: argparse.Namespace, primary_pid: int, files: list[BinlogFile],
                       work: Path) -> tuple[float, float]:
    """The same relay without an archive: seconds from its first look to the primary's end, and the
    CPU seconds the relay and the primary spent over them."""
    target = _target(files)
    settle()
    relay = start_archiving_relay(work, args.port, None, args.level)
    try:
        started = time.monotonic()
        cpu0 = cpu_seconds(relay.pid) + cpu_seconds(primary_pid)
        wait_metrics(relay, lambda values: _committed(values) == target, args.timeout,
                     "the relay without an archive did not ingest the binlog")
        seconds = max(time.monotonic() - started, POLL)
        return seconds, cpu_seconds(relay.pid) + cpu_seconds(primary_pid) - cpu0
    finally:
        stop_relay(relay)


def archive_round(args: argparse.Namespace, store: Store, files: list[BinlogFile], work: Path) -> tuple[
        dict[str, Any], RelayProcess]:
    """One relay ingesting the binlog while archiving it; returns its figures and the relay (running)."""
    closed = files[:-1]
    closed_bytes = sum(f.size for f in closed)
    target = _target(files)
    store.moto.reset()  # the objects of an earlier round: gone, and moto's memory with them
    store.moto.create_bucket(BUCKET)
    settle()
    moto_cpu0 = cpu_seconds(store.moto.pid)
    spawned = time.monotonic()
    relay = start_archiving_relay(work, args.port, store, args.level)
    try:
        started = time.monotonic()
        relay_cpu0 = cpu_seconds(relay.pid)
        ingest_s = ingest_cpu = None
        written_at_start: float | None = None  # what the relay stored before the first look
        busy_s = 0.0
        last_t, last_lag = started, 0.0
        max_lag_files = max_lag_bytes = 0.0
        deadline = started + args.timeout
        while True:
            values = sample(relay)
            now = time.monotonic()
            if written_at_start is None:
                written_at_start = values.get(f"{M}stored_written_bytes_total", 0.0)
            if last_lag > 0:
                busy_s += now - last_t  # the archive lagged since the last look
            lag = values.get(f"{M}archive_lag_files", 0.0)
            max_lag_files = max(max_lag_files, lag)
            max_lag_bytes = max(max_lag_bytes, values.get(f"{M}archive_lag_bytes", 0.0))
            last_t, last_lag = now, lag
            if ingest_s is None and _committed(values) == target:
                ingest_s, ingest_cpu = now - started, cpu_seconds(relay.pid) - relay_cpu0
            if ingest_s is not None and lag == 0 and values.get(f"{M}archive_files") == len(closed):
                archive_s = now - started
                relay_cpu = cpu_seconds(relay.pid) - relay_cpu0
                break
            if now > deadline:
                raise BenchError(f"the relay did not ingest and archive the binlog within {args.timeout:g} s "
                                 f"(committed {_committed(values)}, want {target}; archive lag {lag:.0f} files)\n"
                                 f"{relay.log_tail()}")
            time.sleep(POLL)
        moto_cpu = cpu_seconds(store.moto.pid) - moto_cpu0
        uploaded = values.get(f"{M}archive_uploaded_file_bytes_total", 0.0)
        objects = values.get(f"{M}archive_uploaded_object_bytes_total", 0.0)
        if values.get(f"{M}archive_uploaded_files_total") != len(closed) or uploaded != closed_bytes:
            raise BenchError(f"the relay uploaded {values.get(f'{M}archive_uploaded_files_total')} files of "
                             f"{uploaded:.0f} bytes; the primary's closed files are {len(closed)} of {closed_bytes}")
    except BaseException:
        stop_relay(relay)
        raise
    total = sum(f.size for f in files)
    busy_s = max(busy_s, POLL)  # a smoke binlog may be archived between two looks
    ingest_s = max(ingest_s or 0.0, POLL)  # and ingested before the first look
    # The rate of what was stored between the first look and the end: the relay may have stored some
    # before it listened.  A (smoke) binlog mostly stored by then is timed from the relay's spawn.
    before = written_at_start or 0.0
    timed_from = "first look" if before <= total / 2 else "spawn"
    ingest_rate = (mib(total - before) / ingest_s if timed_from == "first look"
                   else mib(total) / (started + ingest_s - spawned))
    return {
        "ingest_s": ingest_s, "stored_before_first_look_mib": mib(before), "ingest_timed_from": timed_from,
        "ingest_mib_per_s": ingest_rate,
        "archive_busy_s": busy_s, "archive_mib_per_s": mib(closed_bytes) / busy_s,
        "archive_done_s": archive_s, "archive_end_to_end_mib_per_s": mib(closed_bytes) / archive_s,
        "drain_after_ingest_s": archive_s - ingest_s,
        "kept_up": ingest_s / archive_s,
        "max_lag_files": max_lag_files, "max_lag_mib": mib(max_lag_bytes),
        "relay_cpu_s": relay_cpu, "relay_cpu_s_during_ingest": ingest_cpu,
        "relay_cpu_s_after_ingest": relay_cpu - (ingest_cpu or 0.0), "moto_cpu_s": moto_cpu,
        "uploaded_file_bytes": uploaded, "uploaded_object_bytes": objects,
        "zstd_ratio": uploaded / objects if objects else None,
        "loadavg_1m": os.getloadavg()[0],
    }, relay


def wait_purged(relay: RelayProcess, served: BinlogFile, timeout: float) -> None:
    """Until storage.retention removed the file part 2 serves (archived) from the relay's data_dir.
    Not every closed file: a reused primary's restarts leave closed files of a few hundred bytes,
    which retention's 16K keeps, rightly."""
    deadline = time.monotonic() + timeout
    while served.name in relay.stored_files() or (relay.data_dir / served.name).exists():
        relay.check_alive()
        if time.monotonic() > deadline:
            raise BenchError(f"retention did not purge the archived {served.name}\n{relay.log_tail()}")
        time.sleep(POLL)


# ================================================================ 2. serving an archived file


def start_local_relay(args: argparse.Namespace, primary: LocalMariaDB, chosen: BinlogFile, files: list[BinlogFile],
                      work: Path) -> RelayProcess:
    """The reference: a relay without archive whose data_dir got ``chosen`` by ``binlog-relay import`` of
    the primary's copy (it then ingests the files after it), caught up when returned."""
    data = fresh_dir(work / "data")
    imported = subprocess.run([sys.executable, "-m", "relay.cli", "import", "--data-dir", str(data),
                               str(chosen.path)], cwd=REPO_ROOT, env=child_env(), capture_output=True, text=True,
                              timeout=args.timeout)
    if imported.returncode != 0:
        raise BenchError(f"binlog-relay import of {chosen.name} failed: {imported.stderr.strip()[-500:]}")
    relay = start_relay(work, args.port, data_dir=data, metrics_port=free_port(), listen={"port": free_port()},
                        server_id=LOCAL_SERVER_ID, logging={"level": "WARNING"},
                        storage={"sync": "none", "retention": {"max_size": None, "max_age": None}})
    try:
        target = _target(files)
        wait_metrics(relay, lambda values: _committed(values) == target, args.timeout,
                     "the reference relay did not catch up with the primary")
        if not filecmp.cmp(chosen.path, data / chosen.name, shallow=False):
            raise BenchError(f"the reference relay's {chosen.name} differs from the primary's")
    except BaseException:
        stop_relay(relay)
        raise
    return relay


def restart_archived(args: argparse.Namespace, relay: RelayProcess, files: list[BinlogFile]) -> None:
    """Stop and start the archiving relay (its shelf of fetched copies is emptied at start); ready when
    it lists the archive again and has the primary's end."""
    status = relay.stop()
    if status != 0:
        raise BenchError(f"the archiving relay exited with status {status}\n{relay.log_tail()}")
    relay.start()
    relay.wait_listening()
    target, closed = _target(files), len(files) - 1
    wait_metrics(relay, lambda values: _committed(values) == target and values.get(f"{M}archive_store_up") == 1
                 and values.get(f"{M}archive_files") == closed, args.timeout,
                 "the restarted relay did not list the archive and catch up")


def read_file(args: argparse.Namespace, relay: RelayProcess, chosen: BinlogFile, source: str,
              work: Path, store_pid: int) -> dict[str, Any]:
    """``mariadb-binlog --read-from-remote-server --raw`` of the one file from ``relay``, checked byte
    for byte against the primary's; its wall time, the relay's CPU and the bytes it fetched back from
    the archive meanwhile.  The archiving relay's copy on its shelf must be fetched by the first read
    (none before it: the relay was restarted) and reused, the same file, by the second."""
    out = fresh_dir(work / "read")
    archived = source != LOCAL
    copy_before = _shelf_copy(relay, chosen.name)
    if archived and (copy_before is None) != (source == FIRST):
        raise BenchError(f"{source}: the relay's shelf {'holds' if copy_before else 'lacks'} a copy of {chosen.name} "
                         "before the read")
    settle()
    served_before = metric_samples(relay.metrics_port).get(f"{M}archive_served_bytes_total", 0.0)
    cpu_before, store_cpu_before = cpu_seconds(relay.pid), cpu_seconds(store_pid)
    run = run_measured([MARIADB_BINLOG, "--no-defaults", "--read-from-remote-server", "--raw",
                        f"--host={LOOPBACK}", f"--port={relay.port}", f"--user={REPL_USER}",
                        f"--password={REPL_PASSWORD}", f"--result-file={out}/", chosen.name], timeout=args.timeout)
    server_cpu, store_cpu = cpu_seconds(relay.pid) - cpu_before, cpu_seconds(store_pid) - store_cpu_before
    if problem := run.failed():
        raise BenchError(f"mariadb-binlog of {chosen.name} ({source}) failed: {problem}\n{relay.log_tail()}")
    got = sorted(p.name for p in out.iterdir())
    if got != [chosen.name] or not filecmp.cmp(chosen.path, out / chosen.name, shallow=False):
        raise BenchError(f"mariadb-binlog of {chosen.name} ({source}) wrote {got}, not a byte copy of the primary's "
                         "file")
    if archived:
        # After the file's ROTATE the dump goes on into the next file (archived too, unless it is the
        # last closed one) until it sees the client gone: a fetch of that one may run on; it ends
        # before the next measurement.
        _wait_no_fetch(relay, args.timeout)
    copy_after = _shelf_copy(relay, chosen.name)
    if archived and (copy_after is None or (source == SHELF and copy_after != copy_before)):
        raise BenchError(f"{source}: {chosen.name} was not {'fetched onto' if source == FIRST else 'read from'} the "
                         "relay's shelf")
    values = sample(relay)
    fetched = values.get(f"{M}archive_served_bytes_total", 0.0) - served_before
    own = chosen.size if source == FIRST else 0
    if fetched < own or (not archived and fetched):
        raise BenchError(f"{source}: the relay fetched {fetched:.0f} bytes back from the archive, expected at least "
                         f"{own} (is {chosen.name} really only in the archive?)")
    return {"source": source, "seconds": run.wall_s, "mib_per_s": mib(chosen.size) / run.wall_s,
            "server_cpu_s": server_cpu, "client_cpu_s": run.user_s + run.sys_s, "store_cpu_s": store_cpu,
            "fetched_bytes": own, "fetched_after_bytes": fetched - own, "verified": True}


def _shelf_copy(relay: RelayProcess, name: str) -> tuple[int, int] | None:
    """(inode, mtime) of the relay's copy of an archived file on its shelf (relay/storage/shelf.py), if any."""
    try:
        stat = (relay.data_dir / SHELF_DIR / name).stat()
    except FileNotFoundError:
        return None
    return stat.st_ino, stat.st_mtime_ns


def _wait_no_fetch(relay: RelayProcess, timeout: float) -> None:
    """Until no fetch from the archive is under way (the shelf writes NAME.part, then renames it)."""
    time.sleep(0.2)  # a fetch the dump was about to start has started
    deadline = time.monotonic() + timeout
    while any((relay.data_dir / SHELF_DIR).glob("*.part")):
        relay.check_alive()
        if time.monotonic() > deadline:
            raise BenchError(f"a fetch from the archive did not end\n{relay.log_tail()}")
        time.sleep(POLL)


# ================================================================ 3. zstd and AES cost


def _compression_variants(args: argparse.Namespace) -> list[tuple[str, int, bool]]:
    """(variant, level, encrypted): the relay's level plain and encrypted, and --compare-level plain."""
    variants = [("plain", args.level, False), ("encrypted", args.level, True)]
    if args.compare_level != args.level:
        variants.append((f"plain, level {args.compare_level}", args.compare_level, False))
    return variants


def compression_round(files: list[BinlogFile], level: int, encrypted: bool, variant: str) -> dict[str, Any]:
    """Every file through ObjectWriter and back through ObjectReader.decode_frame, CPU-timed apart."""
    from relay.archive.objectformat import Kek, ObjectLayout, ObjectReader, ObjectWriter, kek_id

    key = os.urandom(32)
    kek = Kek(key, kek_id(key)) if encrypted else None
    compress_s = decode_s = 0.0
    file_bytes = object_bytes = frames = 0
    for f in files:
        data = f.path.read_bytes()[:f.size]
        started = time.process_time()
        writer = ObjectWriter(f.name, level=level, kek=kek)
        pieces = writer.write(data)
        pieces.append(writer.finish())
        compress_s += time.process_time() - started
        obj = b"".join(pieces)
        del pieces
        view = memoryview(obj)
        started = time.process_time()
        layout = ObjectLayout.parse(obj, len(obj), f.name)
        reader = ObjectReader(layout, writer.meta, [kek] if kek is not None else [])
        chunks = [reader.decode_frame(frame.index, view[frame.object_start:frame.object_end])
                  for frame in layout.frames]
        decode_s += time.process_time() - started
        if b"".join(chunks) != data:
            raise BenchError(f"{f.name}: its object does not decode to the file")
        file_bytes += len(data)
        object_bytes += len(obj)
        frames += len(layout.frames)
    return {"variant": variant, "level": level, "file_bytes": file_bytes, "object_bytes": object_bytes,
            "frames": frames, "ratio": file_bytes / object_bytes, "compress_cpu_s": compress_s,
            "decode_cpu_s": decode_s, "compress_cpu_s_per_gib": compress_s * GIB / file_bytes,
            "decode_cpu_s_per_gib": decode_s * GIB / file_bytes}


# ================================================================ 3. following a live primary


def live_run(args: argparse.Namespace, store: Store, work: Path) -> dict[str, Any]:
    """A relay with the archive following a primary written at full speed (the docstring's part 3)."""
    primary = LocalMariaDB(fresh_dir(work / "primary"), PRIMARY_SERVER_ID, free_port(),
                           extra_args=[f"--max-binlog-size={args.max_binlog_size}"])
    relay: RelayProcess | None = None
    try:
        primary.start()
        if args.fill == "sysbench":
            sysbench_prepare(primary)
        wait_binlog_settled(primary)
        store.moto.reset()
        store.moto.create_bucket(BUCKET)
        relay = start_archiving_relay(work / "relay", primary.port, store, args.level)
        wait_metrics(relay, lambda values: _caught_up(values, primary) and _lag(values)[0] == 0, args.timeout,
                     "the relay did not catch up with the live primary before its load")
        before_bytes, before_files = binlog_bytes(primary), len(primary.binlog_files())
        uploaded0 = metric_samples(relay.metrics_port).get(f"{M}archive_uploaded_files_total", 0.0)
        relay_cpu0, moto_cpu0 = cpu_seconds(relay.pid), cpu_seconds(store.moto.pid)
        load = threading.Thread(target=_write_for, args=(primary, args.live_seconds, args.fill), daemon=True)
        started = time.monotonic()
        load.start()
        max_files = max_bytes = 0.0
        while load.is_alive():
            files_behind, bytes_behind = _lag(sample(relay))
            max_files, max_bytes = max(max_files, files_behind), max(max_bytes, bytes_behind)
            time.sleep(POLL)
        load.join()
        ended = time.monotonic()
        written = binlog_bytes(primary) - before_bytes
        values = wait_metrics(relay, lambda values: _caught_up(values, primary) and _lag(values)[0] == 0,
                              args.timeout, "the archive did not catch up after the load")
        drained = time.monotonic() - ended
        files_closed = len(primary.binlog_files()) - before_files
        archived = values.get(f"{M}archive_uploaded_files_total", 0.0) - uploaded0
        if archived < files_closed:
            raise BenchError(f"{files_closed} files closed under the load, {archived:.0f} archived")
        return {"load": "sysbench oltp_write_only, 4 threads" if args.fill == "sysbench" else "SQL inserts (smoke)",
                "seconds": ended - started, "written_mib": mib(written),
                "primary_mib_per_s": mib(written) / (ended - started), "files_closed": files_closed,
                "max_lag_files": max_files, "max_lag_mib": mib(max_bytes), "drain_after_load_s": drained,
                "relay_cpu_s": cpu_seconds(relay.pid) - relay_cpu0,
                "moto_cpu_s": cpu_seconds(store.moto.pid) - moto_cpu0}
    finally:
        stop_relay(relay)
        primary.destroy()


def _caught_up(values: dict[str, float], primary: LocalMariaDB) -> bool:
    name, position = primary.master_status()
    return _committed(values) == (float(int(name.rsplit(".", 1)[1])), float(position))


def _lag(values: dict[str, float]) -> tuple[float, float]:
    return values.get(f"{M}archive_lag_files", 0.0), values.get(f"{M}archive_lag_bytes", 0.0)


def _write_for(primary: LocalMariaDB, seconds: float, fill: str) -> None:
    """The live load: sysbench oltp_write_only at full speed, or (smoke runs) plain INSERTs."""
    if fill == "sysbench":
        run_quietly([*sysbench_command(primary), "--threads=4", f"--time={max(1, round(seconds))}",
                     "oltp_write_only", "run"])
        return
    primary.sql("CREATE DATABASE IF NOT EXISTS smoke")
    primary.sql("CREATE TABLE IF NOT EXISTS smoke.t (id INT AUTO_INCREMENT PRIMARY KEY, c CHAR(120))")
    deadline = time.monotonic() + seconds
    with primary.client() as client:
        while time.monotonic() < deadline:
            client.query("INSERT INTO smoke.t (c) SELECT REPEAT('c', 120) FROM smoke.seq_1_to_100")


# ================================================================ the benchmark


def run_benchmark(args: argparse.Namespace) -> dict[str, Any]:
    require_programs(MARIADB_BINLOG, "mariadbd", "mariadb")
    try:
        moto_version = metadata.version("moto")
    except metadata.PackageNotFoundError:
        raise BenchError("moto is not installed: pip install 'moto[server,s3]' (the bench extra)") from None
    work = fresh_dir(Path(args.workdir))
    primary: LocalMariaDB | None = None
    store: Store | None = None
    archiving: RelayProcess | None = None
    local: RelayProcess | None = None
    try:
        primary = prepare_primary(args)
        files = measured_binlog(args, primary)
        closed = files[:-1]
        if len(closed) < args.min_files:
            raise BenchError(f"the primary has {len(closed)} closed binlog files, fewer than --min-files "
                             f"{args.min_files} (a smaller --max-binlog-size, or a larger --size-mb)")
        total, closed_bytes = sum(f.size for f in files), sum(f.size for f in closed)
        log(f"binlog: {len(files)} files, {mib(total):.1f} MiB, {len(closed)} closed ({mib(closed_bytes):.1f} MiB); "
            f"moto {moto_version}")
        store = start_store(work, args.encrypted)

        archive_runs: list[dict[str, Any]] = []
        for round_no in range(1, args.rounds + 1):
            log(f"archive round {round_no}/{args.rounds}: ingest and archive")
            alone_s, alone_cpu = ingest_alone_round(args, running_pid(primary.pid, "primary"), files, work / "alone")
            record, archiving = archive_round(args, store, files, work / "archiving")
            alone_rate = mib(total) / alone_s
            record.update(round=round_no, ingest_alone_s=alone_s, ingest_alone_mib_per_s=alone_rate,
                          ingest_alone_cpu_s=alone_cpu,
                          ingest_cost=record["ingest_s"] / alone_s,
                          ratio=record["archive_end_to_end_mib_per_s"] / alone_rate)
            archive_runs.append(record)
            log(f"  ingest alone {alone_s:.2f} s; ingest {record['ingest_s']:.2f} s "
                f"({record['ingest_mib_per_s']:.1f} MiB/s), archive busy {record['archive_busy_s']:.2f} s "
                f"({record['archive_mib_per_s']:.1f} MiB/s), done at {record['archive_done_s']:.2f} s; "
                f"ratio {record['ratio']:.2f}")
            if round_no < args.rounds:
                stop_relay(archiving)
                archiving = None
        assert archiving is not None
        chosen = max(closed, key=lambda f: f.size)
        wait_purged(archiving, chosen, args.timeout)
        log(f"serving {chosen.name} ({mib(chosen.size):.1f} MiB): the reference relay imports it")
        local = start_local_relay(args, primary, chosen, files, work / "local")
        serve_runs: list[dict[str, Any]] = []
        for round_no in range(1, args.rounds + 1):
            restart_archived(args, archiving, files)
            for source, relay in ((FIRST, archiving), (SHELF, archiving), (LOCAL, local)):
                record = read_file(args, relay, chosen, source, work, store.moto.pid)
                record["round"] = round_no
                serve_runs.append(record)
                log(f"serve round {round_no}/{args.rounds}: {source}: {record['seconds']:.3f} s, "
                    f"{record['mib_per_s']:.1f} MiB/s (verified)")
        stop_relay(local)
        local = None
        stop_relay(archiving)
        archiving = None
        after = primary.master_status()
        if (files[-1].name, files[-1].size) != after:
            raise BenchError(f"the primary was written to during the benchmark: {files[-1].name}:{files[-1].size} "
                             f"-> {after}")

        log(f"following a live primary: {args.live_seconds:g} s of load")
        live = live_run(args, store, work / "live")
        log(f"  the primary wrote {live['primary_mib_per_s']:.1f} MiB/s ({live['files_closed']} files closed); the "
            f"archive lagged by at most {live['max_lag_files']:.0f} files ({live['max_lag_mib']:.1f} MiB) and was "
            f"done {live['drain_after_load_s']:.2f} s after the load")
        store.moto.stop()

        compression_runs: list[dict[str, Any]] = []
        for round_no in range(1, args.rounds + 1):
            for variant, level, encrypted in _compression_variants(args):
                record = compression_round(closed, level, encrypted, variant)
                record["round"] = round_no
                compression_runs.append(record)
                log(f"compression round {round_no}/{args.rounds}, {record['variant']}: ratio {record['ratio']:.2f}, "
                    f"compress {record['compress_cpu_s_per_gib']:.2f} CPU s/GiB, decode "
                    f"{record['decode_cpu_s_per_gib']:.2f} CPU s/GiB")
        relay_variant = "encrypted" if args.encrypted else "plain"
        here = {r["object_bytes"] for r in compression_runs if r["variant"] == relay_variant}
        uploaded = {r["uploaded_object_bytes"] for r in archive_runs}
        if here != uploaded or len(here) != 1:
            raise BenchError(f"the closed files compressed here ({relay_variant}) make {sorted(here)} object bytes, "
                             f"the relay uploaded {sorted(uploaded)}: not the same objects")

        return {
            "machine": machine_info(), "relay": {"commit": git_commit()},
            "primary": {"version": server_version(primary), "max_binlog_size": args.max_binlog_size},
            "binlog": {"files": [{"name": f.name, "bytes": f.size, "events": f.events} for f in files],
                       "bytes": total, "mib": mib(total), "closed_files": len(closed), "closed_bytes": closed_bytes,
                       "closed_mib": mib(closed_bytes)},
            "store": {"server": f"moto {moto_version}", "endpoint": "loopback, in memory"},
            "archive_config": {"encrypted": args.encrypted, "level": args.level, "chunk_mib": 4},
            "served_file": {"name": chosen.name, "bytes": chosen.size, "mib": mib(chosen.size)},
            "rounds": args.rounds, "archive_runs": archive_runs, "serve_runs": serve_runs, "live": live,
            "compression_runs": compression_runs,
            "summary": summarize(archive_runs, serve_runs, compression_runs, relay_variant, chosen.size),
        }
    finally:
        stop_relay(local)
        stop_relay(archiving)
        if store is not None:
            store.moto.stop()
        shutil.rmtree(work / "read", ignore_errors=True)  # the data_dirs went with their relays; logs stay
        finish_primary(args, primary)


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": median(values), "min": min(values), "max": max(values)}


ARCHIVE_FIGURES = ("ingest_alone_s", "ingest_alone_mib_per_s", "ingest_s", "ingest_mib_per_s", "ingest_cost",
                   "archive_busy_s", "archive_mib_per_s", "archive_done_s", "archive_end_to_end_mib_per_s",
                   "drain_after_ingest_s", "kept_up", "relay_cpu_s", "relay_cpu_s_after_ingest", "moto_cpu_s",
                   "zstd_ratio", "ratio")


def summarize(archive_runs: list[dict[str, Any]], serve_runs: list[dict[str, Any]],
              compression_runs: list[dict[str, Any]], relay_variant: str, served_bytes: int) -> dict[str, Any]:
    archive = {name: _spread([r[name] for r in archive_runs]) for name in ARCHIVE_FIGURES}
    ratio = archive["ratio"]["median"]
    archive["headline"] = {"ratio": ratio, "goal": ARCHIVE_GOAL, "goal_met": ratio >= ARCHIVE_GOAL}
    relays_own = [r for r in compression_runs if r["variant"] == relay_variant]
    archive["cpu_bound"] = cpu_bound(
        median(r["ingest_alone_s"] for r in archive_runs),
        {"ingest_alone_cpu_s": median(r["ingest_alone_cpu_s"] for r in archive_runs),
         "compress_cpu_s": median(r["compress_cpu_s"] for r in relays_own)},
        median(r["moto_cpu_s"] for r in archive_runs))
    serve: dict[str, Any] = {}
    for source in (FIRST, SHELF, LOCAL):
        mine = [r for r in serve_runs if r["source"] == source]
        serve[source] = {"runs": len(mine), "seconds": _spread([r["seconds"] for r in mine]),
                         "mib_per_s": _spread([r["mib_per_s"] for r in mine]),
                         "median_server_cpu_s": median(r["server_cpu_s"] for r in mine)}
    local = serve[LOCAL]["mib_per_s"]["median"]
    for source in (FIRST, SHELF, LOCAL):
        serve[source]["ratio"] = serve[source]["mib_per_s"]["median"] / local
    serve["headline"] = {"ratio": serve[FIRST]["ratio"], "shelf_ratio": serve[SHELF]["ratio"], "goal": SERVE_GOAL,
                         "goal_met": serve[FIRST]["ratio"] >= SERVE_GOAL}
    local = [r for r in serve_runs if r["source"] == LOCAL]
    serve["cpu_bound"] = cpu_bound(
        median(r["seconds"] for r in local),
        {"local_read_cpu_s": median(r["server_cpu_s"] + r["client_cpu_s"] for r in local),
         "decode_cpu_s": median(r["decode_cpu_s_per_gib"] for r in relays_own) * served_bytes / GIB},
        median(r["store_cpu_s"] for r in serve_runs if r["source"] == FIRST))
    compression = {}
    for variant in dict.fromkeys(r["variant"] for r in compression_runs):
        mine = [r for r in compression_runs if r["variant"] == variant]
        compression[variant] = {"runs": len(mine), "ratio": mine[0]["ratio"], "level": mine[0]["level"],
                                **{name: _spread([r[name] for r in mine]) for name in (
                                    "compress_cpu_s_per_gib", "decode_cpu_s_per_gib")}}
    return {"archive": archive, "serve": serve, "compression": compression}


def cpu_bound(reference_s: float, unskippable_cpu_s: dict[str, float], store_cpu_s: float) -> dict[str, float]:
    """The best ratio against ``reference_s`` (ingest alone's seconds, a local read's) this machine
    allows whatever the relay does: the CPU seconds no implementation can skip (``unskippable_cpu_s``,
    by what they are, and the store's) spread perfectly over every CPU; and the same without the
    store's share, what a store on another machine would leave."""
    cpus = os.cpu_count() or 1
    work = sum(unskippable_cpu_s.values())
    return {"cpus": cpus, **unskippable_cpu_s, "store_cpu_s": store_cpu_s,
            "ratio_at_most": cpus * reference_s / (work + store_cpu_s),
            "ratio_at_most_store_elsewhere": cpus * reference_s / work}


def bound_text(bound: dict[str, float]) -> str:
    return (f"at most {bound['ratio_at_most']:.2f} on these {bound['cpus']:.0f} CPUs with the store on them, "
            f"{bound['ratio_at_most_store_elsewhere']:.2f} with the store elsewhere")


def report(results: dict[str, Any]) -> str:
    s, b, machine = results["summary"], results["binlog"], results["machine"]
    conf = results["archive_config"]
    a = s["archive"]

    def row(label: str, name: str, fmt: str = ".2f") -> list[object]:
        figure = a[name]
        return [label, f"{figure['median']:{fmt}}", f"{figure['min']:{fmt}}-{figure['max']:{fmt}}"]

    head = a["headline"]
    lines = [f"Archive: {b['mib']:.0f} MiB of binlog in {len(b['files'])} files ({b['closed_files']} closed, "
             f"{b['closed_mib']:.0f} MiB), MariaDB {results['primary']['version']}; "
             f"relay {results['relay']['commit']}, "
             f"archive {'encrypted' if conf['encrypted'] else 'plain'}, zstd level {conf['level']}, "
             f"{results['store']['server']} on loopback; {results['rounds']} rounds; {machine['cpus']} CPUs, load "
             f"{machine['loadavg'][0]:.2f}", "",
             "1. Archive vs ingest (one relay doing both; the same relay without an archive before it; archive "
             "lagging: a closed file not archived yet)",
             table(["figure", "median", "range"], [
                 row("ingest alone s", "ingest_alone_s"), row("ingest alone MiB/s", "ingest_alone_mib_per_s", ".1f"),
                 row("ingest s", "ingest_s"), row("ingest MiB/s", "ingest_mib_per_s", ".1f"),
                 row("ingest s / ingest alone s", "ingest_cost"),
                 row("archive lagging s", "archive_busy_s"), row("archive MiB/s", "archive_mib_per_s", ".1f"),
                 row("archive done at s", "archive_done_s"),
                 row("archive MiB/s end to end", "archive_end_to_end_mib_per_s", ".1f"),
                 row("drain after ingest s", "drain_after_ingest_s"),
                 row("ingest s / archive done at s", "kept_up"), row("relay CPU s", "relay_cpu_s"),
                 row("relay CPU s after ingest", "relay_cpu_s_after_ingest"), row("moto CPU s", "moto_cpu_s"),
                 row("zstd ratio (relay's metrics)", "zstd_ratio")]),
             f"archive MiB/s end to end / ingest alone MiB/s = {head['ratio']:.2f} (goal >= {head['goal']:.1f}: "
             f"{'met' if head['goal_met'] else 'NOT met'}); {bound_text(a['cpu_bound'])}", ""]
    f = results["served_file"]
    serve = s["serve"]
    rows = [[source, serve[source]["runs"], f"{serve[source]['seconds']['median']:.3f}",
             f"{serve[source]['mib_per_s']['median']:.1f}",
             f"{serve[source]['mib_per_s']['min']:.1f}-{serve[source]['mib_per_s']['max']:.1f}",
             f"{serve[source]['median_server_cpu_s']:.2f}",
             "1.00 (ref)" if source == LOCAL else f"{serve[source]['ratio']:.2f}"] for source in (FIRST, SHELF, LOCAL)]
    sh = serve["headline"]
    lines += [f"2. Serving {f['name']} ({f['mib']:.1f} MiB) to mariadb-binlog --raw, checked byte for byte",
              table(["source", "runs", "seconds", "MiB/s", "range", "relay CPU s", "ratio"], rows),
              f"archived (first read) / local = {sh['ratio']:.2f} (goal >= {sh['goal']:.1f}: "
              f"{'met' if sh['goal_met'] else 'NOT met'}); shelf / local = {sh['shelf_ratio']:.2f}; "
              f"{bound_text(serve['cpu_bound'])}", ""]
    live = results.get("live")
    if live is not None:
        capacity = a["archive_end_to_end_mib_per_s"]["median"]
        lines += [f"3. Following a live primary ({live['load']}, {live['seconds']:.0f} s, max_binlog_size "
                  f"{results['primary']['max_binlog_size']})",
                  table(["figure", "value"], [
                      ["primary wrote MiB/s", f"{live['primary_mib_per_s']:.1f}"],
                      ["files closed", live["files_closed"]],
                      ["archive lag at most, files", f"{live['max_lag_files']:.0f}"],
                      ["archive lag at most, MiB", f"{live['max_lag_mib']:.1f}"],
                      ["all archived after the load, s", f"{live['drain_after_load_s']:.2f}"],
                      ["relay CPU s / moto CPU s", f"{live['relay_cpu_s']:.2f} / {live['moto_cpu_s']:.2f}"]]),
                  f"part 1's archive MiB/s end to end / the live primary's MiB/s = "
                  f"{capacity / max(live['primary_mib_per_s'], 1e-9):.1f}", ""]
    rows = []
    for variant, c in s["compression"].items():
        for step in ("compress", "decode"):
            figure = c[f"{step}_cpu_s_per_gib"]
            rows.append([variant, step, f"{figure['median']:.2f}", f"{figure['min']:.2f}-{figure['max']:.2f}",
                         f"{1024 / figure['median']:.0f}" if figure["median"] else "-", f"{c['ratio']:.2f}"])
    lines += [f"4. The closed files through the archive's object format here (4 MiB frames, zstd level "
              f"{conf['level']}; one core)",
              table(["variant", "step", "CPU s/GiB", "range", "MiB/s", "zstd ratio"], rows)]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = bench_parser("archive", __doc__, rounds="rounds of each part", workdir="/tmp/binlog-relay-bench/archive",
                     workdir_help="the relays' data_dirs, configs and logs, moto's log, the copies read",
                     timeout=1800, timeout_help="seconds a relay may take to ingest and archive the binlog, or a read",
                     primary={"size_mb": 300, "min_mb": 200, "max_binlog_size": "64M", "port": 26346,
                              "name": "bencharchive"})
    p.add_argument("--min-files", type=int, default=3, help="refuse to measure fewer closed binlog files")
    p.add_argument("--live-seconds", type=float, default=30.0, help="how long part 3 writes to its live primary")
    p.add_argument("--compare-level", type=int, default=3, choices=range(1, 20), metavar="1-19",
                   help="a zstd level measured beside --level in part 3 (plain), for the choice of the default")
    p.add_argument("--level", type=int, default=DEFAULT_LEVEL, choices=range(1, 20), metavar="1-19",
                   help=f"zstd level (archive.compression_level; the relay's default is {DEFAULT_LEVEL})")
    p.add_argument("--encrypted", action="store_true",
                   help="the relay's archive encrypted (a random key-encryption key); part 3 measures both anyway")
    return parse_bench_args(p, argv)


def main(argv: list[str] | None = None) -> int:
    return bench_main(argv, parse_args, run_benchmark, report)


if __name__ == "__main__":
    sys.exit(main())
