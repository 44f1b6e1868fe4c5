"""The fault suite: short in the default test run, long with FAULTS_SCALE=long (scripts/faults.sh).

``fault_relay`` starts relays as ``relay_factory`` does (tests/support/replication.py) with a known
metrics port, and records each one: before it is stopped, its /metrics, /healthz and /readyz bodies
are saved next to its log, so tests/faults/test_secrets.py can search everything the suite's relays
said for the passwords they were given.

``fault_figures`` records a test's figures (tests/support/faultfigures.py): printed as its ``FAULTS``
line, summed up at the end of the session, and written into RELIABILITY.md's generated block when
``FAULTS_FIGURES`` names it (scripts/faults.sh does, for the long run; the default run writes nothing).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from relay.sandbox.ports import free_port
from relay.sandbox.relayprocess import RelayProcess
from tests.support.faultfigures import (
    FIGURES_ENV,
    FigureRecorder,
    Figures,
    figures_path,
    run_label,
    write_figures,
)
from tests.support.faults import ENDPOINTS_FILE, STARTED_RELAYS, endpoint_texts

SCALE = os.environ.get("FAULTS_SCALE", "short")
if SCALE not in ("short", "long"):
    raise pytest.UsageError(f"FAULTS_SCALE must be short or long, not {SCALE!r}")
LONG = SCALE == "long"

# How many faults of each class one run injects (RELIABILITY.md has the figures of both runs).  The
# short counts keep the default suite near its time budget: each aimed kind of fault still comes
# at least once (power cuts: the nine aims of test_powercut.AIMS, and a random one).
KILL9_CYCLES = 200 if LONG else 10
POWER_CUTS = 200 if LONG else 10  # with storage.sync: commit
POWER_CUTS_WEAKER = 200 if LONG else 5  # with sync: interval and none, each (what they lose is measured)
PROXY_FAULTS_EACH = 100 if LONG else 10  # per kind and leg
HOSTILE_CASES = 100_000 if LONG else 5_000
ARCHIVE_KILLS = 200 if LONG else 10  # kill -9 while the archiver uploads
STORE_DOWN_SECONDS = 180 if LONG else 10  # the archive's object store unreachable while ingest goes on
WRITER_KILLS = 50 if LONG else 3  # kill -9 of the relay writing an archive another relay reads



def passwords_of(config: dict[str, Any]) -> tuple[str, ...]:
    found = [config.get("upstream", {}).get("password")]
    found += [user.get("password") for user in config.get("users", [])]
    return tuple(p for p in found if p)


@pytest.fixture
def fault_relay(relay_factory: Any) -> Iterator[Any]:
    """make(name, upstream_port, **overrides) -> a started RelayProcess (relay_factory's), recorded."""
    mine: list[RelayProcess] = []

    def make(name: str, upstream_port: int, **overrides: Any) -> RelayProcess:
        overrides.setdefault("metrics", {"host": "127.0.0.1", "port": free_port()})
        relay = relay_factory(name, upstream_port, **overrides)
        mine.append(relay)
        STARTED_RELAYS.append((relay.work_dir, passwords_of(relay.config)))
        return relay

    yield make
    for relay in mine:  # relay_factory stops them after this
        if relay.alive():
            try:
                (relay.work_dir / ENDPOINTS_FILE).write_text(endpoint_texts(relay))
            except OSError:
                pass


# ------------------------------------------------------------------ the figures (RELIABILITY.md)

_PENDING = pytest.StashKey[list[Figures]]()  # a test's, until it passed
_RECORDED = pytest.StashKey[list[Figures]]()  # the session's, of the tests that passed
_FAILED = pytest.StashKey[list[str]]()  # the fault tests that failed
_WRITTEN = pytest.StashKey[str]()  # what became of them, for the summary


@pytest.fixture
def fault_figures(request: pytest.FixtureRequest) -> FigureRecorder:
    """record(fault_class, *, fault, injected, recovery, memory="-", data_lost="-", diverged="-",
    detail="") -> Figures: tests/support/faultfigures.py FigureRecorder.__call__."""
    node = request.node
    test = f"{node.path.name}::{node.name}"
    return FigureRecorder(test, run_label(SCALE), node.stash.setdefault(_PENDING, []))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    # A test's figures count once it passed; a fault test that failed is named in the block's note.
    report = yield
    if report.when == "call" and report.passed:
        item.config.stash.setdefault(_RECORDED, []).extend(item.stash.get(_PENDING, []))
    elif report.failed:
        item.config.stash.setdefault(_FAILED, []).append(item.nodeid)
    return report


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    recorded = session.config.stash.get(_RECORDED, [])
    failed = session.config.stash.get(_FAILED, [])
    path = figures_path(session.config.rootpath)
    if not recorded and not failed:
        return  # no fault test ran
    if path is None:
        session.config.stash[_WRITTEN] = (f"not written anywhere ({FIGURES_ENV} unset: scripts/faults.sh sets it "
                                          "to RELIABILITY.md for the long run)")
        return
    if not recorded:
        session.config.stash[_WRITTEN] = f"{path} left as it was: no fault test passed ({len(failed)} failed)"
        return
    size = "long run (scripts/faults.sh, FAULTS_SCALE=long)" if LONG else "default counts (FAULTS_SCALE=short)"
    note = (f"_Written by the fault suite (tests/support/faultfigures.py) at the end of a run on "
            f"{time.strftime('%Y-%m-%d %H:%M')}, {size}, {os.cpu_count()} CPUs: "
            f"{len(recorded)} rows from it; failed in it: {', '.join(f'`{n}`' for n in failed) or 'none'}. "
            "A class that did not run or failed keeps its row from an earlier run; the Run column says which "
            "run each row is from. Edit the tests, not this table._")
    try:
        write_figures(path, recorded, note)
    except (OSError, ValueError) as exc:
        session.config.stash[_WRITTEN] = f"NOT written to {path}: {exc}"
    else:
        session.config.stash[_WRITTEN] = f"written to {path} ({len(recorded)} rows)"


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if _WRITTEN not in config.stash:
        return
    terminalreporter.section(f"fault figures ({SCALE} run)")
    for figures in config.stash.get(_RECORDED, []):
        terminalreporter.write_line(figures.line())
    terminalreporter.write_line(f"the figures: {config.stash[_WRITTEN]}")


# ------------------------------------------------------------------ a small disk

DISK_MIB = 48


def _mount(*args: str) -> None:
    result = subprocess.run(["mount", *args], capture_output=True, text=True)
    assert result.returncode == 0, (f"this test mounts a tmpfs and must run as root (scripts/test.sh runs the "
                                    f"suite as root): mount {' '.join(args)} said {result.stderr.strip()!r}")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A DISK_MIB tmpfs on tmp_path/small-disk, whose data/ directory is bind-mounted where
    fault_relay("relay", ...) puts its data_dir (tmp_path/relay/data); the rest of the file system is
    for the test's ballast. Unmounted at teardown, after the relay stopped (request it before fault_relay)."""
    mount_point, data_dir = tmp_path / "small-disk", tmp_path / "relay" / "data"
    mount_point.mkdir()
    data_dir.mkdir(parents=True)
    _mount("-t", "tmpfs", "-o", f"size={DISK_MIB}m", "tmpfs", str(mount_point))
    mounted = [mount_point]
    try:
        (mount_point / "data").mkdir()
        _mount("--bind", str(mount_point / "data"), str(data_dir))
        mounted.append(data_dir)
        yield mount_point
    finally:
        for path in reversed(mounted):
            if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", str(path)], check=False)


def fill_disk(path: Path, free_left: int) -> None:
    """A ballast file taking all but free_left bytes of path's file system."""
    stats = os.statvfs(path.parent)
    size = stats.f_bavail * stats.f_frsize - free_left
    with open(path, "wb") as ballast:
        chunk = b"\0" * (1 << 20)
        while size > 0:
            size -= ballast.write(chunk[:min(len(chunk), size)])
