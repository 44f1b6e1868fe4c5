"""Which candidate primary ingest follows (upstream.hosts): each, in order, is logged in to, asked
what a replica must know to choose, and vetted by the decisions of relay/candidates.py; the first
that passes is followed.  Each refusal is logged and counted, and a switch of candidate too."""

from __future__ import annotations

import logging
import time

import trio

from ..candidates import (
    RELAY_VERSION_COMMENT,
    BehindWaits,
    CandidateFacts,
    CandidateRefused,
    check_history,
    check_position_follow,
    check_server_id,
    check_writable,
)
from ..protocol.packets import ProtocolError
from ..storage.gtidindex import GtidIndex
from ..storage.relaylog import RelayLog
from .connection import PrimaryConnection, connect
from .errors import RETRYABLE, NoCandidate, describe
from .settings import UpstreamSettings
from .status import UpstreamStatus

log = logging.getLogger("relay.upstream")


class CandidateChooser:
    def __init__(self, settings: UpstreamSettings, relay_log: RelayLog, status: UpstreamStatus,
                 gtid_index: GtidIndex) -> None:
        self.settings = settings
        self.relay_log = relay_log
        self.status = status
        self._gtid_index = gtid_index
        self._behind_waits = BehindWaits(settings.behind_wait)

    async def choose(self) -> tuple[PrimaryConnection, CandidateFacts]:
        """The first candidate that is a primary the relay may follow; each refusal is logged."""
        reasons = []
        for index, candidate in enumerate(self.settings.all_candidates):
            conn = None
            try:
                conn = await connect(self.settings, candidate)
                facts = await self._vet(conn)
                earlier = [str(c) for c in self.settings.all_candidates[:index]]
                if (waited := self._behind_waits.waiting_for(earlier, time.monotonic())) is not None:
                    raise NoCandidate(f"{candidate} could be followed, but {waited}, before it in upstream.hosts, "
                                      f"is behind and is waited for up to {self.settings.behind_wait:.0f}s")
            except CandidateRefused as refusal:
                self._behind_waits.refused(str(candidate), refusal.reason, time.monotonic())
                self.status.refusals[refusal.reason] = self.status.refusals.get(refusal.reason, 0) + 1
                log.warning("upstream: candidate %s refused (%s): %s", candidate, refusal.reason, refusal)
                reasons.append(f"{candidate}: {refusal.reason}")
            except RETRYABLE as exc:
                if len(self.settings.all_candidates) == 1:  # one primary: its own error, as it is
                    if conn is not None:
                        await trio.aclose_forcefully(conn.stream)
                    raise
                log.warning("upstream: candidate %s: %s", candidate, describe(exc))
                reasons.append(f"{candidate}: {describe(exc)}")
            except BaseException:
                if conn is not None:
                    await trio.aclose_forcefully(conn.stream)
                raise
            else:
                self._behind_waits.accepted(str(candidate))
                break
            if conn is not None:
                await trio.aclose_forcefully(conn.stream)
        else:
            raise NoCandidate("no candidate primary can be followed now: " + "; ".join(reasons))
        if self.status.current is not None and self.status.current != candidate:
            self.status.switches += 1
            log.warning("upstream: switching from %s to %s", self.status.current, candidate)
        self.status.current = candidate
        return conn, facts

    async def _vet(self, conn: PrimaryConnection) -> CandidateFacts:
        greeting = conn.greeting
        server_id = await server_id_of(conn)
        check_server_id(server_id, self.settings.relay_server_id)
        self._check_identity(server_id, greeting.server_version)
        if (len(self.settings.all_candidates) == 1 and self.relay_log.state.own_files_from is None
                and not self.settings.repointed):
            # One upstream, as configured: followed as it is (a chain of relays, a replica on purpose).
            return CandidateFacts(server_id, False, "", False, None)
        facts = await candidate_facts(conn, server_id)
        vet_candidate(facts, self.settings, self.relay_log, self._gtid_index)
        return facts

    def _check_identity(self, server_id: int, version: str) -> None:
        self.status.server_id = server_id
        state = self.relay_log.state
        if state.upstream_server_id != server_id or state.upstream_version != version:
            self.relay_log.remember_upstream(server_id, version)


def vet_candidate(facts: CandidateFacts, settings: UpstreamSettings, relay_log: RelayLog,
                  gtid_index: GtidIndex) -> None:
    """The decisions of relay/candidates.py on a candidate's answers: writable (unless CHANGE MASTER
    chose it: an operator may point the relay at a replica on purpose), holding the stored history,
    and followable by position where MASTER_USE_GTID=no says so."""
    if not settings.repointed:
        check_writable(facts)
    if facts.binlog_state is not None:
        check_history(gtid_index.binlog_state(), facts.binlog_state)
    if settings.use_gtid == "no":
        check_position_follow(facts, relay_log.resume_point().origin_server_id,
                              relay_log.state.own_files_from is not None)


async def candidate_facts(conn: PrimaryConnection, server_id: int) -> CandidateFacts:
    """What a candidate answers about itself (CandidateFacts), on a logged-in connection."""
    rows = await conn.rows("SELECT @@GLOBAL.read_only, @@version_comment")
    read_only, comment = (rows[0] if rows else ("0", ""))
    running = binlog_state = None
    if comment != RELAY_VERSION_COMMENT:  # (SHOW SLAVE STATUS would need SLAVE MONITOR)
        running_rows = await conn.rows("SHOW GLOBAL STATUS LIKE 'Slaves_running'")
        running = running_rows[0][1] if running_rows else None
        if conn.greeting.is_mariadb:
            state_rows = await conn.rows("SELECT @@GLOBAL.gtid_binlog_state")
            binlog_state = (state_rows[0][0] or "") if state_rows else ""
    return CandidateFacts.from_answers(server_id, read_only, comment, running, binlog_state)


async def server_id_of(conn: PrimaryConnection) -> int:
    if conn.greeting.is_mariadb:
        rows = await conn.rows("SHOW VARIABLES LIKE 'server_id'")
        value = rows[0][1] if rows else None
    else:
        rows = await conn.rows("SELECT @@GLOBAL.SERVER_ID")
        value = rows[0][0] if rows else None
    if value is None or not value.isdigit():
        raise ProtocolError("the primary did not report its server_id")
    return int(value)
