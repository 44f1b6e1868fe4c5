"""Configuration: a YAML file loaded into frozen dataclasses.

    config = load_config("relay.yaml")          # raises ConfigError listing every problem
    config.upstream.password.reveal()           # passwords are Secret: '***' in repr/str

The dataclasses below *are* the schema: every key is a dataclass field whose metadata holds
its validator and its documentation (see ``iter_options()``, used to generate the README's
reference table).  Errors name the key path (``upstream.port: expected an integer, got 'abc'``)
and are all collected in one pass.

Environment overrides: ``BINLOG_RELAY_<PATH>`` sets the scalar key at PATH (the dotted key path
upper-cased, ``.`` -> ``_``), e.g. ``BINLOG_RELAY_UPSTREAM_PASSWORD``, ``BINLOG_RELAY_LISTEN_PORT``.
The value is read as a YAML scalar and then checked like the file's value; keys that hold strings
(hosts, paths, passwords, enums) take the text verbatim, list keys take comma-separated values,
and an empty value means null (the key's default).  Setting ``password`` from the environment
drops a ``password_file`` given in the file, and vice versa.  ``users`` cannot be overridden,
but each user's password can, the same way: ``BINLOG_RELAY_USERS_<NAME>_PASSWORD[_FILE]``.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import hashlib
import hmac
import math
import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import MISSING, dataclass, field
from typing import Any, NamedTuple

import yaml

from .binlog.names import BINLOG_NAME
from .errors import FatalError

__all__ = [
    "ENV_PREFIX",
    "Config",
    "ConfigError",
    "ListenConfig",
    "ListenSSL",
    "LoggingConfig",
    "MetricsConfig",
    "OptionDoc",
    "ReconnectConfig",
    "RetentionConfig",
    "Secret",
    "StartPosition",
    "StorageConfig",
    "UpstreamConfig",
    "UpstreamSSL",
    "UserConfig",
    "iter_options",
    "load_config",
    "native_password_hash",
    "parse_config",
]

ENV_PREFIX = "BINLOG_RELAY_"
MAX_UINT32 = 2**32 - 1


class ConfigError(FatalError):
    """The configuration is unusable; ``errors`` holds one message per problem."""

    def __init__(self, errors: list[str], source: str = "<string>") -> None:
        self.errors = list(errors)
        self.source = source
        super().__init__("\n".join(self.errors))


class Secret:
    """A string that never shows itself in repr(), str(), format() or tracebacks.

    Call ``reveal()`` where the plaintext is really needed (the upstream handshake).
    """

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        object.__setattr__(self, "_value", value)

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "***"

    __str__ = __repr__

    def __bool__(self) -> bool:
        return bool(self._value)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Secret):
            return NotImplemented
        return hmac.compare_digest(self._value.encode(), other._value.encode())

    def __hash__(self) -> int:
        return hash((Secret, self._value))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Secret is immutable")

    # Immutable, so copies may share; dataclasses.asdict() deep-copies field values.
    def __copy__(self) -> Secret:
        return self

    def __deepcopy__(self, memo: dict) -> Secret:
        return self

    def __reduce__(self) -> tuple:
        return (Secret, (self._value,))


def native_password_hash(password: str) -> str:
    """MySQL's PASSWORD(): ``"*"`` + upper-case hex SHA1(SHA1(password)); ``""`` for no password."""
    if not password:
        return ""
    return "*" + _double_sha1(password).hex().upper()


def _double_sha1(password: str) -> bytes:
    return hashlib.sha1(hashlib.sha1(password.encode("utf-8")).digest()).digest()


# --------------------------------------------------------------------------------------------
# Validators ("kinds"): each turns one raw YAML value into a typed value or raises _Invalid.
# --------------------------------------------------------------------------------------------


