"""Committed transactions from a binlog: one Transaction per committed group (sans-IO).

    decoder = TransactionDecoder("mysql-bin.000007", partial(iter_events, binlog))
    for offset, event in iter_events(binlog, 4, end):    # whole events, in file order
        for txn in decoder.feed(offset, event):
            ...                     # Transaction(file, pos, end_pos, gtid, server_id, ..., changes)

    for txn in relay.pipeline.read.iter_transactions("/data/mysql-bin.000007"): ...

The pipeline's "transactions" view. Drizzle's replication design delivers a transaction
envelope: a Transaction message whose TransactionContext carries the server id, the
transaction id and the start and end timestamps, with the statements inside. This is that
envelope - GTID, server id, where the group lies in the file, the header times of its first
and its commit event - with, in place of the statements, how many rows each table had
inserted, updated and deleted.

It is the change view (relay.rows.changes) summed per transaction, by construction: the
same decoder finds the groups, commits, rollbacks, savepoints and filters and decodes the
rows of a committed group in bounded memory; only what a committed group turns into differs.

* A table's inserts/updates/deletes are its change rows of each op, ``statements`` the
  rows with op ``"statement"`` (statement-based DML, which cannot be counted in rows).
  Tables come in the order their first counted row has in the transaction.
* Without ``tables`` every committed group is a transaction: a DDL one has no changes, and
  so has a group whose events all went (e.g. undone by ``ROLLBACK TO``). With ``tables`` a
  transaction is there only when the change view has a row of it: a change to a selected
  table, a statement naming one, or a DDL naming one (TableFilter's heuristic); its
  changes hold the selected tables only. ``with_ddl=False`` leaves out DDL transactions.
* Never a group that ends in ROLLBACK or is cut off before its commit; groups in the
  order of the binlog.

Positions: ``pos`` is the offset of the group's first event (a GTID event, or BEGIN
without GTIDs), ``end_pos`` the offset right after its commit event (XID, COMMIT, XA
PREPARE, the DDL statement; for a MySQL compressed transaction the end of its
TRANSACTION_PAYLOAD event), so ``size`` is the group's bytes in the binlog and
``end_pos`` is where a reader resumes after it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import chain
from typing import TYPE_CHECKING, Any

from .changes import NO_CHANGES, Change, ChangeDecoder, _Group, _header_time

__all__ = ["TableChanges", "Transaction", "TransactionDecoder"]

_OPS = ("insert", "update", "delete")  # the order of TableChanges' counts
_OP_INDEX = {op: i for i, op in enumerate(_OPS)}


@dataclass(frozen=True, slots=True)
class TableChanges:
    """The row changes of one table in one transaction (rows, not rows events)."""

    database: str
    table: str
    inserts: int
    updates: int
    deletes: int


@dataclass(frozen=True, slots=True)
class Transaction:
    """One committed group: its envelope and its row changes per table."""

    file: str
    pos: int  # offset of the group's first event (GTID, or BEGIN) in file
    end_pos: int  # offset right after its commit event
    gtid: str | None  # MariaDB 'domain-server-seq' or MySQL 'uuid:gno'; None without GTIDs
    server_id: int
    first_ts: int  # header timestamp (epoch seconds) of the group's first event
    commit_ts: int  # header timestamp (epoch seconds) of its commit event
    changes: tuple[TableChanges, ...]  # per table, in the order tables first appear
    statements: int  # statement-based DML statements (not counted in changes)

    @property
    def size(self) -> int:
        """The transaction's bytes in the binlog file."""
        return self.end_pos - self.pos


class _Tally:
    """Rows per table and op, in the order tables first appear, and statements."""

    __slots__ = ("statements", "tables")

    def __init__(self) -> None:
        # (database, table) -> [inserts, updates, deletes]; rows changes always name both
        self.tables: dict[tuple[Any, Any], list[int]] = {}
        self.statements = 0

    def add(self, batch: list[Change]) -> None:
        # ChangeDecoder._batches gives one list per event: the rows of one rows event (one
        # table, one op) or one statement, so a batch is counted by its first change.
        first = batch[0]
        if first.op == "statement":
            self.statements += len(batch)
            return
        key = (first.database, first.table)
        counts = self.tables.get(key)
        if counts is None:
            counts = self.tables[key] = [0, 0, 0]
        counts[_OP_INDEX[first.op]] += len(batch)

    @property
    def empty(self) -> bool:
        return not self.tables and not self.statements

    def changes(self) -> tuple[TableChanges, ...]:
        return tuple(TableChanges(db, table, *counts) for (db, table), counts in self.tables.items())


class TransactionDecoder(ChangeDecoder):
    """ChangeDecoder's groups, each committed one as a Transaction instead of change rows.

    Same arguments and use (see ChangeDecoder): feed whole events of one binlog file in
    order; ``feed`` returns the transactions committed by that event (at most two: rows
    outside any transaction, committed by the statement that follows them, and that
    statement).
    """

    if TYPE_CHECKING:  # the inherited feed, typed for this decoder's output
        def feed(self, offset: int, event: bytes | memoryview) -> Iterator[Transaction]: ...  # type: ignore[override]

    def _replay(self, group: _Group, end: int, commit_event: bytes | memoryview) -> Iterator[Transaction]:  # type: ignore[override]
        """The group, committed by commit_event (ending at end), as one Transaction: its rows
        counted per rows event as the change view decodes them (so the two views agree)."""
        commit_ts = _header_time(commit_event)
        records = group.mem if group.span is None else chain(self._reread(group), group.mem)
        tally = _Tally()
        for batch in self._batches(group, records, commit_ts):  # one rows event decoded at a time
            if batch:
                tally.add(batch)
        if self.tables and tally.empty:
            return NO_CHANGES  # nothing of the selected tables: the change view has no row of it
        return iter((Transaction(self.file, group.txn_pos, end, group.gtid, group.server_id, group.first_ts,
                                 commit_ts, tally.changes(), tally.statements),))

    def _standalone(self, pending: tuple[str | None, int, bool, int] | None, offset: int,
                    event: bytes | memoryview, database: str | None, query: str) -> Transaction:
        """A DDL group (the filters have passed it): no row changes."""
        return Transaction(self.file, pending[1] if pending else offset, self._end_of(offset, event),
                           pending[0] if pending else None, int.from_bytes(event[5:9], "little"),
                           pending[3] if pending else _header_time(event), _header_time(event), (), 0)
