"""Which candidate primary the relay may replicate from (upstream.hosts): the decisions, without
I/O.  The upstream shell asks each candidate a few questions and hands the answers here.

A candidate must be a writable primary (read_only off and not itself replicating) or a
binlog-relay, and its history must contain everything the relay stored: a candidate that lacks
some of it is *behind* (it may catch up: try again later), one that has other transactions where
the relay has its own is *diverged* (it never will).
"""

from __future__ import annotations

from dataclasses import dataclass

from .binlog.gtid import BinlogState, Gtid

RELAY_VERSION_COMMENT = "binlog-relay"  # what a relay answers to @@version_comment


class CandidateRefused(Exception):
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
    """Every GTID the relay stored must be in the candidate's binlog: the last seq_no of each
    (domain, server_id) at least as high there.  Where it is lower, the candidate is behind, unless
    its domain already went past that seq_no with another server's transactions: diverged."""
    for gtid in stored.gtid_list():
        have = candidate.seq_of(gtid.domain_id, gtid.server_id)
        if have is not None and have >= gtid.seq_no:
            continue
        last = candidate.last(gtid.domain_id)
        if last is not None and last.seq_no >= gtid.seq_no:
            raise CandidateRefused("diverged", f"it lacks {gtid}, which the relay stored, but has {last} in "
                                               "that domain: its history diverged; it can never be followed")
        raise CandidateRefused("behind", f"it lacks {gtid}, which the relay stored (it has "
                                         f"{_named(gtid.domain_id, gtid.server_id, have)}): it is behind")


def parse_binlog_state(text: str) -> BinlogState:
    """@@gtid_binlog_state, 'D-S-N,D-S-N,...' with one entry per domain and server_id."""
    state = BinlogState()
    for part in filter(None, (p.strip() for p in text.split(","))):
        domain, server, seq = (int(n) for n in part.split("-"))
        state.update(Gtid(domain, server, seq))
    return state


def _named(domain: int, server: int, seq: int | None) -> str:
    return f"{domain}-{server}-{seq}" if seq is not None else f"nothing of server_id {server} in domain {domain}"
