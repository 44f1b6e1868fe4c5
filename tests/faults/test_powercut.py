"""Power cuts, not only kill -9 (RELIABILITY.md): the relay keeps its data_dir on a file system that
loses, at a cut, whatever was not flushed (tests/support/powercut.py), under a write load from a
real MariaDB primary, with a MariaDB replica and `mariadb-binlog --stop-never` reading from it.

With `sync: commit` and the relay a semi-sync replica of the primary, after every cut and with no
step by an operator the relay must come up by itself and hold every transaction the primary
received an acknowledgement for, everything it sent a replica or mariadb-binlog (no downstream
reader ahead of its history), files that are byte prefixes of the primary's ending at a
transaction boundary, and, once caught up, the primary's files.  The cuts are aimed also at the
rare moments: between the rename of relay-state.json or binlog.index and the fsync of the
directory, right after a new binlog file is created (a rotation), in the middle of the writes of a
large transaction, after a purge's unlink, while an index sidecar is written.

With `sync: interval` and `none` the same run measures what is lost (printed, and in
RELIABILITY.md): never a partial transaction, and whatever is lost is fetched again from the
primary with no gap.  With `interval` no reader may be ahead either: the relay publishes a group
to its readers only once the interval's fsync made it durable."""

from __future__ import annotations

import os
import random
import signal
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from relay.sandbox.binlogfiles import BINLOG_MAGIC, GTID_EVENT, HEADER_LEN, split_events
from relay.sandbox.mariadb import REPL_PASSWORD, REPL_USER
from relay.sandbox.polling import wait_for
from relay.sandbox.ports import LOOPBACK
from relay.sandbox.replication import FIRST_FILE, attach_replica
from tests.faults.conftest import POWER_CUTS, POWER_CUTS_WEAKER
from tests.support.faults import SequenceLoad, converged_after_purges, wait_while_moving, written_bytes
from tests.support.metrics import Scrape
from tests.support.powercut import PowerCutMount

XID_EVENT = 16
# what ends a group, or stands alone: XID, QUERY (COMMIT, DDL), ROTATE, FDE, GTID_LIST, BINLOG_CHECKPOINT, STOP
GROUP_ENDS = (16, 2, 4, 15, 163, 161, 3)
SEMI_SYNC_PRIMARY = ["--rpl-semi-sync-master-enabled=ON", "--rpl-semi-sync-master-timeout=600000"]
FDE_FLAGS = 4 + 17  # the FORMAT_DESCRIPTION's flags byte: its in-use bit is the one byte a copy may differ in
# Where a cut is aimed, in turn: (operation, part of the path, how many of them may pass first); None: a
# random moment of the load.
AIMS: list[tuple[str, str, int] | None] = [
    None,
    ("rename", "/relay-state.json", 3),
    ("create", "/mysql-bin.", 2),
    ("write", "/mysql-bin.", 300),  # often inside a large transaction (every 8th carries 48 KiB)
    ("fsync", "/mysql-bin.", 40),
    ("rename", "/binlog.index", 2),
    ("unlink", "/mysql-bin.", 1),  # a purge (retention keeps 192 KiB)
    ("rename", "/replicas.json", 2),
    ("write", ".idx", 5),  # an index sidecar
]


@dataclass
class Cuts:
    """What the cuts did, for the summary line RELIABILITY.md quotes."""

    acknowledged: list[int] = field(default_factory=list)  # commits returned before each cut
    lost: list[int] = field(default_factory=list)  # transactions stored before a cut and not after
    restarts: list[float] = field(default_factory=list)
    served_bytes: int = 0
    aimed: dict[str, int] = field(default_factory=dict)


def _stored_gtid_seqs(data_dir: Path) -> list[int]:
    """The seq_no of every whole transaction stored (domain 0; the load's end in an XID), from the
    files themselves."""
    seqs = []
    for name in _index(data_dir):
        try:
            data = (data_dir / name).read_bytes()
        except FileNotFoundError:
            continue  # purged by retention since the index was read (the relay runs on)
        opened = None
        for event in _whole_events(data):
            if event.type == GTID_EVENT and len(event.data) >= HEADER_LEN + 8:
                opened = int.from_bytes(event.data[HEADER_LEN : HEADER_LEN + 8], "little")
            elif event.type == XID_EVENT and opened is not None:
                seqs.append(opened)
                opened = None
    return seqs


