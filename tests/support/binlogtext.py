"""Committed transactions as the real `mariadb-binlog` tool prints them, independently of the code
under test: `mariadb-binlog --base64-output=decode-rows -vv FILE` (in UTC), its `# at POS` lines,
its event headers (`#YYMMDD HH:MM:SS server id N  end_log_pos M ...`), its `GTID D-S-N` headers
and its `### INSERT INTO`/`### UPDATE`/`### DELETE FROM` row lines, grouped by a small state
machine of its own.

What it models: MariaDB GTID groups (`START TRANSACTION`/`XA START` in the GTID event's text, or
a standalone statement), MySQL groups (an `Ignorable` GTID event, then BEGIN or one statement),
XID / XA PREPARE / COMMIT commits, ROLLBACK, SAVEPOINT, XA END, XA COMMIT (completes an earlier
prepared group, not a transaction of its own). It refuses what it does not model (ROLLBACK TO,
rows outside a group) rather than guess. MySQL GTIDs are not printed by mariadb-binlog (their
events show as `Ignorable`): gtid is None there.
"""

from __future__ import annotations

import calendar
import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from relay.sandbox.mariadb import find_program

_AT = re.compile(r"^# at (\d+)$")
_HEADER = re.compile(r"^#(\d{2})(\d{2})(\d{2}) +(\d{1,2}):(\d{2}):(\d{2}) server id (\d+) +end_log_pos (\d+) +"
                     r"(?:CRC32 0x[0-9a-f]+\s+)?(.*)$")
_GTID = re.compile(r"^GTID (\d+-\d+-\d+)")
_ROW = re.compile(r"^### (INSERT INTO|UPDATE|DELETE FROM) `((?:[^`]|``)+)`\.`((?:[^`]|``)+)`$")
_OPS = {"INSERT INTO": 0, "UPDATE": 1, "DELETE FROM": 2}
_NOT_STATEMENT = re.compile(r"^(SET (TIMESTAMP|@@session|@@SESSION|@)|use |/\*|#|DELIMITER)")


@dataclass(frozen=True)
class TextEvent:
    """One event as mariadb-binlog prints it."""

    pos: int  # its `# at` offset
    end: int  # where the next event starts (the file size for the last one)
    end_log_pos: int  # what the header says (the origin's position in a relay log)
    ts: int  # header time, epoch seconds (printed in UTC)
    server_id: int
    kind: str  # the header's text after end_log_pos/CRC32: "GTID 0-1-5 trans", "Xid = 9", "Query\t..."
    body: tuple[str, ...]  # the lines printed for it, up to the next event

    def statement(self) -> str:
        """A Query event's statement: its text without the session SET lines and delimiters."""
        lines = [line for line in self.body if not _NOT_STATEMENT.match(line)]
        text = "\n".join(lines).strip()
        return text.removesuffix("/*!*/;").strip()


@dataclass(frozen=True)
class TextTransaction:
    gtid: str | None
    server_id: int
    pos: int
    end_pos: int
    first_ts: int
    commit_ts: int
    changes: tuple[tuple[str, str, int, int, int], ...]  # (database, table, inserts, updates, deletes)
    statements: int

    @property
    def size(self) -> int:
        return self.end_pos - self.pos


def decode_rows_text(path: Path) -> str:
    env = {**os.environ, "TZ": "UTC"}  # header times printed in UTC
    result = subprocess.run([find_program("mariadb-binlog"), "--base64-output=decode-rows", "-vv", str(path)],
                            capture_output=True, encoding="utf-8", errors="replace", env=env, timeout=120,
                            check=False)  # its stderr goes into the assertion below
    if result.returncode != 0:
        raise AssertionError(f"mariadb-binlog failed on {path}: {result.stderr[-2000:]}")
    return result.stdout


def text_events(text: str, file_size: int) -> list[TextEvent]:
    """The events of mariadb-binlog's text. Several `# at` lines may come before their
    headers (ANNOTATE_ROWS and TABLE_MAP are printed together): positions are taken in order."""
    positions: list[int] = []
    heads: list[tuple[int, re.Match[str]]] = []
    bodies: list[list[str]] = []
    for line in text.splitlines():
        at = _AT.match(line)
        if at:
            positions.append(int(at.group(1)))
            continue
        head = _HEADER.match(line)
        if head and len(positions) > len(heads):
            heads.append((positions[len(heads)], head))
            bodies.append([])
        elif bodies:
            bodies[-1].append(line)
    assert len(positions) == len(heads), "a `# at` line without its event header"
    out = []
    for i, ((pos, m), body) in enumerate(zip(heads, bodies)):
        yy, mo, dd, hh, mi, ss = (int(g) for g in m.groups()[:6])
        ts = calendar.timegm((2000 + yy, mo, dd, hh, mi, ss))
        end = heads[i + 1][0] if i + 1 < len(heads) else file_size
        out.append(TextEvent(pos, end, int(m.group(8)), ts, int(m.group(7)), m.group(9).strip(), tuple(body)))
    return out


