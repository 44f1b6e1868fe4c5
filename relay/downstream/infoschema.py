"""The information_schema tables monitoring tools read by default and the relay holds nothing of:
answered empty, with the columns and types MariaDB gives them, so the tool records "nothing there"
instead of a failed collector.  mysqld_exporter's default collectors read the InnoDB compression
tables (the relay has no InnoDB, hence no compressed pages); every other table is refused as before.

    SELECT page_size, compress_ops ... FROM information_schema.innodb_cmp
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..protocol.resultset import TYPE_LONG, TYPE_LONGLONG

ER_BAD_FIELD_ERROR = 1054

# MariaDB 10.11's column types (tests/integration/test_show_status.py compares them)
_L, _LL = TYPE_LONG, TYPE_LONGLONG
_CMP = {"page_size": _L, "compress_ops": _L, "compress_ops_ok": _L, "compress_time": _L, "uncompress_ops": _L,
        "uncompress_time": _L}
_CMPMEM = {"page_size": _L, "buffer_pool_instance": _L, "pages_used": _L, "pages_free": _L,
           "relocation_ops": _LL, "relocation_time": _L}
EMPTY_TABLES: dict[str, dict[str, int]] = {
    "innodb_cmp": _CMP, "innodb_cmp_reset": _CMP, "innodb_cmpmem": _CMPMEM, "innodb_cmpmem_reset": _CMPMEM,
}

_SELECT = re.compile(r"^select\s+(.+?)\s+from\s+`?information_schema`?\s*\.\s*`?(\w+)`?$", re.I | re.S)
_COLUMN = re.compile(r"^`?(\w+)`?$")


@dataclass(frozen=True)
class EmptyTable:
    columns: tuple[str, ...]
    types: tuple[int, ...]


@dataclass(frozen=True)
class UnknownColumn:
    code: int
    message: str
    sqlstate: str = "42S22"


def select(sql: str) -> EmptyTable | UnknownColumn | None:
    """A plain SELECT of columns (or *) from one of EMPTY_TABLES; None for anything else."""
    match = _SELECT.match(" ".join(sql.strip().rstrip(";").split()))
    if not match or match.group(2).lower() not in EMPTY_TABLES:
        return None
    table = EMPTY_TABLES[match.group(2).lower()]
    wanted = [item.strip() for item in match.group(1).split(",")]
    if wanted == ["*"]:
        return EmptyTable(tuple(table), tuple(table.values()))
    names = []
    for item in wanted:
        column = _COLUMN.match(item)
        if not column:
            return None  # an expression: not one of the plain reads answered here
        if column.group(1).lower() not in table:  # in MariaDB 10.11's words
            return UnknownColumn(ER_BAD_FIELD_ERROR, f"Unknown column '{column.group(1)}' in 'SELECT'")
        names.append(column.group(1))
    return EmptyTable(tuple(names), tuple(table[name.lower()] for name in names))