def _whole_events(data: bytes) -> list:  # type: ignore[type-arg]
    """The whole events of a binlog file's bytes (a torn last one left out)."""
    if data[:4] != BINLOG_MAGIC:
        return []
    whole, pos = [], 4
    while pos + HEADER_LEN <= len(data) and (length := int.from_bytes(data[pos + 9 : pos + 13], "little")) and \
            length >= HEADER_LEN and pos + length <= len(data):
        whole.append(next(split_events(data[pos : pos + length])))
        pos += length
    return whole


def _index(data_dir: Path) -> list[str]:
    """The stored files the index names.  The relay renames a new index over the old one while this
    reads: on the FUSE mount an open that looked up the old inode just before can fail with ENOENT
    (libfuse finds no path for a replaced inode), which a kernel file system never does; read again."""
    index = data_dir / "binlog.index"
    # a list, so that an empty index is still a truthy answer
    text = wait_for(lambda: [index.read_text() if index.exists() else ""], 10, f"{index} could not be read",
                    ignore=(FileNotFoundError,))[0]
    return [Path(line.strip()).name for line in text.splitlines() if line.strip()]


def _assert_prefixes_of_the_primary(primary, data_dir: Path) -> None:  # type: ignore[no-untyped-def]
    """Every stored file is a byte prefix of the primary's file of that name (the in-use flag aside)."""
    for name in _index(data_dir):
        path = data_dir / name
        if not path.exists():
            continue
        stored = bytearray(path.read_bytes())
        original = bytearray(primary.binlog_path(name).read_bytes()[: len(stored)])
        for copy in (stored, original):
            if len(copy) > FDE_FLAGS:
                copy[FDE_FLAGS] &= 0xFE
        assert stored == original, f"{name}: the stored {len(stored)} bytes are not the primary's"


def _committed_end(relay) -> tuple[str, int]:  # type: ignore[no-untyped-def]
    """The relay's committed end (file, position), from its metrics."""
    values = Scrape.fetch(relay.metrics_port)
    number = int(values.value("binlog_relay_committed_file_number") or 0)
    name = next(n for n in _index(relay.data_dir) if int(n.rsplit(".", 1)[1]) == number)
    return name, int(values.value("binlog_relay_committed_position_bytes") or 0)


def _committed_at_a_group_end(primary, relay) -> None:  # type: ignore[no-untyped-def]
    """After the restart the relay's committed end is where a transaction ends (recovery cut any
    partial one off), and what it holds up to there is the primary's."""
    name, end = _committed_end(relay)
    data = (relay.data_dir / name).read_bytes()[:end]
    events = _whole_events(data)
    assert sum(e.length for e in events) == end - 4, f"{name}: the committed end {end} is inside an event"
    if events and events[-1].type not in GROUP_ENDS:
        raise AssertionError(f"{name}: the committed end {end} follows an event of type {events[-1].type}")
    original = bytearray(primary.binlog_path(name).read_bytes()[:end])
    stored = bytearray(data)
    for copy in (stored, original):
        if len(copy) > FDE_FLAGS:
            copy[FDE_FLAGS] &= 0xFE
    assert stored == original, f"{name}: the committed bytes are not the primary's"


def _wait_replica_read_up_to_the_relay(replica, relay, cycle: int) -> None:  # type: ignore[no-untyped-def]
    """Until the replica's IO thread has read what the relay holds now.  Without semi-sync the primary
    writes on while the relay is down, and a replica given only the moments between two cuts falls
    further behind at each: a long run left it thousands of files back, where no cut can find it
    ahead of the relay and where retention may purge nothing (the files it will read are kept), so
    every cycle read more files than the last."""
    end = _committed_end(relay)

    def read() -> tuple[str, int]:
        status = replica.slave_status()
        return str(status["Master_Log_File"]), int(status["Read_Master_Log_Pos"])

    wait_while_moving(read, lambda now: now >= end, 60,
                      f"cut {cycle}: the replica did not read up to the relay's {end[0]}:{end[1]}")


