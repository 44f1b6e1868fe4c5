"""The machinery behind relay/config.py: a YAML file validated into frozen dataclasses whose fields
carry their validator and documentation, every problem collected in one pass with its key path,
environment overrides, and the option list the README's reference table is generated from.
Nothing here knows the relay's keys.

A schema is a tree of ``@dataclass(frozen=True, kw_only=True)`` classes whose fields are made with
``opt(kind, doc, default)`` or ``section(cls, doc)``.  ``Schema(root, env_prefix, checks)`` parses
it: ``checks`` maps a class to its cross-key rule, called with the section's raw mapping, its
parsed values (``INVALID`` where a key already failed: the rule then stays silent) and a
reporter for sub-keys.

Why not msgspec or pydantic (measured on this schema, 2026-11): msgspec reports one error per run,
with no "did you mean" and no unit forms (7d, 512M) without hooks of ours; pydantic reports every
error with its path but in its own words ("Input should be a valid integer, unable to parse string
as an integer"), has no "did you mean", and would still need our sizes, durations, secrets,
environment rules and README table: about 230 of these 500 lines saved for a compiled dependency
read once at start-up.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import hmac
import math
import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import MISSING, dataclass, field
from typing import Any, NamedTuple, Protocol

import yaml

from .errors import FatalError, InputError


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
    _value: str

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


# --------------------------------------------------------------------------------------------
# Validators ("kinds"): each turns one raw YAML value into a typed value or raises Invalid.
# --------------------------------------------------------------------------------------------


class Invalid(InputError):
    """One bad value; ``suffix`` extends the key path (``[2]`` for a list element)."""

    def __init__(self, message: str, suffix: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.suffix = suffix


def show(value: object) -> str:
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


class Kind:
    label = "value"
    # True: an environment value is taken verbatim (so a password "0123" stays a string).
    env_verbatim = False

    def parse(self, value: object) -> object:
        raise NotImplementedError

    def from_env(self, text: str) -> object:
        if self.env_verbatim:
            return text
        return _yaml_scalar(text)


class Int(Kind):
    def __init__(self, minimum: int | None = None, maximum: int | None = None) -> None:
        self.minimum, self.maximum = minimum, maximum
        self.label = "integer" + _range_label(minimum, maximum)

    def parse(self, value: object) -> int:
        # bool is a subclass of int, but "port: true" is a mistake, not 1.
        if not isinstance(value, int) or isinstance(value, bool):
            raise Invalid(f"expected an integer, got {show(value)}")
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
        raise Invalid(f"must be between {minimum} and {maximum}, got {value!r}")
    if minimum is not None and value < minimum:
        raise Invalid(f"must be at least {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        raise Invalid(f"must be at most {maximum}, got {value!r}")


class Seconds(Kind):
    """A positive float number of seconds (ints accepted)."""

    def __init__(self, maximum: float | None = None) -> None:
        self.maximum = maximum
        self.label = "seconds > 0" + (f", at most {maximum}" if maximum else "")

    def parse(self, value: object) -> float:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise Invalid(f"expected a number of seconds, got {show(value)}")
        if not math.isfinite(value) or value <= 0:
            raise Invalid(f"must be a number greater than 0, got {show(value)}")
        _check_range(value, None, self.maximum)
        return float(value)


class Bool(Kind):
    label = "true/false"

    def parse(self, value: object) -> bool:
        if not isinstance(value, bool):
            raise Invalid(f"expected true or false, got {show(value)}")
        return value


class Str(Kind):
    env_verbatim = True

    def __init__(self, label: str = "string", pattern: str | None = None, example: str = "") -> None:
        self.label = label
        self.pattern = re.compile(pattern) if pattern else None
        self.example = example

    def parse(self, value: object) -> str:
        if not isinstance(value, str):
            raise Invalid(f"expected a string, got {show(value)}")
        if not value:
            raise Invalid("must not be empty")
        if self.pattern and not self.pattern.fullmatch(value):
            raise Invalid(f"expected {self.example}, got {show(value)}")
        return value


class SecretStr(Kind):
    """A password: may be empty; never echoed in messages."""

    label = "string (secret)"
    env_verbatim = True

    def parse(self, value: object) -> Secret:
        if not isinstance(value, str):
            raise Invalid("expected a string")
        return Secret(value)


class Choice(Kind):
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
        raise Invalid(f"expected one of {', '.join(self.choices)}, got {show(value)}")


_SIZE_UNITS = {"": 1, "B": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_SIZE_FORM = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(?:([KMGT])(?:i?B)?|(B))\s*", re.IGNORECASE)


class Size(Kind):
    label = "bytes, or a string like 10G / 512M / 100K (powers of 1024)"

    def parse(self, value: object) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            size = value
        elif isinstance(value, str) and (match := _SIZE_FORM.fullmatch(value)):
            unit = (match.group(2) or match.group(3) or "").upper()
            size = int(float(match.group(1)) * _SIZE_UNITS[unit])
        else:
            raise Invalid(f"expected a size like 10G, 512M, 100K or a number of bytes, got {show(value)}")
        if size <= 0:
            raise Invalid(f"must be greater than 0, got {show(value)}")
        return size


_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION_FORM = re.compile(r"(?:\s*\d+\s*[smhdw])+\s*", re.IGNORECASE)
_DURATION_PART = re.compile(r"(\d+)\s*([smhdw])", re.IGNORECASE)


class Duration(Kind):
    label = "seconds, or a string like 7d / 12h / 30m / 45s (also 1h30m)"

    def __init__(self, allow_zero: bool = False) -> None:
        self.allow_zero = allow_zero

    def parse(self, value: object) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            seconds = value
        elif isinstance(value, str) and _DURATION_FORM.fullmatch(value):
            seconds = sum(int(n) * _DURATION_UNITS[u.lower()] for n, u in _DURATION_PART.findall(value))
        else:
            raise Invalid(f"expected a duration like 7d, 12h, 30m, 45s or a number of seconds, got {show(value)}")
        if seconds < 0 or (seconds == 0 and not self.allow_zero):
            raise Invalid(f"must be {'0 or more' if self.allow_zero else 'greater than 0'}, got {show(value)}")
        return seconds


class ListOf(Kind):
    """A list of one kind of item; from the environment, comma-separated items."""

    def __init__(self, item: Kind, items: str) -> None:
        self.item = item
        self.label = f"list of {items} (environment: comma-separated)"

    def parse(self, value: object) -> tuple[Any, ...]:
        if not isinstance(value, list):
            raise Invalid(f"expected a list, got {show(value)}")
        items = []
        for index, raw in enumerate(value):
            try:
                items.append(self.item.parse(raw))
            except Invalid as bad:
                raise Invalid(bad.message, f"[{index}]") from None
        return tuple(items)

    def from_env(self, text: str) -> object:
        if not text.strip():
            return []
        parts = [part.strip() for part in text.split(",")]
        return parts if self.item.env_verbatim else [_yaml_scalar(part) for part in parts]


class IntList(ListOf):
    def __init__(self, item: Int) -> None:
        super().__init__(item, item.label.replace("integer", "integers", 1))


class Section(Kind):
    """A nested mapping parsed into dataclass ``cls``."""

    label = "mapping"

    def __init__(self, cls: type) -> None:
        self.cls = cls


class SectionList(Kind):
    def __init__(self, cls: type) -> None:
        self.cls = cls
        self.label = "list of mappings"


@dataclass(frozen=True)
class Option:
    kind: Kind
    doc: str
    nullable: bool = False
    # The sibling key this one excludes: an environment override of one drops the other.
    excludes: str | None = None


def opt(kind: Kind, doc: str, default: Any = MISSING, *, factory: Any = MISSING,
         nullable: bool = False, excludes: str | None = None, repr: bool = True) -> Any:
    return field(default=default, default_factory=factory, repr=repr,
                 metadata={"option": Option(kind, doc, nullable, excludes)})


def section(cls: type, doc: str) -> Any:
    return opt(Section(cls), doc, factory=cls)


# --------------------------------------------------------------------------------------------
# Parsing.
# --------------------------------------------------------------------------------------------

INVALID: Any = object()
Report = Callable[[str, str], None]  # (key relative to the section, "" = the section; message)


def valid(*values: object) -> bool:
    return all(v is not INVALID for v in values)


def read_secret_file(path: str) -> str:
    try:
        with open(path, "rb") as file:
            data = file.read()
    except OSError as err:
        raise Invalid(f"cannot read {path!r}: {err.strerror or err}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise Invalid(f"{path!r} is not UTF-8 text") from None
    # Files written by `echo` or editors end in a newline that is not part of the password.
    for newline in ("\r\n", "\n"):
        if text.endswith(newline):
            return text[: -len(newline)]
    return text


Check = Callable[[Mapping, dict, Report], None]


def join_path(path: str, key: str) -> str:
    if not key:
        return path
    if not path or key.startswith("["):
        return path + key
    return f"{path}.{key}"


class Problems:
    """Collects messages; a key set from the environment is named with its variable."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        self.env_sources: dict[str, str] = {}  # key path -> the environment variable that set it

    def add(self, path: str, message: str) -> None:
        variable = self.env_sources.get(path) or self.env_sources.get(path.split("[", 1)[0])
        where = f"{path} (from {variable})" if variable else path
        self.messages.append(f"{where}: {message}" if where else message)


