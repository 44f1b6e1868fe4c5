"""A relay child whose host clock is set wrong: ``skewed_clock(seconds)`` is the environment that
moves its wall clock (time.time(), datetime.now(), the dates boto3 signs with) by ``seconds``, and
leaves the monotonic clock alone.  It preloads tests/support/skewclock.c, built once a session with
the C compiler the suite needs anyway (scripts/test.sh installs gcc)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

SOURCE = Path(__file__).with_name("skewclock.c")


@pytest.fixture(scope="session")
def skewed_clock(tmp_path_factory: pytest.TempPathFactory) -> Callable[[int], dict[str, str]]:
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        pytest.fail("no C compiler (gcc) to build tests/support/skewclock.c: apt-get install gcc")
    library = tmp_path_factory.mktemp("skewclock") / "skewclock.so"
    built = subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-o", str(library), str(SOURCE), "-ldl"],
                           capture_output=True, text=True)
    if built.returncode != 0:
        pytest.fail(f"tests/support/skewclock.c does not build:\n{built.stderr}")

    def environment(seconds: int) -> dict[str, str]:
        return {"LD_PRELOAD": str(library), "SKEWCLOCK_SECONDS": str(seconds)}

    return environment