def _start_binlog_reader(port: int, out: Path, first: str) -> subprocess.Popen[bytes]:
    out.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        ["mariadb-binlog", "--read-from-remote-server", "--host", LOOPBACK, "--port", str(port), "--user", REPL_USER,
         f"--password={REPL_PASSWORD}", "--raw", "--stop-never", f"--result-file={out}/", first],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _assert_not_ahead(data_dir: Path, sent_dir: Path) -> int:
    """Everything mariadb-binlog was sent is in the stored files (they may hold more); the bytes it got."""
    total = 0
    for path in sorted(sent_dir.glob("mysql-bin.*")):
        sent = bytearray(path.read_bytes())
        if len(sent) <= len(BINLOG_MAGIC) or path.name < _index(data_dir)[0]:
            continue  # opened at the ROTATE naming it, nothing of it sent; or purged by retention since
        stored_path = data_dir / path.name
        assert stored_path.exists(), (f"mariadb-binlog was sent {len(sent)} bytes of {path.name}, which the relay "
                                      f"lost (it holds {_index(data_dir)})")
        stored = bytearray(stored_path.read_bytes()[: len(sent)])
        for copy in (sent, stored):
            if len(copy) > FDE_FLAGS:
                copy[FDE_FLAGS] &= 0xFE
        assert len(stored) == len(sent) and stored == sent, (
            f"mariadb-binlog was sent {len(sent)} bytes of {path.name}, the relay holds {len(stored)} of them")
        total += len(sent)
    return total


def _assert_replica_not_ahead(replica, data_dir: Path, when: str) -> None:  # type: ignore[no-untyped-def]
    """What the replica read (Master_Log_File, Read_Master_Log_Pos) is in the stored files, or is the
    start of the file the last stored ROTATE names (read at that ROTATE: nothing of it yet), or is
    older than every stored file (a replica behind, whose file retention purged)."""
    status = replica.slave_status()
    read_file, read_pos = str(status["Master_Log_File"]), int(status["Read_Master_Log_Pos"])
    names = _index(data_dir)
    if read_file in names:
        stored_size = (data_dir / read_file).stat().st_size
        assert stored_size >= read_pos, (
            f"{when}: the replica read {read_file}:{read_pos}, beyond the relay's history")
        return
    if read_file < names[0]:
        return  # behind: retention (192 KiB) purged the file a lagging replica was reading
    last = list(split_events((data_dir / names[-1]).read_bytes()[4:]))[-1]
    named = last.data[HEADER_LEN + 8 : last.length - 4].decode(errors="replace") if last.type == 4 else None
    assert (read_file, read_pos) == (named, 4), (
        f"{when}: the replica read {read_file}:{read_pos}, beyond the relay's history ({names[-1]} is its last file)")


def _cut(mount: PowerCutMount, relay, rng: random.Random, aim: tuple[str, str, int] | None) -> str:  # type: ignore[no-untyped-def]
    """Kill the relay at an aimed or a random moment, and cut the power; returns what it was aimed at."""
    if aim is not None:
        operation, part, most = aim
        mount.arm(operation, part, rng.randint(1, most))
        try:
            wait_for(lambda: mount.tripped() is not None, 20, "not reached")
        except AssertionError:
            mount.arm("none", "-", 1)  # the aimed moment did not come: a random one instead
            aim = None
    if aim is None:
        deadline = time.monotonic() + rng.uniform(0.0, 0.5)
        wait_for(lambda: time.monotonic() >= deadline, 5)
    os.kill(relay.pid, signal.SIGKILL)  # it dies once the cut aborts any request it waits for
    mount.cut()
    relay.proc.wait(30)
    return "random" if aim is None else f"{aim[0]} {aim[1]}"