def _option(f: dataclasses.Field) -> Option:
    return f.metadata["option"]


def _is_required(f: dataclasses.Field) -> bool:
    return f.default is MISSING and f.default_factory is MISSING


def _default(f: dataclasses.Field) -> object:
    return f.default_factory() if f.default_factory is not MISSING else f.default


def _parse_section(cls: type, raw: object, path: str, problems: Problems, checks: Mapping[type, Check]) -> Any:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        problems.add(path, f"expected a mapping, got {show(raw)}")
        return INVALID
    _report_unknown_keys(cls, raw, path, problems)
    values = {f.name: _parse_field(f, raw, path, problems, checks) for f in dataclasses.fields(cls)}
    check = checks.get(cls)
    if check:
        check(raw, values, lambda key, message: problems.add(join_path(path, key), message))
    if not valid(*values.values()):
        return INVALID
    return cls(**values)


def _report_unknown_keys(cls: type, raw: dict, path: str, problems: Problems) -> None:
    known = [f.name for f in dataclasses.fields(cls)]
    for key in raw:
        if not isinstance(key, str):
            problems.add(path, f"keys must be strings, got {show(key)}")
        elif key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.add(join_path(path, key), f"unknown key{hint}")


def _parse_field(f: dataclasses.Field, raw: dict, path: str, problems: Problems,
                 checks: Mapping[type, Check]) -> object:
    option, key_path = _option(f), join_path(path, f.name)
    value = raw.get(f.name)
    if value is None:
        # Null means "not given": the default, or null itself where that is allowed.
        if _is_required(f):
            problems.add(key_path, "required key is missing" if f.name not in raw else "required key has no value")
            return INVALID
        return None if (f.name in raw and option.nullable) else _default(f)
    if isinstance(option.kind, Section):
        return _parse_section(option.kind.cls, value, key_path, problems, checks)
    if isinstance(option.kind, SectionList):
        return _parse_section_list(option.kind.cls, value, key_path, problems, checks)
    try:
        return option.kind.parse(value)
    except Invalid as bad:
        problems.add(key_path + bad.suffix, bad.message)
        return INVALID


