"""The copy check every mirror test relies on must itself catch differences."""

from relay.sandbox.compare import copy_differences
from relay.storage.files import IN_USE_FLAG_OFFSET
from tests.support.binlogs import MARIADB_MIXED_BINLOG

BINLOG = MARIADB_MIXED_BINLOG.read_bytes()


def _pair(tmp_path, copy: bytes, name: str = "mysql-bin.000001"):
    (tmp_path / "a").mkdir(exist_ok=True)
    (tmp_path / "b").mkdir(exist_ok=True)
    (tmp_path / "a" / name).write_bytes(BINLOG)
    (tmp_path / "b" / name).write_bytes(copy)
    return [tmp_path / "a" / name], tmp_path / "b"


def test_identical_copy(tmp_path):
    assert copy_differences(*_pair(tmp_path, BINLOG)) == []


def test_one_changed_byte_is_found_with_its_offset(tmp_path):
    changed = bytearray(BINLOG)
    changed[1000] ^= 1
    problems = copy_differences(*_pair(tmp_path, bytes(changed)))
    assert len(problems) == 1 and "offset 1000" in problems[0]


def test_shorter_copy_and_missing_copy(tmp_path):
    assert "offset 2000" in copy_differences(*_pair(tmp_path, BINLOG[:2000]))[0]
    originals, copy_dir = _pair(tmp_path, BINLOG)
    (copy_dir / originals[0].name).unlink()
    assert "missing" in copy_differences(originals, copy_dir)[0]


def test_in_use_flag_may_differ_in_the_active_file_only(tmp_path):
    flagged = bytearray(BINLOG)
    flagged[IN_USE_FLAG_OFFSET] ^= 1
    originals, copy_dir = _pair(tmp_path, bytes(flagged))
    assert copy_differences(originals, copy_dir) == []  # the only (so the active) file
    (tmp_path / "a" / "mysql-bin.000002").write_bytes(BINLOG)
    (copy_dir / "mysql-bin.000002").write_bytes(BINLOG)
    problems = copy_differences(originals + [tmp_path / "a" / "mysql-bin.000002"], copy_dir)
    assert len(problems) == 1 and problems[0].startswith("mysql-bin.000001")