@pytest.mark.parametrize("sync", ["commit", "interval", "none"])
def test_power_cuts(mariadb_factory, fault_relay, fault_figures, tmp_path, sync):
    rng = random.Random(20261125)
    primary = mariadb_factory(server_id=1, extra_args=["--max-binlog-size=65536"]
                              + (SEMI_SYNC_PRIMARY if sync == "commit" else []))
    replica = mariadb_factory(server_id=11)
    with PowerCutMount(tmp_path / "mnt", tmp_path) as mount:
        data_dir = mount.mountpoint / "data"
        relay = fault_relay("relay", primary.port, data_dir=str(data_dir),
                            storage={"sync": sync, "sync_interval_ms": 50, "index_interval": "16K",
                                     "retention": {"max_size": "192K", "min_files": 2}},
                            upstream={"semi_sync": sync == "commit"})
        if sync == "commit":
            primary.wait_until(lambda: primary.sql("SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_clients'")[0][1]
                               == "1", 30, "the relay did not connect as a semi-sync replica")
        attach_replica(replica, relay.port, log_file=FIRST_FILE, log_pos=4)
        # creates its table: the load's transactions come after.  Paced without semi-sync (which paces
        # the primary by the relay's fsyncs): at 1000 a second (about 100 of these 64 KiB files) the
        # replica read fewer files a second than the primary wrote, fell thousands behind in a long run,
        # and each cycle read more of them than the last.
        load = SequenceLoad(primary, rate=None if sync == "commit" else 200)
        base = int(str(primary.sql("SELECT @@GLOBAL.gtid_binlog_pos")[0][0]).split("-")[2])
        cuts = Cuts()
        with load:
            load.wait_commits(30)
            cuts_wanted = POWER_CUTS if sync == "commit" else POWER_CUTS_WEAKER
            for cycle in range(cuts_wanted):
                _wait_replica_read_up_to_the_relay(replica, relay, cycle)
                reader_dir = tmp_path / f"sent-{cycle}"
                reader = _start_binlog_reader(relay.port, reader_dir, _index(data_dir)[-1])
                target = written_bytes(relay) + rng.randint(1, 40_000)
                wait_for(lambda target=target: written_bytes(relay) >= target, 60,
                         f"cut {cycle}: the relay stored nothing more")
                before = set(_stored_gtid_seqs(data_dir))
                acknowledged = load.commits  # returned on the primary: acknowledged by the relay, with semi-sync
                aimed = _cut(mount, relay, rng, AIMS[cycle % len(AIMS)])
                cuts.aimed[aimed] = cuts.aimed.get(aimed, 0) + 1
                reader.kill()
                reader.wait(10)
                after = set(_stored_gtid_seqs(data_dir))
                cuts.acknowledged.append(acknowledged)
                # the tail lost (retention purges the oldest files meanwhile: not a loss); the newest
                # kept taken once: a long run stores hundreds of thousands of transactions
                kept_up_to = max(after, default=0)
                cuts.lost.append(len([seq for seq in before if seq > kept_up_to]))
                _assert_prefixes_of_the_primary(primary, data_dir)
                if sync == "commit":
                    assert (max(after) if after else 0) >= base + acknowledged, (
                        f"cut {cycle} ({aimed}): {acknowledged} transactions acknowledged, the relay holds up to "
                        f"{max(after) - base if after else 0}")
                if sync != "none":  # interval: what readers were sent had been synced
                    try:
                        cuts.served_bytes += _assert_not_ahead(data_dir, reader_dir)
                    except AssertionError as exc:
                        raise AssertionError(f"cut {cycle} ({aimed}): {exc}") from None
                    _assert_replica_not_ahead(replica, data_dir, f"cut {cycle} ({aimed})")
                killed = time.monotonic()
                relay.start()
                relay.wait_listening()
                cuts.restarts.append(time.monotonic() - killed)
                _committed_at_a_group_end(primary, relay)
            commits = load.stop()
        recovery = converged_after_purges(primary, relay, [replica], commits)
        if sync == "commit":
            status = dict(primary.sql("SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_%'"))
            assert status["Rpl_semi_sync_master_no_tx"] == "0", "a commit returned without the relay's ACK"
        counts = mount.counts()
        # stopped while its file system is mounted: the mount goes with the block, and a relay left
        # running wrote its replica book into a directory that was no longer there (ENOENT)
        assert relay.stop() == 0
        assert "Traceback" not in relay.log_text()
        assert "cannot write the replica book" not in relay.log_text()
        assert counts["cuts"] == cuts_wanted
    aimed = ", ".join(f"{k}: {v}" for k, v in cuts.aimed.items())
    may_lose = {"commit": "nothing acknowledged, nothing sent", "interval": "up to sync_interval_ms, nothing sent",
                "none": "what the OS had not written"}[sync]
    fault_figures(f"powercut[sync={sync}]",
                  fault=f"power cut (a FUSE file system forgets what was not flushed) with storage.sync: {sync} "
                        f"({may_lose}), under write load"
                        + (" from a semi-sync primary" if sync == "commit" else "")
                        + ", a replica and mariadb-binlog --stop-never reading the relay",
                  injected=f"{cuts_wanted} cuts ({aimed}); {commits:,} transactions; "
                           f"{counts['lost_bytes']:,} bytes lost by the file system",
                  data_lost=f"0 after recovery; the relay lost {sum(cuts.lost)} transactions at the cuts (max "
                            f"{max(cuts.lost)}), all fetched again",
                  diverged="0",
                  recovery=f"cut to listening again: median {statistics.median(cuts.restarts):.2f} s; "
                           + (f"{cuts.acknowledged[-1]:,} acknowledged before the last cut, all held; "
                              if sync == "commit" else "")
                           + (f"{cuts.served_bytes:,} bytes sent to mariadb-binlog, none ahead of the relay; "
                              if sync != "none" else "")
                           + f"after the load: {recovery}")