def _parse_section_list(cls: type, raw: object, path: str, problems: Problems, checks: Mapping[type, Check]) -> Any:
    if not isinstance(raw, list):
        problems.add(path, f"expected a list, got {show(raw)}")
        return INVALID
    items = [_parse_section(cls, item, f"{path}[{index}]", problems, checks) for index, item in enumerate(raw)]
    return tuple(items) if valid(*items) else INVALID




# --------------------------------------------------------------------------------------------
# Environment overrides: <PREFIX><PATH> sets the scalar key at PATH (the dotted key path upper-
# cased, '.' -> '_').  Key names contain underscores, so variables are looked up in a table made
# from the schema, never split.
# --------------------------------------------------------------------------------------------


class EnvExtension(Protocol):
    """Variables beyond one per scalar key (e.g. a password per entry of a list), for one parse."""

    def claim(self, variable: str, value: str) -> bool:
        """Take ``variable`` if it is one of this extension's; True if taken."""

    def apply(self, data: dict, problems: Problems) -> None:
        """Write what was claimed into the raw configuration (a copy)."""

    def unknown_reason(self, variable: str) -> str | None:
        """A better message than "unknown" for a variable of this extension's family."""


def _scalar_leaves(cls: type, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Option]]:
    for f in dataclasses.fields(cls):
        option, path = _option(f), prefix + (f.name,)
        if isinstance(option.kind, Section):
            yield from _scalar_leaves(option.kind.cls, path)
        elif not isinstance(option.kind, SectionList):
            yield path, option


