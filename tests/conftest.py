"""Suite-wide fixtures: real MariaDB servers, and the --run-slow switch."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

# `tests.support` is imported by its package name from every test directory. `python -m
# pytest` (scripts/test.sh) puts the repo root on sys.path, a bare `pytest` does not.
REPO_ROOT = str(Path(__file__).resolve().parent.parent)
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)

from relay.sandbox.mariadb import (  # noqa: E402 - needs the sys.path line above
    kill_all_servers,
    set_template_parent,
)
from relay.sandbox.ports import use_port_range  # noqa: E402 - needs the sys.path line above
from tests.support.mariadb import (  # noqa: E402 - needs the sys.path line above
    MariaDB,
    MariaDBFactory,
    dir_name_for,
)
from tests.support.ports import worker_slice  # noqa: E402 - needs the sys.path line above

# relay_factory (a started relay child per test, stopped at teardown), the S3 API server (moto,
# on a loopback port) and a relay host's clock set wrong (skewed_clock) for every test directory
pytest_plugins = ["tests.support.replication", "tests.support.s3", "tests.support.clock"]

_REPORTS = pytest.StashKey[dict[str, pytest.TestReport]]()


# ------------------------------------------------------------------ ports


def pytest_configure(config: pytest.Config) -> None:
    # each worker of a parallel run gives its servers ports of its own (tests/support/ports.py)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    use_port_range(*worker_slice(worker, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))))


# ------------------------------------------------------------------ --run-slow


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--run-slow",
        action="store_true",
        default=False,
        help="also run tests marked slow (deselected by default)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Deselected rather than skipped: a default run reports only what it really ran.
    if config.getoption("--run-slow"):
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]


def pytest_report_header(config: pytest.Config) -> str:
    if config.getoption("--run-slow"):
        return "slow tests: included"
    return "slow tests: deselected (--run-slow runs them)"


# ------------------------------------------------------- server cleanup safety net


def pytest_sessionstart(session: pytest.Session) -> None:
    # A SIGTERM (e.g. a CI job being cancelled) would end pytest without fixture teardown
    # or atexit, and the servers run in their own sessions, so they would outlive it.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _kill_servers_then_die)


def _kill_servers_then_die(signum: int, frame: object) -> None:
    kill_all_servers()
    signal.signal(signum, signal.SIG_DFL)
    signal.raise_signal(signum)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    # Keep each phase's report so fixtures can tell in teardown whether the test passed.
    report = yield
    item.stash.setdefault(_REPORTS, {})[report.when] = report
    return report


def _test_passed(item: pytest.Item) -> bool:
    reports = item.stash.get(_REPORTS, {})
    return "call" in reports and all(report.passed for report in reports.values())


# ------------------------------------------------------------------ MariaDB


@pytest.fixture(scope="session")
def mariadb_template_parent(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Session temp dir that will hold the template datadir (created on first server)."""
    parent = tmp_path_factory.mktemp("mariadb-template")
    set_template_parent(parent)
    return parent


@pytest.fixture
def mariadb_factory(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    mariadb_template_parent: Path,
) -> Iterator[MariaDBFactory]:
    """factory(server_id=None, *, extra_args=(), port=None, start=True) -> MariaDB.

    server_ids are 1, 2, 3, ... in creation order unless given (give the relay an id of 100
    or more). Every server is stopped at teardown, pass or fail; the directories of a
    passing test are deleted, those of a failing one kept for their error.log.
    """
    prefix = dir_name_for(request.node.name)
    factory = MariaDBFactory(lambda name: tmp_path_factory.mktemp(f"{prefix}-{name}-"))
    try:
        yield factory
    finally:
        factory.close(remove_dirs=_test_passed(request.node))


@pytest.fixture
def primary(mariadb_factory: MariaDBFactory) -> MariaDB:
    """A started MariaDB with server_id 1 and default options (binlog on, ROW, CRC32)."""
    return mariadb_factory(server_id=1)
