"""A relay child whose host clock is set wrong: ``skewed_clock(seconds)`` is the environment that
moves its wall clock (time.time(), datetime.now(), the dates boto3 signs with) by ``seconds``, and
leaves the monotonic clock alone.  ``skewed_clock(seconds, control)`` takes the skew from the file
``control`` instead, which ``set_skew(control, seconds)`` changes while the child runs.  It
preloads tests/support/skewclock.c, built once a session with the C compiler the suite needs anyway
(scripts/test.sh installs gcc)."""

from __future__ import annotations

import shutil
import struct
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

SOURCE = Path(__file__).with_name("skewclock.c")


@pytest.fixture(scope="session")
def skewed_clock(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., dict[str, str]]:
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        pytest.fail("no C compiler (gcc) to build tests/support/skewclock.c: apt-get install gcc")
    library = tmp_path_factory.mktemp("skewclock") / "skewclock.so"
    built = subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-o", str(library), str(SOURCE), "-ldl"],
                           capture_output=True, text=True)
    if built.returncode != 0:
        pytest.fail(f"tests/support/skewclock.c does not build:\n{built.stderr}")

    def environment(seconds: int, control: Path | None = None) -> dict[str, str]:
        if control is None:
            return {"LD_PRELOAD": str(library), "SKEWCLOCK_SECONDS": str(seconds)}
        set_skew(control, seconds)
        return {"LD_PRELOAD": str(library), "SKEWCLOCK_FILE": str(control)}

    return environment


def set_skew(control: Path, seconds: int) -> None:
    """The skew of the children started with ``control``, from their next reading of the clock (the
    file is written in place: they map it)."""
    with open(control, "r+b" if control.exists() else "wb") as stream:
        stream.write(struct.pack("=q", seconds))