def section_for(data: dict, path: tuple[str, ...]) -> dict | None:
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


def _drop_excluded_siblings(data: dict, overridden: dict[tuple[str, ...], Option]) -> None:
    # An override of a password replaces a password_file from the file (and vice versa);
    # only both from the environment is a conflict.
    for path, option in overridden.items():
        sibling = path[:-1] + (option.excludes,) if option.excludes else None
        if sibling and sibling not in overridden:
            section = section_for(data, path[:-1])
            if section is not None:
                section.pop(option.excludes, None)


class Schema:
    """A root dataclass with its cross-key rules and environment prefix."""

    def __init__(self, root: type, env_prefix: str, checks: Mapping[type, Check],
                 env_extension: Callable[[], EnvExtension] | None = None) -> None:
        self.root = root
        self.env_prefix = env_prefix
        self._checks = checks
        self._env_extension = env_extension
        leaves = list(_scalar_leaves(root))
        self._env_keys = {env_prefix + "_".join(path).upper(): (path, option) for path, option in leaves}
        assert len(self._env_keys) == len(leaves), "two keys map to one variable"
        self._env_by_path = {".".join(path): variable for variable, (path, _) in self._env_keys.items()}

    def load(self, path: str | os.PathLike, environ: Mapping[str, str] | None = None) -> Any:
        """Read and validate a YAML file; raises ConfigError listing every problem."""
        source = os.fspath(path)
        data, early = read_yaml(source)
        return self.parse(data, environ, source, early)

    def parse(self, data: object, environ: Mapping[str, str] | None = None, source: str = "<string>",
              early: list[str] | None = None) -> Any:
        """Validate already-parsed YAML, with the environment's overrides, into the root class."""
        early = list(early or [])
        if not isinstance(data, dict):
            got = "an empty document" if data is None else show(data)
            raise ConfigError(early + [f"{source}: expected a mapping at the top level, got {got}"], source)
        problems = Problems()
        problems.messages.extend(early)
        data = self._apply_environment(data, os.environ if environ is None else environ, problems)
        parsed = _parse_section(self.root, data, "", problems, self._checks)
        if problems.messages:
            raise ConfigError(problems.messages, source)
        return parsed

    def _apply_environment(self, data: dict, environ: Mapping[str, str], problems: Problems) -> dict:
        data = copy.deepcopy(data)
        extension = self._env_extension() if self._env_extension else None
        overridden: dict[tuple[str, ...], Option] = {}
        for variable in sorted(environ):
            if not variable.startswith(self.env_prefix):
                continue
            if extension is not None and extension.claim(variable, environ[variable]):
                continue
            if variable not in self._env_keys:
                problems.add("", f"{variable}: {self._unknown_variable_reason(variable, extension)}")
                continue
            path, option = self._env_keys[variable]
            section = section_for(data, path[:-1])
            if section is not None:  # else the section has the wrong type, reported when parsed
                section[path[-1]] = option.kind.from_env(environ[variable])
                problems.env_sources[".".join(path)] = variable
                overridden[path] = option
        _drop_excluded_siblings(data, overridden)
        if extension is not None:
            extension.apply(data, problems)
        return data

    def _unknown_variable_reason(self, variable: str, extension: EnvExtension | None) -> str:
        if extension is not None and (reason := extension.unknown_reason(variable)):
            return reason
        # Compared without the common prefix, which would make every name look alike.
        names = {name.removeprefix(self.env_prefix): name for name in self._env_keys}
        close = difflib.get_close_matches(variable.removeprefix(self.env_prefix), list(names), n=1)
        hint = f" (did you mean {names[close[0]]}?)" if close else ""
        return f"unknown configuration variable{hint}"

    def options(self) -> Iterator[OptionDoc]:
        """Every key of the schema, sections before their keys, in file order (the README's table)."""
        return _iter_options(self.root, "", self._env_by_path)


