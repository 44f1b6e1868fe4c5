"""The binlog index file, in the primary's format: one "./<name>" line per file."""

from __future__ import annotations

from pathlib import Path

from ..binlog.names import valid_binlog_name
from .files import DataDirError, atomic_write

INDEX_NAME = "binlog.index"


def read_index(data_dir: Path) -> list[str]:
    path = data_dir / INDEX_NAME
    if not path.exists():
        return []
    names = []
    for line_no, line in enumerate(path.read_text("utf-8").splitlines(), 1):
        if not line.strip():
            break  # the server stops at the first empty line too
        name = Path(line.strip()).name
        if not valid_binlog_name(name):
            raise DataDirError(f"{path}:{line_no}: {line!r} is not a binlog file name")
        names.append(name)
    return names


def write_index(data_dir: Path, names: list[str], use_reserve: bool = False) -> None:
    """``use_reserve``: for a purge, the write that frees space (files.atomic_write)."""
    atomic_write(data_dir / INDEX_NAME, "".join(f"./{name}\n" for name in names).encode("utf-8"),
                 use_reserve=use_reserve)