class _Invalid(Exception):
    """One bad value; ``suffix`` extends the key path (``[2]`` for a list element)."""

    def __init__(self, message: str, suffix: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.suffix = suffix


def _show(value: object) -> str:
    """A short description of a (non-secret) value for 'got ...' in messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return repr(value if len(value) <= 60 else value[:57] + "...")
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__}"


def _yaml_scalar(text: str) -> object:
    """An environment value read as YAML; anything that is not a plain scalar stays text."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return text


class _Kind:
    label = "value"
    # True: an environment value is taken verbatim (so a password "0123" stays a string).
    env_verbatim = False

    def parse(self, value: object) -> object:
        raise NotImplementedError

    def from_env(self, text: str) -> object:
        if self.env_verbatim:
            return text
        return _yaml_scalar(text)


class _Int(_Kind):
    def __init__(self, minimum: int | None = None, maximum: int | None = None) -> None:
        self.minimum, self.maximum = minimum, maximum
        self.label = "integer" + _range_label(minimum, maximum)

    def parse(self, value: object) -> int:
        # bool is a subclass of int, but "port: true" is a mistake, not 1.
        if not isinstance(value, int) or isinstance(value, bool):
            raise _Invalid(f"expected an integer, got {_show(value)}")
        _check_range(value, self.minimum, self.maximum)
        return value


def _range_label(minimum: float | None, maximum: float | None) -> str:
    if minimum is not None and maximum is not None:
        return f" {minimum}..{maximum}"
    if minimum is not None:
        return f" >= {minimum}"
    return ""


def _check_range(value: float, minimum: float | None, maximum: float | None) -> None:
    if minimum is not None and maximum is not None and not minimum <= value <= maximum:
        raise _Invalid(f"must be between {minimum} and {maximum}, got {value!r}")
    if minimum is not None and value < minimum:
        raise _Invalid(f"must be at least {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        raise _Invalid(f"must be at most {maximum}, got {value!r}")


class _Seconds(_Kind):
    """A positive float number of seconds (ints accepted)."""

    def __init__(self, maximum: float | None = None) -> None:
        self.maximum = maximum
        self.label = "seconds > 0" + (f", at most {maximum}" if maximum else "")

    def parse(self, value: object) -> float:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise _Invalid(f"expected a number of seconds, got {_show(value)}")
        if not math.isfinite(value) or value <= 0:
            raise _Invalid(f"must be a number greater than 0, got {_show(value)}")
        _check_range(value, None, self.maximum)
        return float(value)


class _Bool(_Kind):
    label = "true/false"

    def parse(self, value: object) -> bool:
        if not isinstance(value, bool):
            raise _Invalid(f"expected true or false, got {_show(value)}")
        return value


class _Str(_Kind):
    env_verbatim = True

    def __init__(self, label: str = "string", pattern: str | None = None, example: str = "") -> None:
        self.label = label
        self.pattern = re.compile(pattern) if pattern else None
        self.example = example

    def parse(self, value: object) -> str:
        if not isinstance(value, str):
            raise _Invalid(f"expected a string, got {_show(value)}")
        if not value:
            raise _Invalid("must not be empty")
        if self.pattern and not self.pattern.fullmatch(value):
            raise _Invalid(f"expected {self.example}, got {_show(value)}")
        return value


class _SecretStr(_Kind):
    """A password: may be empty; never echoed in messages."""

    label = "string (secret)"
    env_verbatim = True

    def parse(self, value: object) -> Secret:
        if not isinstance(value, str):
            raise _Invalid("expected a string")
        return Secret(value)


class _NativeHash(_Kind):
    """mysql_native_password hash as stored in mysql.user: '*' + 40 hex digits."""

    label = "'*' + 40 hex digits"
    env_verbatim = True
    _FORM = re.compile(r"\*[0-9A-Fa-f]{40}")

    def parse(self, value: object) -> str:
        # Equivalent to a password for offline guessing, so never echoed either.
        if not isinstance(value, str):
            raise _Invalid("expected a string")
        if not self._FORM.fullmatch(value):
            raise _Invalid("expected '*' followed by 40 hex digits (the form PASSWORD() returns)")
        return value.upper()


class _Choice(_Kind):
    env_verbatim = True

    def __init__(self, *choices: str, ignore_case: bool = False) -> None:
        self.choices = choices
        self.ignore_case = ignore_case
        self.label = "one of " + ", ".join(choices)

    def parse(self, value: object) -> str:
        if isinstance(value, str):
            for choice in self.choices:
                if value == choice or (self.ignore_case and value.lower() == choice.lower()):
                    return choice
        raise _Invalid(f"expected one of {', '.join(self.choices)}, got {_show(value)}")


_SIZE_UNITS = {"": 1, "B": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_SIZE_FORM = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(?:([KMGT])(?:i?B)?|(B))\s*", re.IGNORECASE)


class _Size(_Kind):
    label = "bytes, or a string like 10G / 512M / 100K (powers of 1024)"

    def parse(self, value: object) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            size = value
        elif isinstance(value, str) and (match := _SIZE_FORM.fullmatch(value)):
            unit = (match.group(2) or match.group(3) or "").upper()
            size = int(float(match.group(1)) * _SIZE_UNITS[unit])
        else:
            raise _Invalid(f"expected a size like 10G, 512M, 100K or a number of bytes, got {_show(value)}")
        if size <= 0:
            raise _Invalid(f"must be greater than 0, got {_show(value)}")
        return size


_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION_FORM = re.compile(r"(?:\s*\d+\s*[smhdw])+\s*", re.IGNORECASE)
_DURATION_PART = re.compile(r"(\d+)\s*([smhdw])", re.IGNORECASE)


class _Duration(_Kind):
    label = "seconds, or a string like 7d / 12h / 30m / 45s (also 1h30m)"

    def __init__(self, allow_zero: bool = False) -> None:
        self.allow_zero = allow_zero

    def parse(self, value: object) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            seconds = value
        elif isinstance(value, str) and _DURATION_FORM.fullmatch(value):
            seconds = sum(int(n) * _DURATION_UNITS[u.lower()] for n, u in _DURATION_PART.findall(value))
        else:
            raise _Invalid(f"expected a duration like 7d, 12h, 30m, 45s or a number of seconds, got {_show(value)}")
        if seconds < 0 or (seconds == 0 and not self.allow_zero):
            raise _Invalid(f"must be {'0 or more' if self.allow_zero else 'greater than 0'}, got {_show(value)}")
        return seconds


class _IntList(_Kind):
    def __init__(self, item: _Int) -> None:
        self.item = item
        self.label = "list of " + item.label.replace("integer", "integers", 1) + " (environment: comma-separated)"

    def parse(self, value: object) -> tuple[int, ...]:
        if not isinstance(value, list):
            raise _Invalid(f"expected a list, got {_show(value)}")
        items = []
        for index, raw in enumerate(value):
            try:
                items.append(self.item.parse(raw))
            except _Invalid as bad:
                raise _Invalid(bad.message, f"[{index}]") from None
        return tuple(items)

    def from_env(self, text: str) -> object:
        if not text.strip():
            return []
        return [_yaml_scalar(part.strip()) for part in text.split(",")]


class _Section(_Kind):
    """A nested mapping parsed into dataclass ``cls``."""

    label = "mapping"

    def __init__(self, cls: type) -> None:
        self.cls = cls


class _SectionList(_Kind):
    def __init__(self, cls: type) -> None:
        self.cls = cls
        self.label = "list of mappings"


@dataclass(frozen=True)
class _Option:
    kind: _Kind
    doc: str
    nullable: bool = False
    # The sibling key this one excludes: an environment override of one drops the other.
    excludes: str | None = None


def _opt(kind: _Kind, doc: str, default: Any = MISSING, *, factory: Any = MISSING,
         nullable: bool = False, excludes: str | None = None, repr: bool = True) -> Any:
    return field(default=default, default_factory=factory, repr=repr,
                 metadata={"option": _Option(kind, doc, nullable, excludes)})


def _section(cls: type, doc: str) -> Any:
    return _opt(_Section(cls), doc, factory=cls)


# --------------------------------------------------------------------------------------------
# The schema.  kw_only so required and defaulted keys can stay in their natural order.
# --------------------------------------------------------------------------------------------



@dataclass(frozen=True, kw_only=True)
class StartPosition:
    file: str = _opt(_Str("binlog file name", BINLOG_NAME, "a binlog file name like 'mysql-bin.000001'"),
                     "Binlog file to start from, e.g. mysql-bin.000001.")
    position: int = _opt(_Int(4, 4), "Must be 4: stored files are whole copies of the primary's, "
                         "from their first event.", 4)


@dataclass(frozen=True, kw_only=True)
class ReconnectConfig:
    initial_delay: float = _opt(_Seconds(), "First wait before reconnecting to the primary.", 0.5)
    max_delay: float = _opt(_Seconds(), "Cap of the doubling reconnect delay (>= initial_delay).", 30.0)


@dataclass(frozen=True, kw_only=True)
class UpstreamHost:
    host: str = _opt(_Str("host"), "Candidate primary's host name or IP address.")
    port: int = _opt(_Int(1, 65535), "Its port.", 3306)


@dataclass(frozen=True, kw_only=True)
class UpstreamSSL:
    mode: str = _opt(_Choice("disabled", "preferred", "required", "verify_ca", "verify_identity"),
                     "TLS to the primary; verify_ca/verify_identity need ca.", "disabled")
    ca: str | None = _opt(_Str("path"), "CA bundle (PEM) to verify the primary's certificate.", None, nullable=True)
    cert: str | None = _opt(_Str("path"), "Client certificate (PEM); needs key.", None, nullable=True)
    key: str | None = _opt(_Str("path"), "Client private key (PEM); needs cert.", None, nullable=True)


@dataclass(frozen=True, kw_only=True)
class UpstreamConfig:
    host: str | None = _opt(_Str("host"), "Primary's host name or IP address (or give hosts).", None,
                            nullable=True)
    port: int = _opt(_Int(1, 65535), "Primary's port.", 3306)
    hosts: tuple[UpstreamHost, ...] = _opt(
        _SectionList(UpstreamHost), "Candidate primaries in order of preference, instead of host/port: the "
        "relay follows the first writable one whose history holds what it stored, and moves on at a failover.", ())
    user: str = _opt(_Str(), "Replication user on the primary.")
    password: Secret = _opt(_SecretStr(), "Its password (or give password_file; neither = empty password).",
                            Secret(""), excludes="password_file")
    password_file: str | None = _opt(_Str("path"), "File holding the password, read at load time "
                                     "(one trailing newline stripped).", None, nullable=True,
                                     excludes="password")
    start: StartPosition | None = _opt(_Section(StartPosition),
                                       "Where a fresh data_dir begins; default: the primary's first binlog.",
                                       None, nullable=True)
    ignore_server_ids: tuple[int, ...] = _opt(_IntList(_Int(0, MAX_UINT32)),
                                              "Groups written by these server ids are not served to "
                                              "replicas (loop filter; storage keeps them).", ())
    heartbeat_period: float = _opt(_Seconds(4294967), "Heartbeat interval the primary is asked for.", 15.0)
    connect_timeout: float = _opt(_Seconds(), "Timeout for connecting and logging in.", 10.0)
    behind_wait: float = _opt(_Seconds(), "With hosts: how long a candidate "
                              "refused as behind is waited for (it may be catching up) before the candidates after "
                              "it are followed.", 30.0)
    unready_after: float = _opt(_Seconds(), "How long ingest may fail (reconnecting with back-off) before /readyz "
                                "answers 503.", 60.0)
    reconnect: ReconnectConfig = _section(ReconnectConfig, "Reconnect back-off.")
    ssl: UpstreamSSL = _section(UpstreamSSL, "TLS to the primary.")
    server_public_key: str | None = _opt(_Str("path"), "The primary's RSA public key (PEM) for caching_sha2_password "
                                         "without TLS (MySQL 8); without it the key is asked of the primary.",
                                         None, nullable=True)
    semi_sync: bool = _opt(_Bool(), "Be a semi-sync replica of a primary that runs semi-sync, acknowledging each "
                           "transaction once it is on the relay's disk (needs storage.sync: commit).", False)


@dataclass(frozen=True, kw_only=True)
class ListenSSL:
    cert: str | None = _opt(_Str("path"), "Server certificate (PEM); needs key.", None, nullable=True)
    key: str | None = _opt(_Str("path"), "Server private key (PEM); needs cert.", None, nullable=True)
    require: bool = _opt(_Bool(), "Refuse clients that do not use TLS (needs cert and key).", False)


@dataclass(frozen=True, kw_only=True)
class ListenConfig:
    host: str = _opt(_Str("host"), "Address replicas connect to.", "0.0.0.0")
    port: int = _opt(_Int(0, 65535), "Port replicas connect to (0 = any free port).", 3306)
    max_connections: int = _opt(_Int(1), "Most downstream sessions at once.", 1000)
    handshake_timeout: float = _opt(_Seconds(), "Time a client has to log in.", 10.0)
    max_packet: int = _opt(_Size(), "Largest packet a logged-in client may send (before the login: 16K); "
                           "over it the client gets ERR 1153 and is disconnected.", 16 << 20)
    ssl: ListenSSL = _section(ListenSSL, "TLS for replicas.")


@dataclass(frozen=True, kw_only=True)
class UserConfig:
    name: str = _opt(_Str(), "User name a replica logs in with.")
    password: Secret | None = _opt(_SecretStr(), "Its password (or give password_hash or password_file).",
                                   None, nullable=True)
    # Not a Secret (it is what mysql.user shows), but kept out of repr all the same.
    password_hash: str | None = _opt(_NativeHash(), "mysql_native_password hash, '*' + 40 hex digits.",
                                     None, nullable=True, repr=False)
    password_file: str | None = _opt(_Str("path"), "File holding the password, read at load time (one trailing "
                                     "newline stripped). From the environment: BINLOG_RELAY_USERS_<NAME>_PASSWORD or "
                                     "_PASSWORD_FILE (NAME upper-cased, other characters than A-Z and 0-9 as _).",
                                     None, nullable=True)
    admin: bool = _opt(_Bool(), "May run PURGE BINARY LOGS (the BINLOG ADMIN privilege of a primary).", False)

    def native_hash(self) -> bytes:
        """SHA1(SHA1(password)), the 20 bytes mysql_native_password checks against; b"" = no password."""
        if self.password_hash is not None:
            return bytes.fromhex(self.password_hash[1:])
        if self.password is None or not self.password:
            return b""
        return _double_sha1(self.password.reveal())

    def caching_sha2_hash(self) -> bytes | None:
        """SHA256(SHA256(password)) for caching_sha2_password; None if only a native hash was given."""
        if self.password is None:
            return None
        if not self.password:
            return b""
        return hashlib.sha256(hashlib.sha256(self.password.reveal().encode("utf-8")).digest()).digest()


@dataclass(frozen=True, kw_only=True)
class MetricsConfig:
    host: str = _opt(_Str("host"), "Address of the Prometheus /metrics endpoint.", "0.0.0.0")
    port: int = _opt(_Int(0, 65535), "Its port (0 = any free port).", 9104)
    enabled: bool = _opt(_Bool(), "Serve metrics at all.", True)


@dataclass(frozen=True, kw_only=True)
class RetentionConfig:
    max_size: int | None = _opt(_Size(), "Purge oldest binlogs beyond this total size (null = unlimited).",
                                None, nullable=True)
    max_age: int | None = _opt(_Duration(), "Purge binlogs older than this, in seconds (null = unlimited).",
                               None, nullable=True)
    min_files: int = _opt(_Int(1), "Always keep at least this many binlog files.", 2)
    replica_grace: int = _opt(_Duration(allow_zero=True), "Keep, for this long after a replica was last seen, the files it "
                              "still needs (kept in data_dir across restarts); 0 = only connected replicas.", 3600)


@dataclass(frozen=True, kw_only=True)
class StorageConfig:
    sync: str = _opt(_Choice("commit", "interval", "none"),
                     "fsync policy: commit = before a transaction is acknowledged as stored (group commit); "
                     "interval = every sync_interval_ms; none = leave it to the OS.", "commit")
    sync_interval_ms: int = _opt(_Int(1), "fsync period for sync: interval.", 100)
    retention: RetentionConfig = _section(RetentionConfig, "When old binlog files are purged.")


@dataclass(frozen=True, kw_only=True)
class SemiSyncConfig:
    wait_for_replicas: int = _opt(_Int(0), "With upstream.semi_sync: acknowledge a transaction to the primary only "
                                  "once this many semi-sync replicas of the relay acknowledged it too.", 0)
    replica_timeout: float = _opt(_Seconds(), "Longest wait for those replicas; past it the relay acknowledges "
                                  "alone until they catch up (as a primary falls back to async).", 10.0)


@dataclass(frozen=True, kw_only=True)
class LoggingConfig:
    level: str = _opt(_Choice("DEBUG", "INFO", "WARNING", "ERROR", ignore_case=True), "Log level.", "INFO")
    format: str = _opt(_Choice("text", "json"), "text for people, json for log shippers.", "text")


@dataclass(frozen=True, kw_only=True)
class Config:
    server_id: int = _opt(_Int(1, MAX_UINT32), "The relay's own server id (unique in the topology).")
    data_dir: str = _opt(_Str("path"), "Directory for the relay's binlogs and state.")
    upstream: UpstreamConfig = _opt(_Section(UpstreamConfig), "The primary to replicate from.")
    listen: ListenConfig = _section(ListenConfig, "Where replicas connect.")
    users: tuple[UserConfig, ...] = _opt(_SectionList(UserConfig), "Who may replicate from the relay.", ())
    metrics: MetricsConfig = _section(MetricsConfig, "Prometheus metrics endpoint.")
    storage: StorageConfig = _section(StorageConfig, "Binlog storage.")
    semi_sync: SemiSyncConfig = _section(SemiSyncConfig, "The semi-sync chain through the relay.")
    logging: LoggingConfig = _section(LoggingConfig, "Logging.")


# --------------------------------------------------------------------------------------------
# Cross-key rules.  Each gets the section's raw mapping, its parsed values (possibly _INVALID,
# then the rule stays silent: that key already has an error) and a reporter for sub-keys.
# --------------------------------------------------------------------------------------------

_INVALID: Any = object()
_Report = Callable[[str, str], None]  # (key relative to the section, "" = the section; message)


def _valid(*values: object) -> bool:
    return all(v is not _INVALID for v in values)


def _check_reconnect(raw: Mapping, values: dict, report: _Report) -> None:
    initial, maximum = values["initial_delay"], values["max_delay"]
    if _valid(initial, maximum) and maximum < initial:
        report("max_delay", f"must be at least initial_delay ({initial}), got {maximum}")


def _check_cert_pair(values: dict, report: _Report) -> None:
    cert, key = values["cert"], values["key"]
    if cert is not None and key is None:
        report("key", "required when cert is given")
    if key is not None and cert is None:
        report("cert", "required when key is given")


def _check_upstream_ssl(raw: Mapping, values: dict, report: _Report) -> None:
    _check_cert_pair(values, report)
    mode = values["mode"]
    if mode in ("verify_ca", "verify_identity") and values["ca"] is None:
        report("ca", f"required when mode is {mode}")


def _check_listen_ssl(raw: Mapping, values: dict, report: _Report) -> None:
    _check_cert_pair(values, report)
    if values["require"] is True and (values["cert"] is None or values["key"] is None):
        report("require", "needs cert and key")


def _check_upstream(raw: Mapping, values: dict, report: _Report) -> None:
    key_path = values.get("server_public_key")
    if key_path is not None and _valid(key_path):
        try:
            with open(key_path, "rb") as key_file:
                if b"PUBLIC KEY-----" not in key_file.read(65536):
                    report("server_public_key", f"{key_path} holds no PEM public key")
        except OSError as err:
            report("server_public_key", f"cannot read {key_path!r}: {err.strerror or err}")
    has_host, has_hosts = raw.get("host") is not None, bool(raw.get("hosts"))
    if has_host and has_hosts:
        report("hosts", "give host (one primary) or hosts (candidate primaries), not both")
        values["host"] = _INVALID
    elif not has_host and not has_hosts:
        report("host", "required key is missing (or give hosts, the candidate primaries)")
        values["host"] = _INVALID
    if raw.get("password") is not None and raw.get("password_file") is not None:
        report("", "give either password or password_file, not both")
        values["password"] = _INVALID
        return
    path = values["password_file"]
    if path is not None and _valid(path):
        try:
            values["password"] = Secret(_read_password_file(path))
        except _Invalid as bad:
            report("password_file", bad.message)
            values["password_file"] = _INVALID


def _read_password_file(path: str) -> str:
    try:
        with open(path, "rb") as file:
            data = file.read()
    except OSError as err:
        raise _Invalid(f"cannot read {path!r}: {err.strerror or err}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise _Invalid(f"{path!r} is not UTF-8 text") from None
    # Files written by `echo` or editors end in a newline that is not part of the password.
    for newline in ("\r\n", "\n"):
        if text.endswith(newline):
            return text[: -len(newline)]
    return text


def _check_user(raw: Mapping, values: dict, report: _Report) -> None:
    given = [key for key in ("password", "password_hash", "password_file") if raw.get(key) is not None]
    if len(given) > 1:
        report("", f"give one of password, password_hash and password_file, not {' and '.join(given)}")
        values["password"] = _INVALID
    elif not given:
        report("", "give password, password_hash or password_file")
        values["password"] = _INVALID
    elif given == ["password_file"] and _valid(values["password_file"]):
        try:
            values["password"] = Secret(_read_password_file(values["password_file"]))
        except _Invalid as bad:
            report("password_file", bad.message)
            values["password_file"] = _INVALID


def _check_config(raw: Mapping, values: dict, report: _Report) -> None:
    server_id, upstream, users = values["server_id"], values["upstream"], values["users"]
    if _valid(server_id, upstream) and server_id in upstream.ignore_server_ids:
        report("upstream.ignore_server_ids", f"contains server_id {server_id}, the relay's own id")
    storage, semi_sync = values.get("storage"), values.get("semi_sync")
    if _valid(upstream, semi_sync) and semi_sync.wait_for_replicas and not upstream.semi_sync:
        report("semi_sync.wait_for_replicas", "needs upstream.semi_sync: true (the relay acknowledges to its "
               "primary only as a semi-sync replica)")
    if _valid(upstream, storage) and upstream.semi_sync and storage.sync != "commit":
        report("upstream.semi_sync", f"needs storage.sync: commit (it is {storage.sync}): an acknowledged "
               "transaction must be on disk")
    if _valid(users):
        seen: set[str] = set()
        for index, user in enumerate(users):
            if user.name in seen:
                report(f"users[{index}].name", f"duplicate user {user.name!r}")
            seen.add(user.name)


_CHECKS: dict[type, Callable[[Mapping, dict, _Report], None]] = {
    ReconnectConfig: _check_reconnect,
    UpstreamSSL: _check_upstream_ssl,
    ListenSSL: _check_listen_ssl,
    UpstreamConfig: _check_upstream,
    UserConfig: _check_user,
    Config: _check_config,
}


# --------------------------------------------------------------------------------------------
# Parsing.
# --------------------------------------------------------------------------------------------


def _join(path: str, key: str) -> str:
    if not key:
        return path
    if not path or key.startswith("["):
        return path + key
    return f"{path}.{key}"


class _Problems:
    """Collects messages; a key set from the environment is named with its variable."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        self.env_sources: dict[str, str] = {}  # key path -> BINLOG_RELAY_* variable

    def add(self, path: str, message: str) -> None:
        variable = self.env_sources.get(path) or self.env_sources.get(path.split("[", 1)[0])
        where = f"{path} (from {variable})" if variable else path
        self.messages.append(f"{where}: {message}" if where else message)


def _option(f: dataclasses.Field) -> _Option:
    return f.metadata["option"]


def _is_required(f: dataclasses.Field) -> bool:
    return f.default is MISSING and f.default_factory is MISSING


def _default(f: dataclasses.Field) -> object:
    return f.default_factory() if f.default_factory is not MISSING else f.default


def _parse_section(cls: type, raw: object, path: str, problems: _Problems) -> Any:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        problems.add(path, f"expected a mapping, got {_show(raw)}")
        return _INVALID
    _report_unknown_keys(cls, raw, path, problems)
    values = {f.name: _parse_field(f, raw, path, problems) for f in dataclasses.fields(cls)}
    check = _CHECKS.get(cls)
    if check:
        check(raw, values, lambda key, message: problems.add(_join(path, key), message))
    if not _valid(*values.values()):
        return _INVALID
    return cls(**values)


def _report_unknown_keys(cls: type, raw: dict, path: str, problems: _Problems) -> None:
    known = [f.name for f in dataclasses.fields(cls)]
    for key in raw:
        if not isinstance(key, str):
            problems.add(path, f"keys must be strings, got {_show(key)}")
        elif key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.add(_join(path, key), f"unknown key{hint}")


def _parse_field(f: dataclasses.Field, raw: dict, path: str, problems: _Problems) -> object:
    option, key_path = _option(f), _join(path, f.name)
    value = raw.get(f.name)
    if value is None:
        # Null means "not given": the default, or null itself where that is allowed.
        if _is_required(f):
            problems.add(key_path, "required key is missing" if f.name not in raw else "required key has no value")
            return _INVALID
        return None if (f.name in raw and option.nullable) else _default(f)
    if isinstance(option.kind, _Section):
        return _parse_section(option.kind.cls, value, key_path, problems)
    if isinstance(option.kind, _SectionList):
        return _parse_section_list(option.kind.cls, value, key_path, problems)
    try:
        return option.kind.parse(value)
    except _Invalid as bad:
        problems.add(key_path + bad.suffix, bad.message)
        return _INVALID


def _parse_section_list(cls: type, raw: object, path: str, problems: _Problems) -> Any:
    if not isinstance(raw, list):
        problems.add(path, f"expected a list, got {_show(raw)}")
        return _INVALID
    items = [_parse_section(cls, item, f"{path}[{index}]", problems) for index, item in enumerate(raw)]
    return tuple(items) if _valid(*items) else _INVALID


# --------------------------------------------------------------------------------------------
# Environment overrides.
# --------------------------------------------------------------------------------------------


def _scalar_leaves(cls: type, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], _Option]]:
    for f in dataclasses.fields(cls):
        option, path = _option(f), prefix + (f.name,)
        if isinstance(option.kind, _Section):
            yield from _scalar_leaves(option.kind.cls, path)
        elif not isinstance(option.kind, _SectionList):
            yield path, option


def _env_name(path: tuple[str, ...]) -> str:
    return ENV_PREFIX + "_".join(path).upper()


# Key names contain underscores, so variables are mapped by this table, never by splitting them.
_ENV_KEYS: dict[str, tuple[tuple[str, ...], _Option]] = {
    _env_name(path): (path, option) for path, option in _scalar_leaves(Config)
}
_ENV_BY_PATH = {".".join(path): variable for variable, (path, _) in _ENV_KEYS.items()}
assert len(_ENV_KEYS) == len(list(_scalar_leaves(Config))), "two keys map to one variable"


def _apply_environment(data: dict, environ: Mapping[str, str], problems: _Problems) -> dict:
    """A copy of ``data`` with the BINLOG_RELAY_* overrides applied."""
    data = copy.deepcopy(data)
    overridden: dict[tuple[str, ...], _Option] = {}
    user_passwords: dict[str, dict[str, tuple[str, str]]] = {}  # NAME -> key -> (variable, value)
    for variable in sorted(environ):
        if not variable.startswith(ENV_PREFIX):
            continue
        if (user := _USER_PASSWORD_VARIABLE.fullmatch(variable)) is not None:
            key = "password_file" if user.group(2) else "password"
            user_passwords.setdefault(user.group(1), {})[key] = (variable, environ[variable])
            continue
        if variable not in _ENV_KEYS:
            problems.add("", f"{variable}: {_unknown_variable_reason(variable)}")
            continue
        path, option = _ENV_KEYS[variable]
        section = _section_for(data, path[:-1])
        if section is not None:  # else the section has the wrong type, reported when parsed
            section[path[-1]] = option.kind.from_env(environ[variable])
            problems.env_sources[".".join(path)] = variable
            overridden[path] = option
    _drop_excluded_siblings(data, overridden)
    for name, given in user_passwords.items():
        _set_user_password(data, name, given, problems)
    return data


# BINLOG_RELAY_USERS_<NAME>_PASSWORD and _PASSWORD_FILE, as BINLOG_RELAY_UPSTREAM_PASSWORD[_FILE].
_USER_PASSWORD_VARIABLE = re.compile(re.escape(ENV_PREFIX) + r"USERS_(.+)_PASSWORD(_FILE)?")


def user_env_name(name: str) -> str:
    """The <NAME> of a user's environment variables: upper case, each character other than a
    letter or digit as '_' (shells and Kubernetes take only those in a variable name)."""
    return re.sub(r"[^A-Z0-9]", "_", name.upper())


def _set_user_password(data: dict, name: str, given: dict[str, tuple[str, str]], problems: _Problems) -> None:
    """The password (or password file) of the user whose name gives <NAME>, in place of the
    password, hash or file the configuration gives it; both from the environment is a conflict,
    reported as for the file (a user with password and password_file)."""
    users = data.get("users") if isinstance(data.get("users"), list) else []
    matches = [(i, u) for i, u in enumerate(users)
               if isinstance(u, dict) and user_env_name(str(u.get("name", ""))) == name]
    variables = " and ".join(variable for variable, _ in given.values())
    if not matches:
        problems.add("", f"{variables}: no user named {name.lower()!r} in users")
        return
    if len(matches) > 1:
        names = " and ".join(repr(str(u.get("name"))) for _, u in matches)
        problems.add("", f"{variables}: users {names} have the same variable name; rename one")
        return
    index, entry = matches[0]
    for key in ("password", "password_hash", "password_file"):
        entry.pop(key, None)
    for key, (variable, value) in given.items():
        entry[key] = value
        problems.env_sources[f"users[{index}].{key}"] = variable


def _unknown_variable_reason(variable: str) -> str:
    if variable == ENV_PREFIX + "USERS" or variable.startswith(ENV_PREFIX + "USERS_"):
        return ("users cannot be set from the environment, but their passwords can: "
                "BINLOG_RELAY_USERS_<NAME>_PASSWORD or _PASSWORD_FILE")
    # Compared without the common prefix, which would make every name look alike.
    names = {name.removeprefix(ENV_PREFIX): name for name in _ENV_KEYS}
    close = difflib.get_close_matches(variable.removeprefix(ENV_PREFIX), list(names), n=1)
    hint = f" (did you mean {names[close[0]]}?)" if close else ""
    return f"unknown configuration variable{hint}"


def _section_for(data: dict, path: tuple[str, ...]) -> dict | None:
    """The mapping at ``path``, created where missing or null."""
    node = data
    for key in path:
        child = node.get(key)
        if child is None:
            child = node[key] = {}
        if not isinstance(child, dict):
            return None
        node = child
    return node


def _drop_excluded_siblings(data: dict, overridden: dict[tuple[str, ...], _Option]) -> None:
    # BINLOG_RELAY_UPSTREAM_PASSWORD replaces a password_file from the file (and vice versa);
    # only both from the environment is a conflict.
    for path, option in overridden.items():
        sibling = path[:-1] + (option.excludes,) if option.excludes else None
        if sibling and sibling not in overridden:
            section = _section_for(data, path[:-1])
            if section is not None:
                section.pop(option.excludes, None)


# --------------------------------------------------------------------------------------------
# Public entry points.
# --------------------------------------------------------------------------------------------


def parse_config(data: object, environ: Mapping[str, str] | None = None, source: str = "<string>") -> Config:
    """Validate already-parsed YAML (plus environment overrides) into a Config."""
    return _parse(data, os.environ if environ is None else environ, source, [])


def load_config(path: str | os.PathLike, environ: Mapping[str, str] | None = None) -> Config:
    """Read and validate a YAML configuration file; raises ConfigError listing every problem."""
    source = os.fspath(path)
    data, early = _read_yaml(source)
    return _parse(data, os.environ if environ is None else environ, source, early)


def _parse(data: object, environ: Mapping[str, str], source: str, early: list[str]) -> Config:
    if not isinstance(data, dict):
        got = "an empty document" if data is None else _show(data)
        raise ConfigError(early + [f"{source}: expected a mapping at the top level, got {got}"], source)
    problems = _Problems()
    problems.messages.extend(early)
    data = _apply_environment(data, environ, problems)
    config = _parse_section(Config, data, "", problems)
    if problems.messages:
        raise ConfigError(problems.messages, source)
    return config


class _Loader(yaml.SafeLoader):
    """SafeLoader that notes duplicate keys (PyYAML silently keeps the last one)."""

    def __init__(self, stream: bytes) -> None:
        super().__init__(stream)
        self.duplicates: list[tuple[object, yaml.Mark]] = []

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        # Looked at before merge keys (<<) are flattened: a key overriding a merged one is fine.
        seen = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag == "tag:yaml.org,2002:str":
                if key_node.value in seen:
                    self.duplicates.append((key_node.value, key_node.start_mark))
                seen.add(key_node.value)
        return super().construct_mapping(node, deep=deep)


def _read_yaml(source: str) -> tuple[object, list[str]]:
    try:
        with open(source, "rb") as file:
            text = file.read()
    except FileNotFoundError:
        raise ConfigError([f"{source}: file not found"], source) from None
    except OSError as err:
        raise ConfigError([f"{source}: cannot read: {err.strerror or err}"], source) from None
    try:
        loader = _Loader(text)  # already decodes, so it can fail too
        try:
            data = loader.get_single_data()
        finally:
            loader.dispose()
    except yaml.YAMLError as err:
        raise ConfigError([_yaml_error_message(source, err)], source) from None
    early = [f"{source}:{mark.line + 1}:{mark.column + 1}: duplicate key {key!r}" for key, mark in loader.duplicates]
    return data, early


def _yaml_error_message(source: str, err: yaml.YAMLError) -> str:
    # Built from the parts, not str(err): that quotes the offending line, which may hold a password.
    if isinstance(err, yaml.MarkedYAMLError):
        mark = err.problem_mark or err.context_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        context = f"{err.context}, " if err.context else ""
        return f"{where}: YAML syntax error: {context}{err.problem}"
    if isinstance(err, yaml.reader.ReaderError):
        return f"{source}: not valid text at byte {err.position}: {err.reason}"
    return f"{source}: YAML error"


# --------------------------------------------------------------------------------------------
# Reference documentation (for the README).
# --------------------------------------------------------------------------------------------


class OptionDoc(NamedTuple):
    path: str            # e.g. "upstream.ssl.mode"; list entries as "users[].name"
    type: str            # e.g. "integer 1..65535"
    default: str         # YAML-ish text; "required" for required keys
    env: str | None      # the BINLOG_RELAY_* variable, None where there is none
    doc: str


def iter_options(cls: type = Config, prefix: str = "") -> Iterator[OptionDoc]:
    """Every key of the schema, sections before their keys, in file order."""
    for f in dataclasses.fields(cls):
        option, path = _option(f), _join(prefix, f.name)
        kind = option.kind
        yield OptionDoc(path, kind.label, _default_text(f), _ENV_BY_PATH.get(path), option.doc)
        if isinstance(kind, _Section):
            yield from iter_options(kind.cls, path)
        elif isinstance(kind, _SectionList):
            yield from iter_options(kind.cls, path + "[]")


def _default_text(f: dataclasses.Field) -> str:
    if _is_required(f):
        return "required"
    value = _default(f)
    if dataclasses.is_dataclass(value):
        return ""
    if value is None:
        return "null"
    if isinstance(value, Secret):
        return '""'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return "[]"
    return str(value)
