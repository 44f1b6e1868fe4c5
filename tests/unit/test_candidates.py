"""Which candidate primary the relay may follow: writable, and holding the stored history."""

import pytest

from relay.candidates import (
    CandidateFacts,
    CandidateRefused,
    CandidateUnusable,
    check_history,
    check_resume_file,
    check_server_id,
    check_writable,
    cut_short,
    follows_by_position,
    parse_binlog_state,
)

STORED = parse_binlog_state("0-1-100,7-1-15,7-2-5")


def _refusal(candidate: str) -> str | None:
    try:
        check_history(STORED, parse_binlog_state(candidate))
    except CandidateRefused as refused:
        return refused.reason
    return None


@pytest.mark.parametrize("candidate, reason", [
    ("0-1-100,7-1-15,7-2-5", None),               # the same history
    ("0-1-100,0-2-120,7-1-15,7-2-9", None),       # and more, written after it (a promoted replica)
    ("0-1-99,7-1-15,7-2-5", "behind"),            # lacks the relay's last of domain 0
    ("0-1-100,7-1-15", "behind"),                 # never got 7-2-5
    ("", "behind"),
    ("0-1-99,0-2-100,7-1-15,7-2-5", "diverged"),  # another transaction where the relay has 0-1-100
    ("0-2-50,0-1-100,7-1-15,7-2-5", "diverged"),  # an errant transaction among those stored
])
def test_history_of_a_candidate(candidate, reason):
    assert _refusal(candidate) == reason


def test_writable_means_read_only_off_and_not_replicating_unless_a_relay():
    primary = CandidateFacts(2, read_only=False, version_comment="mariadb.org binary distribution",
                             replicating=False, binlog_state=None)
    check_writable(primary)
    for reason, facts in (("read_only", CandidateFacts(2, True, "", False, None)),
                          ("replicating", CandidateFacts(2, False, "", True, None))):
        with pytest.raises(CandidateRefused) as refused:
            check_writable(facts)
        assert refused.value.reason == reason
    check_writable(CandidateFacts(1001, True, "binlog-relay", False, None))


def test_a_behind_candidate_is_waited_for_before_the_ones_after_it():
    from relay.candidates import BehindWaits

    waits = BehindWaits(bound=30)
    waits.refused("db-0:3306", "behind", now=100)
    assert waits.waiting_for(["db-0:3306"], now=120) == "db-0:3306"  # db-1 is not followed yet
    assert waits.waiting_for(["db-0:3306"], now=131) is None  # given up for db-1
    waits.refused("db-0:3306", "behind", now=140)  # still the first refusal that counts
    assert waits.waiting_for(["db-0:3306"], now=141) is None
    waits.accepted("db-0:3306")
    waits.refused("db-0:3306", "behind", now=200)  # a new episode
    assert waits.waiting_for(["db-0:3306"], now=210) == "db-0:3306"
    waits.refused("db-0:3306", "diverged", now=211)  # never worth waiting for
    assert waits.waiting_for(["db-0:3306"], now=212) is None


def test_facts_from_the_answers_of_a_candidate():
    facts = CandidateFacts.from_answers(2, "ON", "mariadb.org binary distribution", "0", "0-1-100")
    assert facts == CandidateFacts(2, True, "mariadb.org binary distribution", False, parse_binlog_state("0-1-100"))
    relay = CandidateFacts.from_answers(1001, "0", "binlog-relay", None, None)
    assert relay.is_relay and not relay.read_only and not relay.replicating and relay.binlog_state is None
    assert CandidateFacts.from_answers(3, None, None, "1", "").replicating
    assert CandidateFacts.from_answers(3, None, None, "1", "").binlog_state == parse_binlog_state("")


def test_a_primary_with_the_relays_server_id_is_never_followed():
    check_server_id(1, 1001)
    with pytest.raises(CandidateUnusable, match="the same as the relay's own server_id"):
        check_server_id(1001, 1001)


def test_by_position_only_from_the_writer_of_the_stored_files_or_a_relay():
    primary = CandidateFacts(1, False, "", False, parse_binlog_state("0-1-100"))
    promoted = CandidateFacts(2, False, "", False, parse_binlog_state("0-1-100"))
    assert follows_by_position(primary, 1) and follows_by_position(promoted, None)
    assert not follows_by_position(promoted, 1)
    assert follows_by_position(CandidateFacts(1001, True, "binlog-relay", False, None), 1)
    assert follows_by_position(CandidateFacts(2, False, "", False, None), 1)  # no GTID state: by position


def test_the_primarys_files_against_the_stored_ones():
    sizes = {"mysql-bin.000001": 1000, "mysql-bin.000002": 500}
    check_resume_file(sizes, "mysql-bin.000002", 500)
    with pytest.raises(CandidateUnusable, match="no longer has mysql-bin.000003"):
        check_resume_file(sizes, "mysql-bin.000003", 4)
    with pytest.raises(CandidateUnusable, match="shorter than the 600 bytes the relay stored"):
        check_resume_file(sizes, "mysql-bin.000002", 600)
    assert not cut_short("mysql-bin.000001", 1000, 1000)
    assert cut_short("mysql-bin.000001", 700, 1000)  # fetched again
    with pytest.raises(CandidateUnusable, match="the stored copy 1200: refusing to mix"):
        cut_short("mysql-bin.000001", 1200, 1000)
