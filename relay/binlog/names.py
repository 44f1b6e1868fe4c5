"""The one rule for binlog file names: a base name, a dot and a number of six digits or more
(mysql-bin.000042), as MySQL and MariaDB write them; the number orders the files."""

from __future__ import annotations

import re

BINLOG_NAME = r"[A-Za-z0-9_.-]+\.[0-9]{6,}"
_BINLOG_NAME = re.compile(BINLOG_NAME)


def valid_binlog_name(name: str) -> bool:
    return _BINLOG_NAME.fullmatch(name) is not None


def file_number(name: str) -> int | None:
    """mysql-bin.000042 -> 42 (None for a name that is not a binlog file's)."""
    base, _, number = name.rpartition(".")
    return int(number) if base and number.isdigit() else None


def next_file_name(name: str) -> str:
    """mysql-bin.000009 -> mysql-bin.000010, keeping the width (and growing it past 999999)."""
    base, _, number = name.rpartition(".")
    if not (base and number.isdigit()):
        raise ValueError(f"cannot name the file after {name!r}: its name does not end in a number")
    return f"{base}.{int(number) + 1:0{len(number)}d}"