@dataclass
class _Open:
    gtid: str | None
    server_id: int
    pos: int
    first_ts: int
    tables: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    statements: int = 0

    def close(self, commit: TextEvent) -> TextTransaction:
        changes = tuple((db, t, *counts) for (db, t), counts in self.tables.items())
        return TextTransaction(self.gtid, self.server_id, self.pos, commit.end, self.first_ts, commit.ts,
                               changes, self.statements)  # type: ignore[arg-type]


def _unquote(name: str) -> str:
    return name.replace("``", "`")


def transactions_of(events: list[TextEvent]) -> Iterator[TextTransaction]:
    """The committed transactions, in order."""
    open_: _Open | None = None
    start: TextEvent | None = None  # a GTID event (or MySQL's Ignorable one) not yet followed by its group
    standalone = False
    previous: TextEvent | None = None
    for e in events:
        kind = e.kind
        gtid = _GTID.match(kind)
        if gtid:
            open_ = None
            text = "\n".join(e.body)
            standalone = "START TRANSACTION" not in text and "XA START" not in text
            start = None if not standalone else e
            if not standalone:
                open_ = _Open(gtid.group(1), e.server_id, e.pos, e.ts)
        elif kind.startswith("Start:"):  # a FORMAT_DESCRIPTION: the server restarted
            open_, start = None, None
        elif kind.lower().startswith("xid"):  # XID, or XA PREPARE's "XID = X'..'"
            if open_ is not None:
                yield open_.close(e)
            open_ = None
        elif kind.startswith("Query"):
            result = _on_query(e, open_, start, previous)
            if isinstance(result, TextTransaction):
                yield result
                open_ = None
            else:
                open_ = result
            start = None
        elif any(_ROW.match(line) for line in e.body):  # a rows event, whatever its variant's name
            if open_ is None:
                raise NotImplementedError(f"rows outside a group at {e.pos}")
            _count_rows(open_, e)
        previous = e
    # an open group at the end was cut off: not committed


def _on_query(e: TextEvent, open_: _Open | None, start: TextEvent | None,
              previous: TextEvent | None) -> _Open | TextTransaction | None:
    """A Query event: the group it opens, continues or ends (None: discarded), or a
    standalone statement's transaction."""
    text = e.statement()
    upper = text.upper()
    if open_ is not None:
        if upper == "COMMIT":
            return open_.close(e)
        if upper == "ROLLBACK":
            return None
        if upper.startswith("ROLLBACK TO"):
            raise NotImplementedError(f"ROLLBACK TO at {e.pos}")
        if not upper.startswith(("SAVEPOINT", "RELEASE SAVEPOINT", "XA END")):
            open_.statements += 1  # statement-based DML
        return open_
    if start is None and previous is not None and previous.kind == "Ignorable":
        start = previous  # MySQL: its GTID event
    first = start or e
    gtid = _GTID.match(start.kind) if start is not None else None
    group = _Open(gtid.group(1) if gtid else None, first.server_id, first.pos, first.ts)
    if upper == "BEGIN":
        return group
    if upper.startswith(("XA COMMIT", "XA ROLLBACK", "COMMIT", "ROLLBACK")):
        return None  # completes an earlier (prepared) group: no transaction of its own
    return group.close(e)  # a DDL: the statement is the group


def _count_rows(open_: _Open, e: TextEvent) -> None:
    for line in e.body:
        m = _ROW.match(line)
        if m:
            key = (_unquote(m.group(2)), _unquote(m.group(3)))
            open_.tables.setdefault(key, [0, 0, 0])[_OPS[m.group(1)]] += 1


def binlog_transactions(path: Path) -> list[TextTransaction]:
    """mariadb-binlog's reading of one binlog file, as committed transactions."""
    return list(transactions_of(text_events(decode_rows_text(path), path.stat().st_size)))
