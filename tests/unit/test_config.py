"""relay.config: loading, defaults, error messages, environment overrides, secrets."""

import base64
import copy
import dataclasses
import hashlib
import os
import pathlib
import re

import pytest
import yaml

from relay.config import (
    Config,
    ConfigError,
    ListenConfig,
    Secret,
    UpstreamConfig,
    UserConfig,
    iter_options,
    load_config,
    native_password_hash,
    parse_config,
)
from relay.protocol import ed25519

REPO = pathlib.Path(__file__).resolve().parents[2]
UPSTREAM_PASSWORD = "up-S3cret-pw"
USER_PASSWORD = "us3r-S3cret-pw"


def minimal() -> dict:
    return {
        "server_id": 1001,
        "data_dir": "/var/lib/relay",
        "upstream": {"host": "db1", "user": "repl", "password": UPSTREAM_PASSWORD},
    }


def with_(base: dict, path: str, value: object) -> dict:
    """``base`` with the key at dotted ``path`` set (sections created as needed)."""
    data = copy.deepcopy(base)
    *sections, key = path.split(".")
    node = data
    for name in sections:
        node = node.setdefault(name, {})
    node[key] = value
    return data


def errors_of(data: object, environ: dict | None = None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(data, environ or {})
    assert str(info.value) == "\n".join(info.value.errors)
    return info.value.errors


def write(tmp_path: pathlib.Path, text: str, name: str = "relay.yaml") -> pathlib.Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# --- valid configurations -------------------------------------------------------------------


def test_minimal_config_gets_defaults():
    config = parse_config(minimal(), {})
    assert config.server_id == 1001
    assert config.data_dir == "/var/lib/relay"
    up = config.upstream
    assert (up.host, up.port, up.user) == ("db1", 3306, "repl")
    assert up.password == Secret(UPSTREAM_PASSWORD) and up.password.reveal() == UPSTREAM_PASSWORD
    assert up.password_file is None and up.start is None
    assert up.ignore_server_ids == ()
    assert up.heartbeat_period == 15.0 and isinstance(up.heartbeat_period, float)
    assert up.connect_timeout == 10.0
    assert (up.reconnect.initial_delay, up.reconnect.max_delay) == (0.5, 30.0)
    assert (up.ssl.mode, up.ssl.ca, up.ssl.cert, up.ssl.key) == ("disabled", None, None, None)
    assert config.listen == ListenConfig()
    assert (config.listen.host, config.listen.port, config.listen.max_connections) == ("0.0.0.0", 3306, 1000)
    assert config.listen.handshake_timeout == 10.0
    assert (config.listen.ssl.cert, config.listen.ssl.key, config.listen.ssl.require) == (None, None, False)
    assert config.users == ()
    assert (config.metrics.host, config.metrics.port, config.metrics.enabled) == ("0.0.0.0", 9104, True)
    assert (config.storage.sync, config.storage.sync_interval_ms) == ("commit", 100)
    retention = config.storage.retention
    assert (retention.max_size, retention.max_age, retention.min_files) == (None, None, 2)
    assert (config.logging.level, config.logging.format) == ("INFO", "text")


def test_no_password_means_empty_password():
    data = minimal()
    del data["upstream"]["password"]
    assert parse_config(data, {}).upstream.password.reveal() == ""


def test_example_yaml_loads_every_key():
    config = load_config(REPO / "config" / "example.yaml", {})
    assert config.upstream.start.file == "mysql-bin.000001" and config.upstream.start.position == 4
    assert config.storage.retention.max_size == 10 * 2**30
    assert config.storage.retention.max_age == 7 * 86400
    assert [(user.name, user.admin) for user in config.users] == [("repl", False), ("replica2", False), ("dba", True)]
    # Every documented key appears in the example.
    text = (REPO / "config" / "example.yaml").read_text()
    for option in iter_options():
        key = option.path.rsplit(".", 1)[-1]
        assert f"{key}:" in text, option.path


def test_demo_yaml_loads():
    config = load_config(REPO / "config" / "demo.yaml", {})
    assert config.users[0].name == "repl"


def test_full_config_types(tmp_path):
    path = write(tmp_path, """
server_id: 4294967295
data_dir: /data
upstream:
  host: primary.example
  port: 3307
  user: repl
  password: pw
  start: {file: mariadb-bin.000042, position: 4}
  ignore_server_ids: [7, 8]
  heartbeat_period: 2
  connect_timeout: 1.5
  reconnect: {initial_delay: 1, max_delay: 1}
  ssl: {mode: verify_identity, ca: /ca.pem, cert: /c.pem, key: /k.pem}
listen:
  host: 127.0.0.1
  port: 0
  max_connections: 5
  handshake_timeout: 3
  ssl: {cert: /s.pem, key: /s.key, require: true}
users:
  - {name: a, password: pa}
  - {name: b, password_hash: "*14e65567abdb5135d0cfd9a70b3032c179a49ee7"}
metrics: {host: 127.0.0.1, port: 9999, enabled: false}
storage:
  sync: interval
  sync_interval_ms: 250
  retention: {max_size: 512M, max_age: 1h30m, min_files: 1}
logging: {level: debug, format: json}
""")
    config = load_config(path, {})
    assert isinstance(config, Config)
    up = config.upstream
    assert up.start.file == "mariadb-bin.000042" and up.start.position == 4
    assert up.ignore_server_ids == (7, 8) and isinstance(up.ignore_server_ids, tuple)
    assert up.heartbeat_period == 2.0 and isinstance(up.heartbeat_period, float)
    assert up.ssl.mode == "verify_identity" and up.ssl.ca == "/ca.pem"
    assert config.listen.port == 0 and config.listen.ssl.require is True
    assert isinstance(config.users, tuple)
    assert config.users[1].password_hash == "*14E65567ABDB5135D0CFD9A70B3032C179A49EE7"
    assert config.metrics.enabled is False
    assert config.storage.sync == "interval" and config.storage.sync_interval_ms == 250
    assert config.storage.retention.max_size == 512 * 2**20
    assert config.storage.retention.max_age == 5400
    assert config.logging.level == "DEBUG" and config.logging.format == "json"


def test_dataclasses_are_frozen():
    config = parse_config(minimal(), {})
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.server_id = 2  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.upstream.port = 1  # type: ignore[misc]


@pytest.mark.parametrize("text, expected", [
    ("100K", 100 * 1024), ("512M", 512 * 2**20), ("10G", 10 * 2**30), ("1T", 2**40),
    ("10GB", 10 * 2**30), ("10GiB", 10 * 2**30), ("1.5G", 3 * 2**29), ("10g", 10 * 2**30), ("100B", 100),
    (123456, 123456),
])
def test_sizes(text, expected):
    data = with_(minimal(), "storage.retention.max_size", text)
    assert parse_config(data, {}).storage.retention.max_size == expected


@pytest.mark.parametrize("text, expected", [
    ("45s", 45), ("30m", 1800), ("12h", 43200), ("7d", 604800), ("2w", 1209600), ("1h30m", 5400), (90, 90),
])
def test_durations(text, expected):
    data = with_(minimal(), "storage.retention.max_age", text)
    assert parse_config(data, {}).storage.retention.max_age == expected


# --- bad configurations: each error names the key path ---------------------------------------


@pytest.mark.parametrize("path, value, expected", [
    # unknown keys, with a suggestion where one is close
    ("upstream.pasword", "x", "upstream.pasword: unknown key (did you mean 'password'?)"),
    ("storage.retention.max_sise", 1, "storage.retention.max_sise: unknown key (did you mean 'max_size'?)"),
    ("colour", "blue", "colour: unknown key"),
    # wrong types
    ("upstream.port", "abc", "upstream.port: expected an integer, got 'abc'"),
    ("upstream.port", "3306", "upstream.port: expected an integer, got '3306'"),
    ("upstream.port", True, "upstream.port: expected an integer, got true"),
    ("upstream.port", 3306.0, "upstream.port: expected an integer, got 3306.0"),
    ("upstream.host", 42, "upstream.host: expected a string, got 42"),
    ("upstream.host", "", "upstream.host: must not be empty"),
    ("listen.ssl.require", "yes", "listen.ssl.require: expected true or false, got 'yes'"),
    ("metrics.enabled", 1, "metrics.enabled: expected true or false, got 1"),
    ("upstream.heartbeat_period", "fast", "upstream.heartbeat_period: expected a number of seconds, got 'fast'"),
    ("upstream.heartbeat_period", 0, "upstream.heartbeat_period: must be a number greater than 0, got 0"),
    ("upstream.heartbeat_period", 5e6, "upstream.heartbeat_period: must be at most 4294967, got 5000000.0"),
    ("upstream.ignore_server_ids", 5, "upstream.ignore_server_ids: expected a list, got 5"),
    ("upstream.ignore_server_ids", [1, "two"], "upstream.ignore_server_ids[1]: expected an integer, got 'two'"),
    ("listen", [1], "listen: expected a mapping, got a list"),
    ("users", {"name": "x"}, "users: expected a list, got a mapping"),
    # ranges
    ("upstream.port", 70000, "upstream.port: must be between 1 and 65535, got 70000"),
    ("upstream.port", 0, "upstream.port: must be between 1 and 65535, got 0"),
    ("server_id", 0, "server_id: must be between 1 and 4294967295, got 0"),
    ("server_id", 2**32, "server_id: must be between 1 and 4294967295, got 4294967296"),
    ("listen.max_connections", 0, "listen.max_connections: must be at least 1, got 0"),
    ("upstream.start", {"file": "mysql-bin.000001", "position": 3},
     "upstream.start.position: must be between 4 and 4, got 3"),
    # enums
    ("storage.sync", "always", "storage.sync: expected one of commit, interval, none, got 'always'"),
    ("upstream.ssl.mode", "on", "upstream.ssl.mode: expected one of disabled, preferred, required, "
                                "verify_ca, verify_identity, got 'on'"),
    ("logging.level", "verbose", "logging.level: expected one of DEBUG, INFO, WARNING, ERROR, got 'verbose'"),
    # sizes and durations
    ("storage.retention.max_size", "10X", "storage.retention.max_size: expected a size like 10G, 512M, "
                                          "100K or a number of bytes, got '10X'"),
    ("storage.retention.max_size", 0, "storage.retention.max_size: must be greater than 0, got 0"),
    ("storage.retention.max_age", "7 days", "storage.retention.max_age: expected a duration like 7d, 12h, "
                                            "30m, 45s or a number of seconds, got '7 days'"),
    ("storage.retention.max_age", "90", "storage.retention.max_age: expected a duration like 7d, 12h, "
                                        "30m, 45s or a number of seconds, got '90'"),
    # binlog names
    ("upstream.start", {"file": "mysql-bin.1"}, "upstream.start.file: expected a binlog file name like "
                                                "'mysql-bin.000001', got 'mysql-bin.1'"),
    ("upstream.start", {"position": 4}, "upstream.start.file: required key is missing (or give gtid, a MariaDB "
     "GTID to start at)"),
    ("upstream.start", {"file": "mysql-bin.000001", "gtid": "0-1-5"}, "upstream.start.gtid: give file or gtid, "
     "not both"),
    ("upstream.start", {"gtid": "0-1"}, "upstream.start.gtid: expected a MariaDB GTID like '0-1-42', got '0-1'"),
    # cross-key rules
    ("upstream.reconnect", {"initial_delay": 5, "max_delay": 1},
     "upstream.reconnect.max_delay: must be at least initial_delay (5.0), got 1.0"),
    ("upstream.ssl", {"mode": "verify_ca"}, "upstream.ssl.ca: required when mode is verify_ca"),
    ("upstream.ssl", {"mode": "verify_identity"}, "upstream.ssl.ca: required when mode is verify_identity"),
    ("upstream.ssl", {"cert": "/c.pem"}, "upstream.ssl.key: required when cert is given"),
    ("listen.ssl", {"key": "/k.pem"}, "listen.ssl.cert: required when key is given"),
    ("listen.ssl", {"require": True}, "listen.ssl.require: needs cert and key"),
    ("upstream.ignore_server_ids", [5, 1001],
     "upstream.ignore_server_ids: contains server_id 1001, the relay's own id"),
])
def test_bad_value_names_key_path(path, value, expected):
    assert errors_of(with_(minimal(), path, value)) == [expected]


def test_missing_required_keys():
    assert errors_of({"upstream": {"host": "h"}}) == [
        "server_id: required key is missing",
        "data_dir: required key is missing",
        "upstream.user: required key is missing",
    ]
    assert errors_of({"server_id": 1, "data_dir": "/d"}) == ["upstream: required key is missing"]
    assert errors_of({"server_id": None, "data_dir": "/d", "upstream": {"host": "h", "user": "u"}}) == [
        "server_id: required key has no value",
    ]


def test_all_errors_reported_in_one_pass():
    data = minimal()
    data["upstream"]["port"] = "abc"
    data["storage"] = {"sync": "always"}
    data["listen"] = {"prot": 1}
    del data["server_id"]
    assert errors_of(data) == [
        "server_id: required key is missing",
        "upstream.port: expected an integer, got 'abc'",
        "listen.prot: unknown key (did you mean 'port'?)",
        "storage.sync: expected one of commit, interval, none, got 'always'",
    ]


def test_non_string_keys_are_errors():
    assert errors_of(with_(minimal(), "listen", {1: 2})) == ["listen: keys must be strings, got 1"]


BAD_HASH = ("expected '*' followed by 40 hex digits (the form PASSWORD() returns), or the 43 base64 characters "
            "of an ed25519 public key (what mysql.user keeps for ed25519)")


@pytest.mark.parametrize("user, expected", [
    ({"name": "r", "password": "p", "password_hash": "*" + "0" * 40},
     "users[0]: give one of password, password_hash and password_file, not password and password_hash"),
    ({"name": "r"}, "users[0]: give password, password_hash or password_file"),
    ({"password": "p"}, "users[0].name: required key is missing"),
    ({"name": "r", "password_hash": "14E65567ABDB5135D0CFD9A70B3032C179A49EE7"},
     "users[0].password_hash: " + BAD_HASH),
    ({"name": "r", "password_hash": "*14E65567ABDB5135D0CFD9A70B3032C179A49EEZ"},
     "users[0].password_hash: " + BAD_HASH),
    # 43 base64 characters, but not a point of the curve: no password has this public key
    ({"name": "r", "password_hash": "A" * 42 + "E"}, "users[0].password_hash: " + BAD_HASH),
    ({"name": "r", "password": "p", "passwd_hash": "x"},
     "users[0].passwd_hash: unknown key (did you mean 'password_hash'?)"),
    ("repl", "users[0]: expected a mapping, got 'repl'"),
])
def test_bad_users(user, expected):
    assert errors_of(with_(minimal(), "users", [user])) == [expected]


def test_duplicate_user():
    users = [{"name": "repl", "password": "a"}, {"name": "repl", "password": "b"}, {"name": "x", "password": "c"}]
    assert errors_of(with_(minimal(), "users", users)) == ["users[1].name: duplicate user 'repl'"]


def test_both_password_and_password_file(tmp_path):
    data = with_(minimal(), "upstream.password_file", str(write(tmp_path, "pw\n", "pw")))
    assert errors_of(data) == ["upstream: give either password or password_file, not both"]


def test_unreadable_password_file(tmp_path):
    data = minimal()
    del data["upstream"]["password"]
    missing = str(tmp_path / "nope")
    data["upstream"]["password_file"] = missing
    assert errors_of(data) == [f"upstream.password_file: cannot read {missing!r}: No such file or directory"]
    data["upstream"]["password_file"] = str(tmp_path)
    assert errors_of(data) == [f"upstream.password_file: cannot read {str(tmp_path)!r}: Is a directory"]


def test_password_file_not_utf8_does_not_show_content(tmp_path):
    path = tmp_path / "pw"
    path.write_bytes(b"caf\xe9-" + UPSTREAM_PASSWORD.encode())
    data = with_(minimal(), "upstream.password_file", str(path))
    del data["upstream"]["password"]
    (message,) = errors_of(data)
    assert message.startswith("upstream.password_file: ") and "not UTF-8" in message
    assert UPSTREAM_PASSWORD not in message


# --- files ---------------------------------------------------------------------------------


def test_yaml_syntax_error_names_file_line_and_column(tmp_path):
    path = write(tmp_path, f"server_id: 1\nupstream:\n  password: {UPSTREAM_PASSWORD}\n  host: [db1\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, {})
    (message,) = info.value.errors
    assert message.startswith(f"{path}:5:1: YAML syntax error: ")
    assert UPSTREAM_PASSWORD not in message  # the offending text is not quoted


def test_file_that_is_not_text(tmp_path):
    path = tmp_path / "binary.yaml"
    path.write_bytes(b"server_id: 1\ndata_dir: \xff\xfe\n")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}: not valid text at byte 23: "):
        load_config(path, {})


def test_several_yaml_documents(tmp_path):
    path = write(tmp_path, "server_id: 1\n---\nserver_id: 2\n")
    with pytest.raises(ConfigError, match="relay.yaml:2:1: YAML syntax error: expected a single document"):
        load_config(path, {})


def test_yaml_bad_indentation(tmp_path):
    path = write(tmp_path, "server_id: 1\n  data_dir: /x\n")
    with pytest.raises(ConfigError, match=r"relay\.yaml:2:11: YAML syntax error: mapping values are not allowed"):
        load_config(path, {})


@pytest.mark.parametrize("text, got", [
    ("- a\n- b\n", "a list"), ("just a string\n", "'just a string'"), ("", "an empty document"),
    ("# only comments\n", "an empty document"),
])
def test_top_level_not_a_mapping(tmp_path, text, got):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path, {})
    assert info.value.errors == [f"{path}: expected a mapping at the top level, got {got}"]


