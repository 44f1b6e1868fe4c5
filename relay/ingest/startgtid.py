"""upstream.start.gtid: a fresh data_dir begins with the primary's binlog file that holds a GTID,
stored whole from its first event (so it is a byte copy of the primary's, decision 1).

The file is the last one whose start state (its GTID_LIST, which ``BINLOG_GTID_POS(file, 4)``
gives as a position) does not include the GTID yet: the next one's start includes it, or there is no
next one.  Start states only grow along the files, so the files are searched by halves: a few
queries, however many files the primary keeps.  MariaDB primaries only (MySQL has no GTID of that form).
"""

from __future__ import annotations

import logging

from ..gtid.gtid import Gtid, parse_gtid_position
from .connection import PrimaryConnection
from .errors import FatalIngestError

log = logging.getLogger("relay.upstream")  # one logger for the upstream side, as before its split


def includes(position: dict[int, Gtid], gtid: Gtid) -> bool:
    """Whether a GTID position (the last GTID per domain) has reached ``gtid``: in its domain, a
    seq_no at least ``gtid``'s (seq_nos grow along a domain's history)."""
    reached = position.get(gtid.domain_id)
    return reached is not None and reached.seq_no >= gtid.seq_no


async def file_holding(conn: PrimaryConnection, files: list[str], text: str) -> str:
    """The primary's file (of ``files``, its SHOW BINARY LOGS in order) that holds the GTID ``text``."""
    if not conn.greeting.is_mariadb:
        raise FatalIngestError(f"upstream.start.gtid ({text}) needs a MariaDB primary; give upstream.start.file")
    gtid = next(iter(parse_gtid_position(text).values()))

    async def start_includes(index: int) -> bool:
        rows = await conn.rows(f"SELECT BINLOG_GTID_POS('{files[index]}', 4)")
        return includes(parse_gtid_position(rows[0][0] or "") if rows else {}, gtid)

    low, high = 0, len(files)  # the first file whose start includes the GTID is in [low, high]
    while low < high:
        middle = (low + high) // 2
        if await start_includes(middle):
            high = middle
        else:
            low = middle + 1
    if low == 0:
        raise FatalIngestError(f"upstream.start.gtid: the primary's first binlog, {files[0]}, already starts after "
                               f"{gtid}: the file that held it is purged")
    if low == len(files):
        rows = await conn.rows("SELECT @@GLOBAL.gtid_binlog_pos")
        if not includes(parse_gtid_position(rows[0][0] or "") if rows else {}, gtid):
            raise FatalIngestError(f"upstream.start.gtid: the primary has not logged {gtid} yet")
    log.info("upstream: upstream.start.gtid %s is in the primary's %s: storing it from its start", gtid,
             files[low - 1])
    return files[low - 1]
