"""PURGE BINARY LOGS TO 'file' / BEFORE 'datetime': a query handler like ``queries.answer``, the
one whose answer changes the stored files (through ``storage.retention``)."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..protocol.codes import ER_SPECIFIC_ACCESS_DENIED_ERROR, ER_WRONG_VALUE
from ..storage.retention import PurgeRefused, RetentionKeeper
from .queries import Error, Ok, Reply

log = logging.getLogger(__name__)

_PURGE = re.compile(r"^purge\s+(?:binary|master)\s+logs\s+(to|before)\s+'([^']*)'$", re.I)


@dataclass(frozen=True)
class PurgeRequest:
    to_file: str | None = None
    before: float | None = None  # a Unix time


def parse_purge(sql: str) -> PurgeRequest | Error | None:
    """PURGE BINARY LOGS TO 'file' / BEFORE 'YYYY-MM-DD hh:mm:ss' (server local time); None if
    the statement is something else."""
    match = _PURGE.match(" ".join(sql.strip().rstrip(";").split()))
    if not match:
        return None
    kind, argument = match.group(1).lower(), match.group(2)
    if kind == "to":
        return PurgeRequest(to_file=argument)
    for fmt in ("%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d"):
        try:
            return PurgeRequest(before=time.mktime(time.strptime(argument, fmt)))
        except ValueError:
            continue
    return Error(ER_WRONG_VALUE, f"Incorrect datetime value: '{argument}' for function purge", "HY000")


@dataclass(frozen=True)
class PurgeHandler:
    retention: RetentionKeeper
    is_admin: Callable[[str], bool]

    def answer(self, sql: str, user: str) -> Reply | None:
        """The reply to a PURGE statement run by ``user``; None if ``sql`` is not one."""
        request = parse_purge(sql)
        if request is None or isinstance(request, Error):
            return request
        if not self.is_admin(user):
            return Error(ER_SPECIFIC_ACCESS_DENIED_ERROR, "Access denied; you need (at least one of) the SUPER, "
                         "BINLOG ADMIN privilege(s) for this operation", "42000")
        try:
            if request.to_file is not None:
                purged = self.retention.purge_to(request.to_file)
            else:
                purged = self.retention.purge_before(request.before or 0.0)
        except PurgeRefused as refusal:
            return Error(refusal.code, str(refusal))
        log.info("user %s purged %d binlog files", user, len(purged))
        return Ok()
