"""Which candidate primary the relay may replicate from (upstream.hosts): the decisions, without
I/O.  The upstream shell asks each candidate a few questions and hands the answers here.

A candidate must be a writable primary (read_only off and not itself replicating) or a
binlog-relay, and its history must contain everything the relay stored: a candidate that lacks
some of it is *behind* (it may catch up: try again later), one that has other transactions where
the relay has its own is *diverged* (it never will).  A candidate whose server_id is the relay's own,
or whose binlog files are not the stored ones where the relay follows it by file and position, can
never be followed as it is: ingest stops (``CandidateUnusable``).
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import FatalError, RetryableError
from .gtid.gtid import BinlogState, Gtid
from .replication.stream import MIXED_HISTORIES

RELAY_VERSION_COMMENT = "binlog-relay"  # what a relay answers to @@version_comment


class CandidateRefused(RetryableError):
    """Not a primary to replicate from, now; ``reason`` is the metric label."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class CandidateUnusable(FatalError):
    """Never a primary the relay can follow as it is (its server_id is the relay's, its binlogs are
    another history): ingest stops, an operator must act."""


@dataclass(frozen=True)
class CandidateFacts:
    """What a candidate answered: @@server_id, @@read_only, @@version_comment, whether a replica
    thread of its own runs (SHOW SLAVE STATUS), and @@gtid_binlog_state (MariaDB)."""

    server_id: int
    read_only: bool
    version_comment: str
    replicating: bool
    binlog_state: BinlogState | None

    @classmethod
    def from_answers(cls, server_id: int, read_only: str | None, version_comment: str | None,
                     slaves_running: str | None, binlog_state: str | None) -> CandidateFacts:
        """From the text of its answers (None: NULL, no row, or not asked; no binlog state: not a MariaDB
        primary, or a relay)."""
        return cls(server_id, str(read_only).upper() in ("1", "ON"), version_comment or "",
                   (slaves_running or "0") != "0",
                   parse_binlog_state(binlog_state) if binlog_state is not None else None)

    @property
    def is_relay(self) -> bool:
        return self.version_comment == RELAY_VERSION_COMMENT


def check_server_id(server_id: int, relay_server_id: int) -> None:
    """The upstream's own server_id only has to differ from the relay's.  It need not be the one
    that wrote the stored history: a relay of the primary, or a sibling relay, serves the same
    history under its own id; the history check is on the events (their writer and bytes at
    the resume point, see IngestStream) and on the file sizes (check_resume_file, cut_short)."""
    if server_id == relay_server_id:
        raise CandidateUnusable(
            f"the primary's server_id is {server_id}, the same as the relay's own server_id; "
            "give the relay a server_id no other server uses")


def follows_by_position(facts: CandidateFacts, origin_server_id: int | None) -> bool:
    """File/position resume keeps the primary's coordinates: only from the server that wrote the
    stored files (``origin_server_id``), or a relay serving them; any other primary is followed by GTID."""
    return (origin_server_id is None or facts.server_id == origin_server_id or facts.is_relay
            or facts.binlog_state is None)


def check_position_follow(facts: CandidateFacts, origin_server_id: int | None, own_files: bool) -> None:
    """MASTER_USE_GTID=no: the relay may follow only by file and position, which needs the stored
    files' own coordinates (no file of the relay's own yet) from a server that serves them."""
    if own_files:
        raise CandidateRefused("position", "MASTER_USE_GTID=no, but the relay's newest files are its own "
                                           "(since a change of primary): it can continue only by GTID")
    if not follows_by_position(facts, origin_server_id):
        raise CandidateRefused("position", f"MASTER_USE_GTID=no, but server_id {facts.server_id} did not write "
                                           f"the stored files (server_id {origin_server_id} did): it can be "
                                           "followed only by GTID (MASTER_USE_GTID=slave_pos)")


def check_resume_file(primary_sizes: dict[str, int], resume_file: str, position: int) -> None:
    """The primary (its binlogs and their sizes, SHOW BINARY LOGS) must still hold the file ingest
    resumes, at least as long as what the relay stored of it."""
    if resume_file not in primary_sizes:
        raise CandidateUnusable(
            f"the primary no longer has {resume_file}, where the relay must resume at {position} "
            f"(purged before the relay fetched it, or {MIXED_HISTORIES})")
    if primary_sizes[resume_file] < position:
        raise CandidateUnusable(
            f"the primary's {resume_file} is {primary_sizes[resume_file]} bytes, shorter than the "
            f"{position} bytes the relay stored: {MIXED_HISTORIES}")


def cut_short(name: str, stored_size: int, primary_size: int) -> bool:
    """A closed file both sides have must be the same size.  A stored one that is shorter was cut
    short (a power cut with storage.sync: none): True, it is fetched again if it is a prefix of the
    primary's (storage/repair.py).  A longer one is another history."""
    if stored_size < primary_size:  # cut short here, or another history: the re-fetch tells
        return True
    if primary_size != stored_size:
        raise CandidateUnusable(f"the primary's {name} is {primary_size} bytes, the stored copy "
                                f"{stored_size}: {MIXED_HISTORIES}")
    return False


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