# --------------------------------------------------------------------------------------------
# YAML.
# --------------------------------------------------------------------------------------------


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

    def compose_scalar_node(self, anchor: Any) -> yaml.ScalarNode:  # str | None (the stubs say otherwise)
        # "password: &Tr0ub4dor" is an anchor named Tr0ub4dor on an empty value (null: no password),
        # "password: !" a tag on one: refused, instead of a password silently lost.
        event = self.peek_event()
        node = super().compose_scalar_node(anchor)
        if node.style is None and not node.value and (anchor is not None or event.tag == "!"):
            raise _TokenError(f"an empty value with an anchor (&) or a tag (!); {_QUOTE}", event.start_mark)
        return node

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        # An explicit tag the value does not fit ("!!int hunter2") fails in PyYAML with a ValueError
        # and the like that quote the value.
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, TypeError, KeyError, AttributeError):
            raise _TokenError(f"a value its tag (!!int, !!float, ...) does not take; {_QUOTE}",
                              node.start_mark) from None


_QUOTE = "quote a value that starts with *, & or ! (a password, say)"


class _TokenError(yaml.MarkedYAMLError):
    """A problem of ours whose text quotes nothing of the file."""

    def __init__(self, problem: str, mark: yaml.Mark) -> None:
        super().__init__(problem=problem, problem_mark=mark)


def read_yaml(source: str) -> tuple[object, list[str]]:
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
    except (ValueError, TypeError, KeyError, AttributeError):  # a tag's constructor, outside construct_object
        raise ConfigError([f"{source}: YAML error: a value its tag (!!int, !!set, ...) does not take; {_QUOTE}"],
                          source) from None
    early = [f"{source}:{mark.line + 1}:{mark.column + 1}: duplicate key {key!r}" for key, mark in loader.duplicates]
    return data, early


def _yaml_error_message(source: str, err: yaml.YAMLError) -> str:
    # Built from the parts, not str(err): that quotes the offending line, which may hold a password.
    if isinstance(err, yaml.MarkedYAMLError):
        mark = err.problem_mark or err.context_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        if isinstance(err, _TokenError):
            return f"{where}: YAML syntax error: {err.problem}"
        token = _token_error(f"{err.context or ''} {err.problem or ''}")
        if token is not None:
            return f"{where}: YAML syntax error: {token}"
        context = f"{err.context}, " if err.context else ""
        return f"{where}: YAML syntax error: {context}{err.problem}"
    if isinstance(err, yaml.reader.ReaderError):
        return f"{source}: not valid text at byte {err.position}: {err.reason}"
    return f"{source}: YAML error"


def _token_error(said: str) -> str | None:
    """An error about an alias (*name), an anchor (&name) or a tag (!name) without the name, which
    PyYAML quotes: it is the text of an unquoted value such as "password: *hunter2"."""
    for word, sign in (("alias", "*"), ("anchor", "&"), ("tag", "!")):
        if word in said:
            how = next((how for how in ("undefined", "duplicate") if how in said),
                       "unknown" if "constructor" in said else "malformed")
            return f"{how} {word} (a value that starts with {sign}); {_QUOTE}"
    return None


# --------------------------------------------------------------------------------------------
# Reference documentation (for the README).
# --------------------------------------------------------------------------------------------


class OptionDoc(NamedTuple):
    path: str            # e.g. "upstream.ssl.mode"; list entries as "users[].name"
    type: str            # e.g. "integer 1..65535"
    default: str         # YAML-ish text; "required" for required keys
    env: str | None      # the environment variable, None where there is none
    doc: str


def _iter_options(cls: type, prefix: str, env_by_path: Mapping[str, str]) -> Iterator[OptionDoc]:
    for f in dataclasses.fields(cls):
        option, path = _option(f), join_path(prefix, f.name)
        kind = option.kind
        yield OptionDoc(path, kind.label, _default_text(f), env_by_path.get(path), option.doc)
        if isinstance(kind, Section):
            yield from _iter_options(kind.cls, path, env_by_path)
        elif isinstance(kind, SectionList):
            yield from _iter_options(kind.cls, path + "[]", env_by_path)


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
