"""What the command line and the archive's store client make of bad input: one line naming the
problem and the exit code the README gives, never a traceback, never a secret repeated."""

from __future__ import annotations

import io
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from relay.archive.store import S3Store, StoreAccessError, StoreConfig
from relay.cli import main
from relay.storage.importer import import_binlogs

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "mysql" / "binlog_transaction_previous_GTID_no_tag.000001"
UUID = "3E11FA47-71CA-11E1-9E33-C80AA9429562"


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data_dir holding one (MySQL) binlog file."""
    where = tmp_path_factory.mktemp("search")
    shutil.copyfile(FIXTURE, where / "mysql-bin.000001")
    import_binlogs(where / "data", [where / "mysql-bin.000001"])
    return where / "data"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# --- search --time ------------------------------------------------------------------------------


@pytest.mark.parametrize("moment, problem", [
    ("", "'' is not a time: give 'YYYY-MM-DD HH:MM:SS'"),
    ("@²", "'@²' is not a time: give"),
    ("@99999999999999999999", "is not a time a search takes: it must be from year 1 to 9999"),
    ("@1795962790000000000", "is not a time a search takes"),
    pytest.param("@" + "9" * 5000, "is not a time a search takes", id="@ and 5000 digits"),
    ("@253402300800", "is not a time a search takes"),
    ("9999-12-31 23:59:59-01:00", "is not a time a search takes"),
])
def test_a_time_that_does_not_parse_exits_1_in_one_line(capsys, data_dir, moment, problem):
    code, out, err = _run(capsys, "search", "--data-dir", str(data_dir), "--time", moment)
    assert (code, out) == (1, "")
    assert err.startswith("binlog-relay search: ") and problem in err and err.count("\n") == 1


def test_the_last_second_of_year_9999_is_a_time(capsys, data_dir):
    code, out, _ = _run(capsys, "search", "--data-dir", str(data_dir), "--time", "@253402300799")
    assert code == 0 and '"time": "9999-12-31T23:59:59Z"' in out


# --- search --gtid ------------------------------------------------------------------------------


@pytest.mark.parametrize("gtids, problem", [
    ("", "no GTID given: give MariaDB GTIDs (0-1-100,1-2-5) or a MySQL GTID set"),
    (",", "no GTID given"),
    (" ", "no GTID given"),
    (f"{UUID}:5-3", f"'{UUID}:5-3': interval 5-3 is reversed: give 3-5"),
    (f"{UUID}:0", f"'{UUID}:0': interval 0: MySQL numbers transactions (GNOs) from 1"),
    (f"{UUID}:0-4", "MySQL numbers transactions (GNOs) from 1"),
    (f"{UUID}:1-9223372036854775808", "a GNO is at most 9223372036854775807"),
    (UUID, f"'{UUID}' names no transaction: give its intervals, as {UUID}:1-5"),
    (f"{UUID}:", f"names no transaction: give its intervals, as {UUID}:1-5"),
    ("4294967296-1-5", "GTID 4294967296-1-5: its domain id is over 4294967295"),
    ("0-4294967296-5", "its server id is over 4294967295"),
    ("0-1-18446744073709551616", "its seq_no is over 18446744073709551615"),
    ("0-1-5,0-1-7", "GTIDs 0-1-5 and 0-1-7 are both of domain 0: a search takes one GTID per domain"),
    ("0-1-٣", "is neither MariaDB GTIDs (0-1-100,1-2-5) nor a MySQL GTID set"),
])
def test_gtids_that_name_nothing_searchable_exit_1_saying_why(capsys, data_dir, gtids, problem):
    code, out, err = _run(capsys, "search", "--data-dir", str(data_dir), "--gtid", gtids)
    assert (code, out) == (1, "")
    assert err.startswith("binlog-relay search: ") and problem in err and err.count("\n") == 1


@pytest.mark.parametrize("gtids", ["0-1-5", "0-1-5,1-2-7,", f"{UUID}:1-5:7", f"{UUID}:1-5,{UUID.lower()}:9"])
def test_good_gtids_are_searched(capsys, data_dir, gtids):
    code, out, err = _run(capsys, "search", "--data-dir", str(data_dir), "--gtid", gtids)
    assert (code, err) == (0, "") and out.startswith("{")


# --- hash-password, import, demo ----------------------------------------------------------------


@pytest.mark.parametrize("errors", ["surrogateescape", "strict"])  # a C locale's stdin, and a strict one
def test_a_password_that_is_not_utf8_is_refused(capsys, monkeypatch, errors):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"\xff\xfe\n"), encoding="utf-8", errors=errors))
    assert _run(capsys, "hash-password") == (1, "", "binlog-relay: the password is not UTF-8 text\n")


def test_importing_what_is_not_a_regular_file_says_what_it_is(capsys, tmp_path):
    data = tmp_path / "data"
    assert _run(capsys, "import", "--data-dir", str(data), str(tmp_path)) == (
        1, "", f"binlog-relay import: {tmp_path}: is a directory; nothing was imported\n")
    assert _run(capsys, "import", "--data-dir", str(data), "/dev/null") == (
        1, "", "binlog-relay import: /dev/null: is not a regular file; nothing was imported\n")
    assert _run(capsys, "import", "--data-dir", str(data), str(tmp_path / "nope"))[2].endswith(": no such file; "
                                                                                               "nothing was imported\n")
    assert not data.exists()


@pytest.mark.parametrize("seconds", ["-1", "0", "nan", "inf", "soon"])
def test_demo_seconds_must_be_a_positive_number_before_anything_starts(capsys, monkeypatch, seconds):
    import relay.sandbox.demo

    def started(**_: object) -> int:
        raise AssertionError("the demo started")

    monkeypatch.setattr(relay.sandbox.demo, "run_demo", started)
    with pytest.raises(SystemExit) as exited:
        main(["demo", f"--seconds={seconds}"])
    assert exited.value.code == 2
    assert "argument --seconds: expected a number of seconds" in capsys.readouterr().err


# --- run: which address is taken ----------------------------------------------------------------


def test_the_setting_whose_address_is_taken_is_named(tmp_path: Path):
    """"Address already in use" alone does not say which of the relay's two ports is taken."""
    taken = socket.create_server(("127.0.0.1", 0))
    port = taken.getsockname()[1]
    try:
        for setting, free in (("listen", "metrics"), ("metrics", "listen")):
            config = tmp_path / f"{setting}.yaml"
            config.write_text(yaml.safe_dump({
                "server_id": 1, "data_dir": str(tmp_path / setting), "upstream": {"host": "127.0.0.1", "user": "u"},
                setting: {"host": "127.0.0.1", "port": port}, free: {"host": "127.0.0.1", "port": 0}}))
            run = subprocess.run([sys.executable, "-m", "relay.cli", "run", "--config", str(config)],
                                 capture_output=True, text=True, timeout=60)
            assert run.returncode == 1, run.stderr
            assert f"Address already in use: {setting}.host/{setting}.port 127.0.0.1:{port}" in run.stderr, run.stderr
    finally:
        taken.close()


