"""The command line as an operator uses it: exit codes and messages."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from relay import __version__

GOOD = {
    "server_id": 1001,
    "data_dir": "/tmp/relay-data",
    "upstream": {"host": "127.0.0.1", "port": 3306, "user": "repl", "password": "s3cret-pw"},
}


def _cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "relay.cli", *args], capture_output=True, text=True,
                          input=stdin, timeout=60)


def _with(path: list[str], value: object) -> dict:
    config = yaml.safe_load(yaml.safe_dump(GOOD))
    node = config
    for key in path[:-1]:
        node = node.setdefault(key, {})
    if value is _DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return config


_DELETE = object()

BAD_CONFIGS = [
    ("wrong int", _with(["upstream", "port"], "abc"), "upstream.port: expected an integer, got 'abc'"),
    ("port out of range", _with(["upstream", "port"], 70000), "upstream.port"),
    ("missing server_id", _with(["server_id"], _DELETE), "server_id: required key is missing"),
    ("missing upstream.host", _with(["upstream", "host"], _DELETE), "upstream.host"),
    ("unknown key", _with(["upstream", "pasword"], "x"), "upstream.pasword: unknown key"),
    ("bad sync policy", _with(["storage", "sync"], "always"), "storage.sync"),
    ("bool for int", _with(["server_id"], True), "server_id"),
    ("bad password_hash", _with(["users"], [{"name": "r", "password_hash": "*XYZ"}]), "users[0].password_hash"),
    ("own id ignored", _with(["upstream", "ignore_server_ids"], [1001]), "upstream.ignore_server_ids"),
    ("unreadable password_file", _with(["upstream", "password_file"], "/nonexistent/pw"), "upstream"),
    ("bad retention size", _with(["storage", "retention"], {"max_size": "lots"}), "storage.retention.max_size"),
]


@pytest.mark.parametrize("label,config,expected", BAD_CONFIGS, ids=[c[0] for c in BAD_CONFIGS])
def test_bad_configuration_exits_2_naming_the_key(tmp_path, label, config, expected):
    path = tmp_path / "relay.yaml"
    path.write_text(yaml.safe_dump(config))
    for command in ("check-config", "run"):
        result = _cli(command, "--config", str(path))
        assert result.returncode == 2, (command, result.stderr)
        assert expected in result.stderr
        assert "s3cret-pw" not in result.stderr + result.stdout


def test_yaml_syntax_error_names_the_line(tmp_path):
    path = tmp_path / "relay.yaml"
    path.write_text("server_id: 1\nupstream: [unclosed\n")
    result = _cli("check-config", "--config", str(path))
    assert result.returncode == 2
    assert "relay.yaml:3:1: YAML syntax error" in result.stderr


def test_good_configuration_passes(tmp_path):
    path = tmp_path / "relay.yaml"
    path.write_text(yaml.safe_dump(GOOD))
    result = _cli("check-config", "--config", str(path))
    assert result.returncode == 0, result.stderr
    assert "s3cret-pw" not in result.stdout


def test_example_configuration_is_valid():
    example = Path(__file__).resolve().parents[2] / "config" / "example.yaml"
    assert _cli("check-config", "--config", str(example)).returncode == 0


def test_hash_password_matches_mariadb(primary):
    result = _cli("hash-password", stdin="s3cret-pw\n")
    assert result.returncode == 0
    assert result.stdout.strip() == primary.sql("SELECT PASSWORD('s3cret-pw')")[0][0]


def test_version():
    result = _cli("--version")
    assert result.stdout.strip() == f"binlog-relay {__version__}"


def test_port_in_use_is_a_clear_error(tmp_path):
    import socket

    taken = socket.create_server(("127.0.0.1", 0))
    try:
        config = _with(["data_dir"], str(tmp_path / "data"))
        config["listen"] = {"host": "127.0.0.1", "port": taken.getsockname()[1]}
        config["metrics"] = {"enabled": False}
        path = tmp_path / "relay.yaml"
        path.write_text(yaml.safe_dump(config))
        result = _cli("run", "--config", str(path))
    finally:
        taken.close()
    assert result.returncode == 1
    assert "cannot start" in result.stderr and "in use" in result.stderr
    assert "Traceback" not in result.stderr