def test_parse_config_top_level_not_a_mapping():
    assert errors_of([1, 2]) == ["<string>: expected a mapping at the top level, got a list"]


def test_missing_file(tmp_path):
    path = tmp_path / "absent.yaml"
    with pytest.raises(ConfigError) as info:
        load_config(path, {})
    assert info.value.errors == [f"{path}: file not found"]


def test_duplicate_yaml_key(tmp_path):
    path = write(tmp_path, "server_id: 1\ndata_dir: /d\nupstream: {host: h, user: u}\nserver_id: 2\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, {})
    assert info.value.errors == [f"{path}:4:1: duplicate key 'server_id'"]


def test_merge_keys_are_not_duplicates(tmp_path):
    path = write(tmp_path, """
server_id: 1
data_dir: /d
upstream: &up {host: h, user: u, port: 3306}
listen:
  <<: {host: 127.0.0.1, port: 1}
  port: 3310
""")
    assert load_config(path, {}).listen.port == 3310


def test_password_file_trailing_newline_stripped(tmp_path):
    data = minimal()
    del data["upstream"]["password"]
    for content, expected in [("pw\n", "pw"), ("pw\r\n", "pw"), ("pw\n\n", "pw\n"), ("pw", "pw"), (" pw \n", " pw ")]:
        path = write(tmp_path, content, "pw")
        data["upstream"]["password_file"] = str(path)
        upstream = parse_config(data, {}).upstream
        assert upstream.password.reveal() == expected
        assert upstream.password_file == str(path)


# --- environment overrides -----------------------------------------------------------------


def test_env_overrides_int_string_nested_and_bool():
    config = parse_config(minimal(), {
        "BINLOG_RELAY_SERVER_ID": "77",
        "BINLOG_RELAY_UPSTREAM_HOST": "db2",
        "BINLOG_RELAY_LISTEN_PORT": "3310",
        "BINLOG_RELAY_STORAGE_SYNC": "none",
        "BINLOG_RELAY_STORAGE_RETENTION_MAX_SIZE": "2G",
        "BINLOG_RELAY_UPSTREAM_RECONNECT_MAX_DELAY": "60",
        "BINLOG_RELAY_LISTEN_SSL_REQUIRE": "false",
        "BINLOG_RELAY_LOGGING_LEVEL": "warning",
        "PATH": "/usr/bin",  # other variables are none of our business
    })
    assert config.server_id == 77
    assert config.upstream.host == "db2"
    assert config.listen.port == 3310
    assert config.storage.sync == "none"
    assert config.storage.retention.max_size == 2 * 2**30
    assert config.upstream.reconnect.max_delay == 60.0
    assert config.listen.ssl.require is False
    assert config.logging.level == "WARNING"


def test_env_creates_missing_sections():
    data = {"server_id": 1, "data_dir": "/d"}
    config = parse_config(data, {
        "BINLOG_RELAY_UPSTREAM_HOST": "db", "BINLOG_RELAY_UPSTREAM_USER": "u",
        "BINLOG_RELAY_UPSTREAM_START_FILE": "mysql-bin.000003",
    })
    assert config.upstream.host == "db" and config.upstream.start.file == "mysql-bin.000003"
    assert config.upstream.start.position == 4
    assert data == {"server_id": 1, "data_dir": "/d"}  # the caller's data is not modified


def test_env_string_keys_keep_their_text():
    config = parse_config(minimal(), {"BINLOG_RELAY_UPSTREAM_PASSWORD": "0123", "BINLOG_RELAY_UPSTREAM_USER": "true"})
    assert config.upstream.password.reveal() == "0123" and config.upstream.user == "true"


def test_env_list_is_comma_separated():
    assert parse_config(minimal(), {"BINLOG_RELAY_UPSTREAM_IGNORE_SERVER_IDS": "5, 6,7"}).upstream.ignore_server_ids \
        == (5, 6, 7)
    data = with_(minimal(), "upstream.ignore_server_ids", [9])
    assert parse_config(data, {"BINLOG_RELAY_UPSTREAM_IGNORE_SERVER_IDS": ""}).upstream.ignore_server_ids == ()


def test_env_empty_value_means_null():
    data = with_(minimal(), "storage.retention.max_size", "1G")
    assert parse_config(data, {"BINLOG_RELAY_STORAGE_RETENTION_MAX_SIZE": ""}).storage.retention.max_size is None


def test_env_password_replaces_password_file(tmp_path):
    data = minimal()
    del data["upstream"]["password"]
    data["upstream"]["password_file"] = str(tmp_path / "does-not-exist")
    config = parse_config(data, {"BINLOG_RELAY_UPSTREAM_PASSWORD": "from-env"})
    assert config.upstream.password.reveal() == "from-env" and config.upstream.password_file is None


def test_env_password_file_replaces_password(tmp_path):
    path = write(tmp_path, "from-file\n", "pw")
    config = parse_config(minimal(), {"BINLOG_RELAY_UPSTREAM_PASSWORD_FILE": str(path)})
    assert config.upstream.password.reveal() == "from-file"


def test_env_password_and_password_file_together_conflict(tmp_path):
    path = write(tmp_path, "from-file\n", "pw")
    env = {"BINLOG_RELAY_UPSTREAM_PASSWORD_FILE": str(path), "BINLOG_RELAY_UPSTREAM_PASSWORD": "x"}
    assert errors_of(minimal(), env) == ["upstream: give either password or password_file, not both"]


@pytest.mark.parametrize("variable, value, expected", [
    ("BINLOG_RELAY_LISTEN_PORT", "abc",
     "listen.port (from BINLOG_RELAY_LISTEN_PORT): expected an integer, got 'abc'"),
    ("BINLOG_RELAY_SERVER_ID", "1.5",
     "server_id (from BINLOG_RELAY_SERVER_ID): expected an integer, got 1.5"),
    ("BINLOG_RELAY_STORAGE_SYNC", "always",
     "storage.sync (from BINLOG_RELAY_STORAGE_SYNC): expected one of commit, interval, none, got 'always'"),
    ("BINLOG_RELAY_UPSTREAM_IGNORE_SERVER_IDS", "1,x",
     "upstream.ignore_server_ids[1] (from BINLOG_RELAY_UPSTREAM_IGNORE_SERVER_IDS): expected an integer, got 'x'"),
    ("BINLOG_RELAY_UPSTREAM_IGNORE_SERVER_IDS", "1001",
     "upstream.ignore_server_ids (from BINLOG_RELAY_UPSTREAM_IGNORE_SERVER_IDS): "
     "contains server_id 1001, the relay's own id"),
    ("BINLOG_RELAY_UPSTREAM_PASWORD", "x",
     "BINLOG_RELAY_UPSTREAM_PASWORD: unknown configuration variable (did you mean BINLOG_RELAY_UPSTREAM_PASSWORD?)"),
    ("BINLOG_RELAY_LISTEN", "x",
     "BINLOG_RELAY_LISTEN: unknown configuration variable (did you mean BINLOG_RELAY_LISTEN_PORT?)"),
    ("BINLOG_RELAY_COLOUR", "x", "BINLOG_RELAY_COLOUR: unknown configuration variable"),
    ("BINLOG_RELAY_USERS", "x", "BINLOG_RELAY_USERS: users cannot be set from the environment, but their "
     "passwords can: BINLOG_RELAY_USERS_<NAME>_PASSWORD or _PASSWORD_FILE"),
    ("BINLOG_RELAY_USERS_NOBODY_PASSWORD", "x", "BINLOG_RELAY_USERS_NOBODY_PASSWORD: no user named 'nobody' in users"),
])
def test_env_errors_name_variable_and_key(variable, value, expected):
    assert errors_of(minimal(), {variable: value}) == [expected]


def test_env_into_a_section_of_the_wrong_type_reports_the_section():
    data = with_(minimal(), "listen", "everywhere")
    assert errors_of(data, {"BINLOG_RELAY_LISTEN_PORT": "1"}) == ["listen: expected a mapping, got 'everywhere'"]


def test_load_config_uses_os_environ_by_default(tmp_path, monkeypatch):
    path = write(tmp_path, yaml.safe_dump(minimal()))
    monkeypatch.setenv("BINLOG_RELAY_LISTEN_PORT", "3399")
    assert load_config(path).listen.port == 3399
    assert load_config(path, {}).listen.port == 3306


# --- secrets -------------------------------------------------------------------------------


def test_secret_behaviour():
    secret = Secret("hunter2")
    assert repr(secret) == str(secret) == f"{secret}" == "***"
    assert secret.reveal() == "hunter2"
    assert secret == Secret("hunter2") and secret != Secret("other") and secret != "hunter2"
    assert hash(secret) == hash(Secret("hunter2"))
    assert bool(secret) and not Secret("")
    with pytest.raises(AttributeError):
        secret._value = "x"  # type: ignore[misc]
    assert copy.deepcopy(secret) == secret


def full_config_with_secrets(tmp_path) -> Config:
    data = minimal()
    data["users"] = [{"name": "a", "password": USER_PASSWORD},
                     {"name": "b", "password_hash": native_password_hash(USER_PASSWORD)}]
    return parse_config(data, {})


def test_secrets_not_in_repr_or_str(tmp_path):
    config = full_config_with_secrets(tmp_path)
    for text in (repr(config), str(config), repr(config.upstream), repr(config.users)):
        assert UPSTREAM_PASSWORD not in text and USER_PASSWORD not in text
        assert native_password_hash(USER_PASSWORD)[1:] not in text
    # asdict() keeps Secret objects, so a logged dict shows '***' too.
    as_dict = str(dataclasses.asdict(config))
    assert UPSTREAM_PASSWORD not in as_dict and USER_PASSWORD not in as_dict
    assert config.users[0].password.reveal() == USER_PASSWORD


@pytest.mark.parametrize("mutate", [
    lambda d: d["upstream"].update(password=12345678),
    lambda d: d["upstream"].update(password=[UPSTREAM_PASSWORD]),
    lambda d: d["upstream"].update(password_file="/nonexistent/" + UPSTREAM_PASSWORD),
    lambda d: d.update(users=[{"name": "u", "password": 12345678}]),
    lambda d: d.update(users=[{"name": "u", "password": USER_PASSWORD, "password_hash": "*" + "A" * 40}]),
    lambda d: d.update(users=[{"name": "u", "password_hash": USER_PASSWORD}]),
    lambda d: d.update(users=[{"name": "u", "password_hash": 12345678}]),
])
def test_secrets_not_in_error_messages(mutate):
    data = minimal()
    mutate(data)
    errors = errors_of(data)
    for message in errors:
        assert UPSTREAM_PASSWORD not in message.replace("/nonexistent/" + UPSTREAM_PASSWORD, "")
        assert USER_PASSWORD not in message and "12345678" not in message


def test_password_type_errors_do_not_echo_value():
    assert errors_of(with_(minimal(), "upstream.password", 12345678)) == ["upstream.password: expected a string"]
    env = {"BINLOG_RELAY_LISTEN_PORT": UPSTREAM_PASSWORD, "BINLOG_RELAY_UPSTREAM_PASSWORD": USER_PASSWORD}
    (message,) = errors_of(minimal(), env)
    assert message.startswith("listen.port (from BINLOG_RELAY_LISTEN_PORT)")
    assert USER_PASSWORD not in message


def test_secrets_not_in_yaml_errors(tmp_path):
    path = write(tmp_path, f'upstream:\n  password: "{UPSTREAM_PASSWORD}\n')
    with pytest.raises(ConfigError) as info:
        load_config(path, {})
    assert UPSTREAM_PASSWORD not in str(info.value)


# --- password hashes -----------------------------------------------------------------------


def test_native_password_hash_matches_mysql():
    expected = "*" + hashlib.sha1(hashlib.sha1(b"secret").digest()).hexdigest().upper()
    assert native_password_hash("secret") == expected
    # What MariaDB 10.11's SELECT PASSWORD('secret') returned, checked once by hand.
    assert expected == "*14E65567ABDB5135D0CFD9A70B3032C179A49EE7"
    assert native_password_hash("") == ""
    assert native_password_hash("pässwörd") == "*0225EC5004ABB0B8CB557541FE53DE1A5D8CC825"  # utf-8, as MariaDB


def test_user_native_hash_from_password_or_hash():
    stage2 = hashlib.sha1(hashlib.sha1(b"secret").digest()).digest()
    from_password = UserConfig(name="a", password=Secret("secret"))
    from_hash = UserConfig(name="b", password_hash=native_password_hash("secret"))
    assert from_password.native_hash() == from_hash.native_hash() == stage2
    assert len(stage2) == 20
    assert UserConfig(name="c", password=Secret("")).native_hash() == b""
    lower = parse_config(with_(minimal(), "users", [{"name": "d", "password_hash": "*" + stage2.hex()}]), {})
    assert lower.users[0].native_hash() == stage2


def test_user_caching_sha2_hash():
    expected = hashlib.sha256(hashlib.sha256(b"secret").digest()).digest()
    assert UserConfig(name="a", password=Secret("secret")).caching_sha2_hash() == expected
    assert UserConfig(name="b", password_hash=native_password_hash("secret")).caching_sha2_hash() is None


def test_user_ed25519_key_from_hash():
    key = ed25519.public_key(b"secret")
    text = base64.b64encode(key).decode().rstrip("=")
    for given in (text, text + "="):  # MariaDB shows it without its padding; with it is accepted too
        user = parse_config(with_(minimal(), "users", [{"name": "e", "password_hash": given}]), {}).users[0]
        assert user.password_hash == text
        assert user.ed25519_key() == key
        assert user.native_hash() is None and user.caching_sha2_hash() is None
    assert UserConfig(name="a", password=Secret("secret")).ed25519_key() is None
    assert UserConfig(name="b", password_hash=native_password_hash("secret")).ed25519_key() is None


# --- schema documentation ------------------------------------------------------------------


def test_every_option_is_documented():
    options = list(iter_options())
    assert len(options) > 40
    for option in options:
        assert option.doc and option.type, option.path
    by_path = {option.path: option for option in options}
    assert by_path["upstream.port"].env == "BINLOG_RELAY_UPSTREAM_PORT"
    assert by_path["upstream.port"].default == "3306"
    assert by_path["server_id"].default == "required"
    assert by_path["users[].name"].env is None


def test_dataclasses_can_be_built_directly():
    # Other modules' tests build configurations without YAML.
    upstream = UpstreamConfig(host="h", user="u")
    config = Config(server_id=1, data_dir="/d", upstream=upstream)
    assert config.upstream.password.reveal() == "" and config.listen.port == 3306


def test_env_does_not_leak_from_process(monkeypatch):
    monkeypatch.setenv("BINLOG_RELAY_NOT_A_KEY", "1")
    assert parse_config(minimal(), {}).server_id == 1001
    with pytest.raises(ConfigError, match="BINLOG_RELAY_NOT_A_KEY: unknown configuration variable"):
        parse_config(minimal())
    assert os.environ["BINLOG_RELAY_NOT_A_KEY"] == "1"


def test_candidate_hosts_instead_of_one_host():
    data = minimal()
    del data["upstream"]["host"]
    data["upstream"]["hosts"] = [{"host": "db1"}, {"host": "db2", "port": 3307}]
    config = parse_config(data, {})
    assert [(h.host, h.port) for h in config.upstream.hosts] == [("db1", 3306), ("db2", 3307)]
    assert errors_of(with_(data, "upstream.host", "db0")) == [
        "upstream.hosts: give host (one primary) or hosts (candidate primaries), not both"]
    del data["upstream"]["hosts"]
    assert errors_of(data) == ["upstream.host: required key is missing (or give hosts, the candidate primaries)"]
    assert errors_of(with_(data, "upstream.hosts", [{"port": 3306}])) == [
        "upstream.hosts[0].host: required key is missing"]


def test_a_users_password_from_a_file_or_the_environment(tmp_path):
    users = [{"name": "repl", "password_file": str(write(tmp_path, "from-a-file\n", "pw"))},
             {"name": "dba", "password_hash": "*" + "0" * 40}]
    config = parse_config(with_(minimal(), "users", users), {})
    assert config.users[0].password.reveal() == "from-a-file"
    assert "from-a-file" not in repr(config)
    overridden = parse_config(with_(minimal(), "users", users), {"BINLOG_RELAY_USERS_DBA_PASSWORD": "from-env"})
    assert overridden.users[1].password.reveal() == "from-env" and overridden.users[1].password_hash is None
    missing = with_(minimal(), "users", [{"name": "repl", "password_file": str(tmp_path / "nope")}])
    assert errors_of(missing)[0].startswith("users[0].password_file: cannot read")


def test_a_users_password_file_from_the_environment_as_the_upstreams(tmp_path):
    # The same rules as BINLOG_RELAY_UPSTREAM_PASSWORD[_FILE]: one from the environment replaces
    # the password, hash or file the file gives; both from the environment conflict.
    path = write(tmp_path, "from-a-mounted-secret\n", "pw")
    users = [{"name": "repl-user.1", "password": "in-the-file"}]
    config = parse_config(with_(minimal(), "users", users), {"BINLOG_RELAY_USERS_REPL_USER_1_PASSWORD_FILE": str(path)})
    assert config.users[0].password.reveal() == "from-a-mounted-secret"
    assert config.users[0].password_file == str(path)
    both = {"BINLOG_RELAY_USERS_REPL_USER_1_PASSWORD_FILE": str(path), "BINLOG_RELAY_USERS_REPL_USER_1_PASSWORD": "x"}
    assert errors_of(with_(minimal(), "users", users), both) == [
        "users[0]: give one of password, password_hash and password_file, not password and password_file"]
    missing = {"BINLOG_RELAY_USERS_REPL_USER_1_PASSWORD_FILE": str(tmp_path / "nope")}
    assert errors_of(with_(minimal(), "users", users), missing) == [
        f"users[0].password_file (from BINLOG_RELAY_USERS_REPL_USER_1_PASSWORD_FILE): cannot read "
        f"{str(tmp_path / 'nope')!r}: No such file or directory"]


def test_two_users_with_one_variable_name_are_named():
    users = [{"name": "a-b", "password": "p"}, {"name": "a.b", "password": "q"}]
    assert errors_of(with_(minimal(), "users", users), {"BINLOG_RELAY_USERS_A_B_PASSWORD": "x"}) == [
        "BINLOG_RELAY_USERS_A_B_PASSWORD: users 'a-b' and 'a.b' have the same variable name; rename one"]


def test_the_primarys_public_key_file_is_checked(tmp_path):
    key = write(tmp_path, "-----BEGIN PUBLIC KEY-----\nMIIB\n-----END PUBLIC KEY-----\n", "key.pem")
    assert parse_config(with_(minimal(), "upstream.server_public_key", str(key)), {}).upstream.server_public_key
    not_a_key = write(tmp_path, "hello", "other.pem")
    assert errors_of(with_(minimal(), "upstream.server_public_key", str(not_a_key))) == [
        f"upstream.server_public_key: {not_a_key} holds no PEM public key"]


def test_an_archive_url_the_store_would_refuse_is_a_configuration_error():
    """The URL's form and its bucket name are checked with the store's own parser, so check-config
    refuses what would otherwise stop `run` (and `archive`, `search`) at their start."""
    assert parse_config(with_(minimal(), "archive.url", "s3://relay-archive/prod"), {}).archive.url == \
        "s3://relay-archive/prod"
    assert errors_of(with_(minimal(), "archive.url", "s3://b/prefix")) == [
        "archive.url: object store URL 's3://b/prefix': 'b' is not a bucket name"]


def test_the_archive_writer_lease_leaves_room_for_its_renewals():
    """The writer renews its record every quarter of the lease: a lease under 4 s would have it
    renew faster than once a second."""
    assert parse_config(with_(minimal(), "archive.writer_lease", "2m"), {}).archive.writer_lease == 120
    assert parse_config(minimal(), {}).archive.writer_lease == 60
    assert errors_of(with_(minimal(), "archive.writer_lease", 3)) == [
        "archive.writer_lease: must be at least 4 s (the writer renews its record every quarter of it), got 3"]


# --- values YAML reads as aliases, anchors and tags ------------------------------------------


@pytest.mark.parametrize("value, kind", [
    ("*6BB4837EB74329105EE4568DDA7DC67ED2CA2AD9", "undefined alias"),  # a password_hash left unquoted
    ("*hunter2secret", "undefined alias"),
    ("*Tr0ub4dor&3", "malformed alias"),
    ("!Tr0ub4dor", "unknown tag"),
    ("!x!Tr0ub4dor", "undefined tag"),
    ("!%Tr0ub4dor", "malformed tag"),
    ("!!int Tr0ub4dor", "its tag (!!int, !!float, ...) does not take"),
])
def test_yaml_errors_about_aliases_and_tags_do_not_quote_the_value(tmp_path, value, kind):
    path = write(tmp_path, f"server_id: 1\ndata_dir: /d\nupstream:\n  host: h\n  user: u\n  password: {value}\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, {})
    (message,) = info.value.errors
    assert re.match(rf"{re.escape(str(path))}:6:\d+: YAML syntax error: ", message)
    assert kind in message and "quote a value that starts with *, & or !" in message
    assert "Tr0ub4dor" not in message and "hunter2" not in message and "6BB4837E" not in message


def test_a_duplicate_anchor_is_not_named(tmp_path):
    path = write(tmp_path, "server_id: &Tr0ub4dor 1\ndata_dir: &Tr0ub4dor /d\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, {})
    assert info.value.errors == [f"{path}:2:11: YAML syntax error: duplicate anchor (a value that starts with &); "
                                 "quote a value that starts with *, & or ! (a password, say)"]


@pytest.mark.parametrize("value", ["&Tr0ub4dor", "!"])
def test_an_anchor_or_tag_on_an_empty_value_is_not_an_empty_password(tmp_path, value):
    """"password: &Tr0ub4dor" is YAML for an anchor on an empty value: without the check, no password."""
    path = write(tmp_path, f"server_id: 1\ndata_dir: /d\nupstream:\n  host: h\n  user: u\n  password: {value}\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, {})
    assert info.value.errors == [f"{path}:6:13: YAML syntax error: an empty value with an anchor (&) or a tag (!); "
                                 "quote a value that starts with *, & or ! (a password, say)"]


def test_anchors_aliases_and_tags_that_yaml_means_still_load(tmp_path):
    path = write(tmp_path, """
server_id: !!int 1
data_dir: !!str /d
upstream: &up {host: h, user: u, password: "&Tr0ub4dor"}
listen: &l {host: 127.0.0.1}
semi_sync: {}
users:
  - {name: a, password: '*hunter2'}
  - {name: b, password: "!x", admin: !!bool true}
metrics: {<<: *l, port: 9200}
""")
    config = load_config(path, {})
    assert config.upstream.password.reveal() == "&Tr0ub4dor"
    assert [u.password.reveal() for u in config.users] == ["*hunter2", "!x"]
    assert (config.metrics.host, config.metrics.port) == ("127.0.0.1", 9200)


# --- the archive's endpoint, region and URLs -------------------------------------------------


@pytest.mark.parametrize("endpoint, problem", [
    ("http://[::1", "not a URL (Invalid IPv6 URL)"),
    ("http://:9000", "names no host"),
    ("http://%zz", "not a host name or IP address botocore accepts"),
    ("http://host:abc", "expected a port from 1 to 65535"),
    ("http://127.0.0.1:-5", "expected a port from 1 to 65535"),
    ("http://127.0.0.1:0", "expected a port from 1 to 65535"),
    ("http://127.0.0.1:65536", "expected a port from 1 to 65535"),
    ("ftp://minio:9000", "expected http:// or https://"),
    ("http://minio:9000?x=1", "must have no query (?...) or fragment (#...)"),
    ("http://minio:9000\n", "has a space, a control character or a character outside ASCII"),
])
def test_an_endpoint_url_botocore_cannot_use_is_a_configuration_error(endpoint, problem):
    assert errors_of(with_(minimal(), "archive.endpoint_url", endpoint)) == [
        f"archive.endpoint_url: endpoint URL {endpoint!r}: {problem}"]


@pytest.mark.parametrize("endpoint", ["http://minio:9000", "https://s3.example.com", "http://[::1]:9000/s3",
                                      "http://127.0.0.1:1"])
def test_good_endpoint_urls_pass(endpoint):
    config = parse_config(with_(with_(minimal(), "archive.endpoint_url", endpoint), "archive.url", "s3://bk/p"), {})
    assert config.archive.endpoint_url == endpoint


@pytest.mark.parametrize("region", ["us east 1", "us_east_1", "123", "-eu", "eu-", "us-east-1\n", "a" * 64])
def test_a_region_botocore_refuses_is_a_configuration_error(region):
    assert errors_of(with_(minimal(), "archive.region", region)) == [
        f"archive.region: region {region!r}: expected letters, digits and '-' (1 to 63, not all digits, no '-' "
        "first or last), as us-east-1"]
    assert parse_config(with_(minimal(), "archive.region", "eu-central-1"), {}).archive.region == "eu-central-1"


@pytest.mark.parametrize("key, url", [
    ("endpoint_url", "http://minioadmin:S3cretKey@127.0.0.1:9000"),
    ("endpoint_url", "http://minioadmin:S3cret/Key@127.0.0.1:9000"),
    ("url", "s3://AKIAEXAMPLE:S3cretKey@bucket/q"),
    ("url", "s3://AKIAEXAMPLE:S3cret/Key@bucket/q"),
])
def test_a_user_and_password_in_an_archive_url_is_refused_unrepeated(key, url):
    (message,) = errors_of(with_(minimal(), f"archive.{key}", url))
    assert message.startswith(f"archive.{key}: ")
    assert "S3cret" not in message and "AKIAEXAMPLE" not in message and "minioadmin" not in message
    environ = {f"BINLOG_RELAY_ARCHIVE_{key.upper()}": url}
    (message,) = errors_of(minimal(), environ)
    assert "S3cret" not in message and "AKIAEXAMPLE" not in message and "minioadmin" not in message


def test_listen_and_metrics_on_one_port_is_a_configuration_error():
    """The relay would stop at its start with "Address already in use" of its own listener."""
    assert errors_of(with_(minimal(), "listen.port", 9104)) == [
        "metrics.port: 9104 is listen.port too, on the same address: the relay could not start"]
    two_hosts = with_(with_(with_(minimal(), "listen.port", 9104), "listen.host", "127.0.0.1"), "metrics.host", "::1")
    assert parse_config(two_hosts, {}).metrics.port == 9104
    assert parse_config(with_(with_(minimal(), "listen.port", 9104), "metrics.host", "::"), {}).metrics.port == 9104
    assert errors_of(with_(with_(minimal(), "listen.port", 9104), "metrics.host", "10.0.0.1"))
    assert parse_config(with_(with_(minimal(), "listen.port", 9104), "metrics.enabled", False), {}).listen.port == 9104