# --- the archive's store client -----------------------------------------------------------------


@pytest.fixture
def aws_chain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An AWS chain of this test's own: no variables, empty shared files."""
    for variable in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                     "AWS_DEFAULT_PROFILE", "AWS_DEFAULT_REGION", "AWS_REGION"):
        monkeypatch.delenv(variable, raising=False)
    (tmp_path / "config").write_text("")
    (tmp_path / "credentials").write_text("")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return tmp_path


@pytest.mark.parametrize("endpoint, region, problem", [
    ("http://[::1", None, "endpoint URL 'http://[::1': not a URL"),
    ("http://:9000", None, "names no host"),
    ("http://%zz", None, "not a host name or IP address botocore accepts"),
    ("http://host:abc", None, "expected a port from 1 to 65535"),  # else retried for ever, as if unreachable
    ("http://127.0.0.1:-5", None, "expected a port from 1 to 65535"),
    ("http://127.0.0.1:9000", "us east 1", "region 'us east 1': expected letters, digits and '-'"),
])
def test_an_unusable_endpoint_or_region_is_a_store_access_error(aws_chain, endpoint, region, problem):
    with pytest.raises(StoreAccessError) as refused:
        S3Store(StoreConfig("s3://bucket/p", endpoint_url=endpoint, region=region))
    assert str(refused.value).startswith("object store s3://bucket/p/: ") and problem in str(refused.value)


def test_a_password_in_the_endpoint_is_refused_unrepeated(aws_chain):
    with pytest.raises(StoreAccessError) as refused:
        S3Store(StoreConfig("s3://bucket/p", endpoint_url="http://minioadmin:S3cretKey@127.0.0.1:1"))
    assert "must not hold a user name or password" in str(refused.value)
    assert "S3cretKey" not in str(refused.value) and "minioadmin" not in str(refused.value)


def test_an_access_key_without_its_secret_is_a_store_access_error(aws_chain, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLEKEYID")
    with pytest.raises(StoreAccessError) as refused:
        S3Store(StoreConfig("s3://bucket/p", endpoint_url="http://127.0.0.1:1", region="us-east-1"))
    assert str(refused.value) == ("object store s3://bucket/p/ at http://127.0.0.1:1: the AWS configuration: "
                                  "PartialCredentialsError: Partial credentials found in env, missing: "
                                  "AWS_SECRET_ACCESS_KEY")


def test_a_malformed_aws_config_file_is_a_store_access_error(aws_chain):
    (aws_chain / "config").write_text("[default\naws_secret_access_key = S3cretKey\n")
    with pytest.raises(StoreAccessError) as refused:
        S3Store(StoreConfig("s3://bucket/p", region="us-east-1"))
    assert str(refused.value) == (f"object store s3://bucket/p/: the AWS configuration: ConfigParseError: "
                                  f"Unable to parse config file: {aws_chain / 'config'}")


def test_a_region_botocore_refuses_from_the_aws_chain_is_a_store_access_error(aws_chain, monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us east 1")
    with pytest.raises(StoreAccessError, match="InvalidRegionError"):
        S3Store(StoreConfig("s3://bucket/p"))
