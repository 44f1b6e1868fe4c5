"""Is a directory of binlog files a byte copy of the primary's?  (docs/architecture.md, decision 1: `cmp`
against the primary's files is the test.)  Used by the demo's verdict, the tests and the
benchmarks, so all of them judge a copy by the same rule."""

from __future__ import annotations

from pathlib import Path

from ..binlog.events import BINLOG_MAGIC, FLAGS_OFFSET, LOG_EVENT_BINLOG_IN_USE_F

IN_USE_FLAG_OFFSET = len(BINLOG_MAGIC) + FLAGS_OFFSET  # the first event (the FDE) starts at 4
_BLOCK = 8 << 20


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


def first_difference(original: Path, copy: Path, active: bool) -> int | None:
    """The first offset where the files differ (None if they do not), reading in large blocks."""
    with open(original, "rb") as left, open(copy, "rb") as right:
        offset = 0
        while True:
            a, b = left.read(_BLOCK), right.read(_BLOCK)
            if active and offset == 0:
                a, b = _without_in_use_flag(a), _without_in_use_flag(b)
            if a != b:
                return offset + next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            if not a:
                return None
            offset += len(a)


def _without_in_use_flag(block: bytes) -> bytes:
    if len(block) <= IN_USE_FLAG_OFFSET:
        return block
    raw = bytearray(block)
    raw[IN_USE_FLAG_OFFSET] &= ~LOG_EVENT_BINLOG_IN_USE_F & 0xFF
    return bytes(raw)
