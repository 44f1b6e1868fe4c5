"""Which stored binlog files may go: the pure decisions of relay/storage/retention.py, on hand-made
StoredFile lists (no disk, no clock)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relay.storage.retention import (
    RetentionPolicy,
    StoredFile,
    files_before,
    files_modified_before,
    files_to_purge,
    purgeable,
)

NOW = 1_000_000.0


def _files(*specs: tuple[int, float]) -> list[StoredFile]:
    """(size, seconds before NOW of the last write) per file, oldest first; named mysql-bin.000001..."""
    return [StoredFile(f"mysql-bin.{i:06d}", size, NOW - age) for i, (size, age) in enumerate(specs, start=1)]


def _names(files: list[StoredFile], *numbers: int) -> list[str]:
    return [files[n - 1].name for n in numbers]


def _policy(max_size: int | None = None, max_age: float | None = None, min_files: int = 1) -> RetentionPolicy:
    return RetentionPolicy(max_size, max_age, min_files)


# ------------------------------------------------------------------ purgeable


def test_purgeable_is_everything_but_the_active_file():
    files = _files((10, 50), (10, 40), (10, 30))
    assert purgeable(files, None) == files[:2]


def test_purgeable_stops_before_the_oldest_file_in_use():
    files = _files((10, 50), (10, 40), (10, 30), (10, 20), (10, 10))
    assert purgeable(files, 2) == files[:2]
    assert purgeable(files, 0) == []  # a dump reads the oldest file: nothing may go
    assert purgeable(files, 4) == files[:4]  # the dump reads the active file
    assert purgeable(files, 7) == files[:4]  # an index past the end still spares the active file


@pytest.mark.parametrize("count", [0, 1])
def test_purgeable_with_at_most_one_file_is_empty(count):
    files = _files(*[(10, 5)] * count)
    assert purgeable(files, None) == []
    assert purgeable(files, 0) == []


# ------------------------------------------------------------------ files_to_purge: max_size


def test_size_limit_purges_the_oldest_until_the_total_fits():
    files = _files((100, 50), (100, 40), (100, 30), (100, 20), (100, 10))  # 500 bytes
    chosen = files_to_purge(files, _policy(max_size=250), None, NOW)
    assert chosen == _names(files, 1, 2, 3)  # 500 -> 400 -> 300 -> 200 <= 250
    kept = sum(f.size for f in files if f.name not in chosen)
    assert kept <= 250


def test_size_limit_counts_unequal_sizes_oldest_first():
    files = _files((1000, 50), (10, 40), (10, 30), (10, 20))  # 1030 bytes
    assert files_to_purge(files, _policy(max_size=100), None, NOW) == _names(files, 1)  # 30 bytes left


def test_a_total_equal_to_max_size_is_within_the_limit():
    files = _files((100, 50), (100, 40), (100, 30))
    assert files_to_purge(files, _policy(max_size=300), None, NOW) == []
    assert files_to_purge(files, _policy(max_size=299), None, NOW) == _names(files, 1)


def test_size_limit_never_takes_the_active_file():
    files = _files((100, 50), (100, 40), (5000, 1))  # the active file alone is over the limit
    assert files_to_purge(files, _policy(max_size=10), None, NOW) == _names(files, 1, 2)
    single = _files((5000, 1000))
    assert files_to_purge(single, _policy(max_size=10, max_age=1), None, NOW) == []


def test_no_limits_purge_nothing():
    files = _files((10**9, 10**6), (10**9, 10**6), (1, 0))
    assert files_to_purge(files, _policy(), None, NOW) == []


def test_empty_list():
    assert files_to_purge([], _policy(max_size=1, max_age=1), None, NOW) == []


# ------------------------------------------------------------------ files_to_purge: max_age


def test_age_limit_purges_files_whose_last_write_is_older():
    files = _files((10, 200), (10, 150), (10, 100), (10, 50), (10, 1))
    assert files_to_purge(files, _policy(max_age=100), None, NOW) == _names(files, 1, 2)  # 100 is not > 100
    assert files_to_purge(files, _policy(max_age=99.5), None, NOW) == _names(files, 1, 2, 3)


def test_age_limit_never_takes_the_active_file_however_old():
    files = _files((10, 9000), (10, 8000), (10, 7000))
    assert files_to_purge(files, _policy(max_age=1), None, NOW) == _names(files, 1, 2)


def test_age_limit_goes_oldest_first_and_stops_at_the_first_file_that_may_stay():
    # a younger file before an older one (mtimes out of order): the older one waits its turn
    files = _files((10, 500), (10, 5), (10, 500), (10, 1))
    assert files_to_purge(files, _policy(max_age=100), None, NOW) == _names(files, 1)


def test_either_limit_is_enough():
    files = _files((100, 500), (100, 5), (100, 4), (100, 1))
    # file 1 goes (400 bytes > 350); then 300 bytes fit and file 2 is young: it stays
    assert files_to_purge(files, _policy(max_size=350, max_age=100), None, NOW) == _names(files, 1)
    # the size limit takes files the age limit would keep
    assert files_to_purge(files, _policy(max_size=150, max_age=100), None, NOW) == _names(files, 1, 2, 3)


# ------------------------------------------------------------------ files_to_purge: min_files


def test_min_files_keeps_the_newest_files():
    files = _files((100, 500), (100, 400), (100, 300), (100, 200), (100, 100))
    assert files_to_purge(files, _policy(max_age=1, min_files=3), None, NOW) == _names(files, 1, 2)
    assert files_to_purge(files, _policy(max_size=1, min_files=3), None, NOW) == _names(files, 1, 2)
    assert files_to_purge(files, _policy(max_size=1, min_files=5), None, NOW) == []
    assert files_to_purge(files, _policy(max_size=1, min_files=9), None, NOW) == []


def test_min_files_one_still_spares_the_active_file():
    files = _files((100, 500), (100, 400))
    assert files_to_purge(files, _policy(max_size=1, min_files=1), None, NOW) == _names(files, 1)


# ------------------------------------------------------------------ files_to_purge: files in use


def test_files_in_use_and_after_are_never_purged():
    files = _files((100, 500), (100, 400), (100, 300), (100, 200), (100, 100))
    policy = _policy(max_size=1, max_age=1)
    assert files_to_purge(files, policy, 2, NOW) == _names(files, 1, 2)
    assert files_to_purge(files, policy, 0, NOW) == []
    assert files_to_purge(files, policy, 1, NOW) == _names(files, 1)


def test_in_use_and_min_files_together_take_the_stricter():
    files = _files((100, 500), (100, 400), (100, 300), (100, 200), (100, 100))
    assert files_to_purge(files, _policy(max_size=1, min_files=4), 3, NOW) == _names(files, 1)  # min_files
    assert files_to_purge(files, _policy(max_size=1, min_files=2), 1, NOW) == _names(files, 1)  # in use


# ------------------------------------------------------------------ properties


@st.composite
def _cases(draw):
    count = draw(st.integers(0, 12))
    files = _files(*[(draw(st.integers(0, 1000)), draw(st.floats(0, 1000))) for _ in range(count)])
    policy = _policy(draw(st.none() | st.integers(0, 5000)), draw(st.none() | st.floats(0.5, 1000)),
                     draw(st.integers(1, 6)))
    in_use = draw(st.none() | st.integers(0, max(0, count)))
    return files, policy, in_use


@settings(max_examples=400, deadline=None)
@given(_cases())
def test_files_to_purge_properties(case):
    files, policy, in_use = case
    chosen = files_to_purge(files, policy, in_use, NOW)
    names = [f.name for f in files]
    assert chosen == names[: len(chosen)], "only a prefix of the oldest files"
    assert len(chosen) <= max(0, len(files) - 1), "never the active file"
    assert len(files) - len(chosen) >= min(policy.min_files, len(files)), "min_files kept"
    if in_use is not None:
        assert len(chosen) <= in_use, "never a file at or after the oldest in use"
    running = sum(f.size for f in files)
    for gone in files[: len(chosen)]:  # each purged file was over a limit when its turn came
        assert (policy.max_size is not None and running > policy.max_size) or (
            policy.max_age is not None and NOW - gone.modified > policy.max_age), gone
        running -= gone.size
    # stopping early: either the next file may stay, or a rule forbids taking it
    limit = min(len(purgeable(files, in_use)), max(0, len(files) - policy.min_files))
    if len(chosen) < limit:
        nxt = files[len(chosen)]
        too_big = policy.max_size is not None and running > policy.max_size
        too_old = policy.max_age is not None and NOW - nxt.modified > policy.max_age
        assert not (too_big or too_old), "stopped although the next file was over a limit"


# ------------------------------------------------------------------ PURGE BINARY LOGS TO / BEFORE


def test_files_before_a_target_are_the_older_ones():
    files = _files((10, 50), (10, 40), (10, 30), (10, 20))
    assert files_before(files, files[0].name) == []
    assert files_before(files, files[2].name) == _names(files, 1, 2)
    assert files_before(files, files[3].name) == _names(files, 1, 2, 3)


def test_files_before_an_unknown_target_raises():
    # RetentionKeeper.purge_to checks the name first (ER_UNKNOWN_TARGET_BINLOG); the function alone raises
    with pytest.raises(ValueError):
        files_before(_files((10, 50)), "mysql-bin.000999")


def test_files_modified_before_a_moment():
    files = _files((10, 500), (10, 400), (10, 300), (10, 200))
    assert files_modified_before(files, NOW - 350) == _names(files, 1, 2)
    assert files_modified_before(files, NOW - 400) == _names(files, 1)  # modified == moment stays
    assert files_modified_before(files, NOW - 1000) == []


def test_files_modified_before_never_includes_the_active_file():
    files = _files((10, 500), (10, 400), (10, 300))
    assert files_modified_before(files, NOW + 86400) == _names(files, 1, 2)
    assert files_modified_before(files[:1], NOW + 86400) == []
    assert files_modified_before([], NOW) == []


def test_files_modified_before_stops_at_the_first_newer_file():
    files = _files((10, 500), (10, 10), (10, 400), (10, 1))
    assert files_modified_before(files, NOW - 100) == _names(files, 1)
