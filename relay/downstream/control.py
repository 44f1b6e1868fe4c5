"""STOP/START SLAVE, CHANGE MASTER TO and RESET SLAVE on the relay: a query handler like
``purge.PurgeHandler``, whose statements act on ingest (relay/upstream.py, through ``UpstreamControl``),
so that a failover manager repoints the relay as it repoints a replica.

The answers are MariaDB's: ER_SPECIFIC_ACCESS_DENIED_ERROR for a user without ``admin`` (the
privileges MariaDB names), warnings 1255/1254 for a STOP/START that finds ingest as asked, and
ER_SLAVE_MUST_STOP for CHANGE MASTER TO or RESET SLAVE while ingest runs.  Statements run one at a
time: a CHANGE MASTER TO vetting its upstream is never overtaken by a START SLAVE.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import trio

from ..ingest.repoint import UpstreamRefused
from ..ingest.settings import EffectiveUpstream, UpstreamChange
from ..ingest.status import UpstreamStatus
from ..protocol.codes import (
    ER_NOT_SUPPORTED_YET,
    ER_SLAVE_MUST_STOP,
    ER_SLAVE_WAS_NOT_RUNNING,
    ER_SLAVE_WAS_RUNNING,
    ER_SPECIFIC_ACCESS_DENIED_ERROR,
    ER_WRONG_ARGUMENTS,
    ER_WRONG_STRING_LENGTH,
)
from .controlsql import ChangeMaster, ControlStatement, ResetSlave, StartSlave, StopSlave, parse_control
from .queries import Error, Ok, Reply

log = logging.getLogger(__name__)

# The privileges MariaDB 10.11 asks for (sql_parse.cc): REPLICATION SLAVE ADMIN for STOP/START SLAVE
# and CHANGE MASTER, RELOAD for RESET SLAVE.
_DENIED = "Access denied; you need (at least one of) the {} privilege(s) for this operation"
_SLAVE_ADMIN, _RELOAD = "SUPER, REPLICATION SLAVE ADMIN", "RELOAD"
_MUST_STOP = "This operation cannot be performed as you have a running slave ''; run STOP SLAVE '' first"
# MariaDB's limits on CHANGE MASTER's strings (HOSTNAME_LENGTH, USERNAME_CHAR_LENGTH, the password's)
_MAX_LENGTHS = {"host": ("MASTER_HOST", 255), "user": ("MASTER_USER", 128), "password": ("MASTER_PASSWORD", 96)}


class UpstreamControl(Protocol):
    """What the statements act on (relay/upstream.py Upstream)."""

    status: UpstreamStatus

    async def stop(self) -> None: ...

    def start(self) -> None: ...

    async def change_master(self, change: UpstreamChange) -> EffectiveUpstream: ...

    def reset_slave(self) -> None: ...

    def effective(self) -> EffectiveUpstream: ...


@dataclass
class ControlHandler:
    upstream: UpstreamControl
    is_admin: Callable[[str], bool]
    _one_at_a_time: trio.Lock = field(default_factory=trio.Lock)

    async def answer(self, sql: str, user: str) -> Reply | None:
        """The reply to a control statement run by ``user``; None if ``sql`` is not one."""
        statement = parse_control(sql)
        if statement is None or isinstance(statement, Error):
            return statement
        if not self.is_admin(user):
            needed = _RELOAD if isinstance(statement, ResetSlave) else _SLAVE_ADMIN
            return Error(ER_SPECIFIC_ACCESS_DENIED_ERROR, _DENIED.format(needed), "42000")
        if statement.unsupported:
            return Error(ER_NOT_SUPPORTED_YET, "binlog-relay does not support " + "; ".join(statement.unsupported),
                         "42000")
        async with self._one_at_a_time:
            return await self._run(statement, user)

    async def _run(self, statement: ControlStatement, user: str) -> Reply:
        stopped = self.upstream.status.stopped
        if isinstance(statement, StopSlave):
            if stopped:
                return Ok(warnings=(("Note", ER_SLAVE_WAS_NOT_RUNNING, "Slave already has been stopped"),))
            log.info("user %s: STOP SLAVE", user)
            await self.upstream.stop()
            return Ok()
        if isinstance(statement, StartSlave):
            if not stopped:
                return Ok(warnings=(("Note", ER_SLAVE_WAS_RUNNING, "Slave is already running"),))
            log.info("user %s: START SLAVE: following %s", user, self.upstream.effective())
            self.upstream.start()
            return Ok()
        if not stopped:
            return Error(ER_SLAVE_MUST_STOP, _MUST_STOP)
        if isinstance(statement, ResetSlave):
            log.info("user %s: RESET SLAVE%s", user, " ALL" if statement.all else "")
            self.upstream.reset_slave()
            return Ok()
        return await self._change_master(statement, user)

    async def _change_master(self, statement: ChangeMaster, user: str) -> Reply:
        change = statement.change
        wrong = _wrong_arguments(change)
        if wrong is not None:
            return wrong
        before = self.upstream.effective()
        try:
            after = await self.upstream.change_master(change)
        except UpstreamRefused as refusal:
            log.warning("user %s: CHANGE MASTER TO refused, still following %s: %s", user, before, refusal)
            return Error(refusal.code, f"{refusal}; the relay keeps its upstream {before.host}:{before.port}",
                         refusal.sqlstate)
        log.info("user %s: CHANGE MASTER TO %s (was %s)", user, after, before)
        return Ok()


def _wrong_arguments(change: UpstreamChange) -> Error | None:
    """MariaDB's checks of CHANGE MASTER's values (sql_repl.cc change_master), and a port the relay can
    connect to (MariaDB takes any number and fails to connect later)."""
    if change.host is not None and not change.host:
        return Error(ER_WRONG_ARGUMENTS, "Incorrect arguments to MASTER_HOST")
    if change.port is not None and not 0 < change.port < 65536:
        return Error(ER_WRONG_ARGUMENTS, "Incorrect arguments to MASTER_PORT")
    for key, (option, limit) in _MAX_LENGTHS.items():
        value = getattr(change, key)
        if value is not None and len(value) > limit:
            shown = "***" if key == "password" else value if len(value) <= 70 else value[:67] + "..."
            return Error(ER_WRONG_STRING_LENGTH, f"String '{shown}' is too long for {option} "
                         f"(should be no longer than {limit})")
    return None
