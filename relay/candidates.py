"""Which candidate primary the relay may replicate from (upstream.hosts): the decisions, without
I/O.  The upstream shell asks each candidate a few questions and hands the answers here.

A candidate must be a writable primary (read_only off and not itself replicating) or a
binlog-relay, and its history must contain everything the relay stored: a candidate that lacks
some of it is *behind* (it may catch up: try again later), one that has other transactions where
the relay has its own is *diverged* (it never will).
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import RetryableError
from .gtid.gtid import BinlogState, Gtid

RELAY_VERSION_COMMENT = "binlog-relay"  # what a relay answers to @@version_comment


class CandidateRefused(RetryableError):
    """Not a primary to replicate from, now; ``reason`` is the metric label."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class CandidateFacts:
    """What a candidate answered: @@server_id, @@read_only, @@version_comment, whether a replica
    thread of its own runs (SHOW SLAVE STATUS), and @@gtid_binlog_state (MariaDB)."""

    server_id: int
    read_only: bool
    version_comment: str
    replicating: bool
    binlog_state: BinlogState | None

    @property
    def is_relay(self) -> bool:
        return self.version_comment == RELAY_VERSION_COMMENT


def check_writable(facts: CandidateFacts) -> None:
    if facts.is_relay:
        return  # a relay serves its primary's history read-only; the history check decides
    if facts.replicating:
        raise CandidateRefused("replicating", f"server_id {facts.server_id} is itself a replica (its replica "
                                              "threads run): not promoted yet")
    if facts.read_only:
        raise CandidateRefused("read_only", f"server_id {facts.server_id} has read_only on: not a primary")


def check_history(stored: BinlogState, candidate: BinlogState) -> None:
    """The candidate must have no transaction of its own among those the relay stored: a GTID the
    relay lacks with a seq_no the relay's domain already reached (an errant transaction, or another
    primary's) is *diverged*.  And every GTID the relay stored must be in the candidate's binlog
    (the last seq_no of each domain and server_id at least as high): else it is *behind*."""
    for gtid in candidate.gtid_list():
        reached = stored.last(gtid.domain_id)
        mine = stored.seq_of(gtid.domain_id, gtid.server_id)
        if reached is not None and gtid.seq_no <= reached.seq_no and (mine is None or mine < gtid.seq_no):
            raise CandidateRefused("diverged", f"it has {gtid}, which the relay never stored, where the relay "
                                               f"already has {reached}: an errant transaction or another "
                                               "history; it can never be followed")
    for gtid in stored.gtid_list():
        have = candidate.seq_of(gtid.domain_id, gtid.server_id)
        if have is None or have < gtid.seq_no:
            have_text = f"{gtid.domain_id}-{gtid.server_id}-{have}" if have is not None else \
                f"nothing of server_id {gtid.server_id} in domain {gtid.domain_id}"
            raise CandidateRefused("behind", f"it lacks {gtid}, which the relay stored (it has {have_text}): "
                                             "it is behind; tried again later")


class BehindWaits:
    """upstream.behind_wait: a candidate refused as behind is preferred to the candidates after it
    for that long from its first refusal (it may be catching up, as in a lossless promotion), and
    then given up for them."""

    def __init__(self, bound: float) -> None:
        self.bound = bound
        self._since: dict[str, float] = {}

    def refused(self, candidate: str, reason: str, now: float) -> None:
        if reason == "behind":
            self._since.setdefault(candidate, now)
        else:
            self._since.pop(candidate, None)

    def accepted(self, candidate: str) -> None:
        self._since.pop(candidate, None)

    def waiting_for(self, before: list[str], now: float) -> str | None:
        """The first of ``before`` (candidates earlier in order) still within its wait."""
        return next((c for c in before if c in self._since and now - self._since[c] < self.bound), None)


def parse_binlog_state(text: str) -> BinlogState:
    """@@gtid_binlog_state, 'D-S-N,D-S-N,...' with one entry per domain and server_id."""
    state = BinlogState()
    for part in filter(None, (p.strip() for p in text.split(","))):
        domain, server, seq = (int(n) for n in part.split("-"))
        state.update(Gtid(domain, server, seq))
    return state
