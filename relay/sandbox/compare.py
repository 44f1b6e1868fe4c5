"""Is a directory of binlog files a byte copy of the primary's?  (docs/architecture.md, decision 1:
`cmp` against the primary's files is the test.)  The demo's verdict, the tests and the benchmarks
judge a copy by this one rule: the same files (names, and the index when the copy has one), the
same bytes, but for the in-use flag of the last (active) file's FDE (relay.storage.files)."""

from __future__ import annotations

import re
from pathlib import Path

from ..storage.files import first_difference
from .mariadb import LocalMariaDB

INDEX = "binlog.index"  # a relay's index; a copy made by mariadb-binlog --raw has none


def copy_differences(originals: list[Path], copy_dir: Path) -> list[str]:
    """What differs between ``originals`` (the primary's files, oldest first) and the files of
    the same names in ``copy_dir``; [] for a mirror.  Only the last (active) file may differ,
    and only in the FDE's BINLOG_IN_USE flag, which the primary clears when it closes a file."""
    problems = []
    for index, original in enumerate(originals):
        copy = copy_dir / original.name
        if not copy.exists():
            problems.append(f"{original.name}: missing from {copy_dir}")
            continue
        difference = first_difference(original, copy, active=index == len(originals) - 1)
        if difference is not None:
            problems.append(f"{original.name}: {copy.stat().st_size} bytes in the copy, {original.stat().st_size} "
                            f"in the original, first difference at offset {difference}")
    return problems


def mirror_differences(primary: LocalMariaDB, copy_dir: Path) -> list[str]:
    """mirror_file_differences against the binlog files the primary has now (SHOW BINARY LOGS)."""
    originals = [primary.binlog_path(name) for name, _ in primary.binlog_files()]
    return mirror_file_differences(originals, copy_dir)


def mirror_file_differences(originals: list[Path], copy_dir: Path) -> list[str]:
    """copy_differences, and the copy holds no other binlog files than the originals and lists
    exactly them, in order, in its binlog.index when it has one; [] for a mirror."""
    if not copy_dir.is_dir():
        return [f"{copy_dir} does not exist"]
    names = [original.name for original in originals]
    problems = []
    extra = sorted(set(_binlog_names(copy_dir, names[0] if names else None)) - set(names))
    if extra:
        problems.append(f"{copy_dir} holds binlog files the primary does not have: {extra}")
    listed = indexed_files(copy_dir)
    if listed is not None and listed != names:
        problems.append(f"the index of {copy_dir} lists {listed}, the primary has {names}")
    return problems + copy_differences(originals, copy_dir)


def indexed_files(data_dir: Path) -> list[str] | None:
    """The file names listed in data_dir's binlog.index, in order (None: no index)."""
    index = data_dir / INDEX
    if not index.exists():
        return None
    return [Path(line).name for line in index.read_text().splitlines() if line.strip()]


def _binlog_names(directory: Path, like: str | None) -> list[str]:
    """Names in directory that look like binlog files (the stem of ``like``, a dot, digits)."""
    stem = re.escape(like.rsplit(".", 1)[0]) if like else r"[\w-]+"
    return [path.name for path in directory.iterdir() if re.fullmatch(stem + r"\.\d+", path.name)]
