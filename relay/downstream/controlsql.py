"""The statements that control the relay's upstream, read as MariaDB's grammar reads them
(sql/sql_yacc.yy: ``change``, ``slave``, ``reset``): STOP/START SLAVE (or REPLICA), CHANGE MASTER TO and
RESET SLAVE.  Pure: a statement's text in, a frozen statement or an error out.

    parse_control("CHANGE MASTER TO MASTER_HOST='db2', MASTER_PORT=3306")  -> ChangeMaster(...)
    parse_control("SELECT 1")                                             -> None (not one of them)

What MariaDB's parser refuses gets its ER_PARSE_ERROR (1064, "... near '<the rest>' at line N"): a
value of the wrong kind, an unknown option, a missing comma.  What it accepts but the relay does not
do (MASTER_LOG_FILE, MASTER_DELAY, a named connection, START SLAVE UNTIL, ...) is parsed all the same
and listed in ``unsupported``, answered with ER_NOT_SUPPORTED_YET (1235) once the user's privilege
is checked, as MariaDB checks privileges after parsing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import InputError
from ..ingest.settings import UpstreamChange
from ..protocol.codes import ER_PARSE_ERROR
from .queries import Error

# ---------------------------------------------------------------------------- statements


@dataclass(frozen=True)
class StopSlave:
    unsupported: tuple[str, ...] = ()


@dataclass(frozen=True)
class StartSlave:
    unsupported: tuple[str, ...] = ()


@dataclass(frozen=True)
class ResetSlave:
    all: bool = False
    unsupported: tuple[str, ...] = ()


@dataclass(frozen=True)
class ChangeMaster:
    change: UpstreamChange = field(default_factory=UpstreamChange)
    unsupported: tuple[str, ...] = ()


ControlStatement = StopSlave | StartSlave | ResetSlave | ChangeMaster

# ---------------------------------------------------------------------------- tokens


@dataclass(frozen=True)
class Token:
    kind: str  # "word" (keyword or plain identifier), "ident" (`quoted`), "string", "number", "symbol", "end"
    value: str  # a string's value (escapes undone), a word or number as written
    start: int  # offset in the statement, for the parse error's "near"

    def is_word(self, *words: str) -> bool:
        return self.kind == "word" and self.value.upper() in words


class ParseError(InputError):
    """Where MariaDB's parser would stop: the token it could not take."""

    def __init__(self, token: Token) -> None:
        super().__init__(token.start)
        self.token = token


# Backslash escapes of a quoted string (sql_lex.cc): \% and \_ keep their backslash (LIKE patterns).
_ESCAPES = {"0": "\0", "b": "\b", "n": "\n", "r": "\r", "t": "\t", "Z": "\x1a", "%": "\\%", "_": "\\_"}
_NUMBER = re.compile(r"0[xX][0-9A-Fa-f]+(?![\w$])|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?![\w$])")
_WORD = re.compile(r"[\w$\x80-\U0010ffff]+")


def tokenize(text: str) -> list[Token]:
    """The tokens of ``text``, ending with an "end" token.  Comments (``/* */``, ``#``, ``-- ``) are
    left out; a string or comment that is never closed is a ParseError where it begins."""
    tokens, at = [], 0
    while True:
        at = _skip_space_and_comments(text, at)
        if at >= len(text):
            tokens.append(Token("end", "", len(text)))
            return tokens
        char = text[at]
        if char in "'\"`":
            value, end = _quoted(text, at)
            tokens.append(Token("ident" if char == "`" else "string", value, at))
        elif number := _NUMBER.match(text, at):
            end = number.end()
            tokens.append(Token("number", number.group(), at))
        elif word := _WORD.match(text, at):
            end = word.end()
            tokens.append(Token("word", word.group(), at))
        else:
            end = at + 1
            tokens.append(Token("symbol", char, at))
        at = end


def _skip_space_and_comments(text: str, at: int) -> int:
    while at < len(text):
        if text[at].isspace():
            at += 1
        elif text.startswith("/*", at):
            end = text.find("*/", at + 2)
            if end < 0:
                raise ParseError(Token("symbol", "/*", at))
            at = end + 2
        elif text[at] == "#" or (text.startswith("--", at) and (at + 2 == len(text) or text[at + 2].isspace())):
            end = text.find("\n", at)
            at = len(text) if end < 0 else end + 1
        else:
            break
    return at


def _quoted(text: str, start: int) -> tuple[str, int]:
    """The value of the quoted string or identifier at ``start`` and where it ends: a doubled quote is
    one, and in strings a backslash escapes the next character."""
    quote, value, at = text[start], [], start + 1
    while at < len(text):
        char = text[at]
        if char == quote:
            if text.startswith(quote, at + 1):
                value.append(quote)
                at += 2
                continue
            return "".join(value), at + 1
        if char == "\\" and quote != "`" and at + 1 < len(text):
            value.append(_ESCAPES.get(text[at + 1], text[at + 1]))
            at += 2
            continue
        value.append(char)
        at += 1
    raise ParseError(Token("string", "", start))


# ---------------------------------------------------------------------------- the grammar


class _Parser:
    def __init__(self, tokens: list[Token]) -> None:
        self.tokens = tokens
        self.at = 0
        self.unsupported: list[str] = []

    @property
    def token(self) -> Token:
        return self.tokens[self.at]

    def take(self) -> Token:
        token = self.tokens[self.at]
        self.at += 1
        return token

    def fail(self) -> ParseError:
        return ParseError(self.token)

    def expect_word(self, *words: str) -> str:
        if not self.token.is_word(*words):
            raise self.fail()
        return self.take().value.upper()

    def accept_word(self, *words: str) -> str | None:
        return self.take().value.upper() if self.token.is_word(*words) else None

    def expect_symbol(self, symbol: str) -> None:
        if self.token.kind != "symbol" or self.token.value != symbol:
            raise self.fail()
        self.take()

    def at_symbol(self, symbol: str) -> bool:
        return self.token.kind == "symbol" and self.token.value == symbol

    def end(self) -> None:
        if self.at_symbol(";"):
            self.take()
        if self.token.kind != "end":
            raise self.fail()

    def string(self) -> str:
        if self.token.kind != "string":
            raise self.fail()
        return self.take().value

    def number(self) -> int:
        """MariaDB's ulong_num: a decimal, hexadecimal (0x) or fractional number (read as its whole part)."""
        if self.token.kind != "number":
            raise self.fail()
        text = self.take().value
        if text[:2].lower() == "0x":
            return int(text, 16)
        return int(float(text)) if any(c in text for c in ".eE") else int(text)

    def connection_name(self) -> None:
        """The optional connection name of MariaDB's multi-source replication: the relay has one
        upstream, the default connection ''."""
        if self.token.kind == "string":
            name = self.take().value
            if name:
                self.unsupported.append(f"the named connection '{name}' (the relay has one upstream, the "
                                        "default connection '')")

    def for_channel(self) -> None:
        if self.accept_word("FOR"):
            self.expect_word("CHANNEL")
            name = self.string()
            if name:
                self.unsupported.append(f"FOR CHANNEL '{name}' (the relay has one upstream, the default one)")


def _stop_start(parser: _Parser, verb: str) -> ControlStatement:
    """STOP|START SLAVE|REPLICA ['connection'] [IO_THREAD|SQL_THREAD, ...] [UNTIL ...] [FOR CHANNEL 'c'].
    For the relay, receiving is storing: either thread is the whole of ingest."""
    if parser.accept_word("ALL"):
        parser.expect_word("SLAVES", "REPLICAS")
        parser.unsupported.append(f"{verb} ALL SLAVES (the relay has one upstream: {verb} SLAVE)")
    else:
        parser.expect_word("SLAVE", "REPLICA")
        parser.connection_name()
    if parser.accept_word("IO_THREAD", "SQL_THREAD"):
        while parser.at_symbol(","):
            parser.take()
            parser.expect_word("IO_THREAD", "SQL_THREAD")
    if verb == "START" and parser.accept_word("UNTIL"):
        parser.unsupported.append("START SLAVE UNTIL (the relay stores everything the primary sends)")
        parser.at = len(parser.tokens) - 1  # the condition is not read: the statement is refused anyway
        return StartSlave(tuple(parser.unsupported))
    parser.for_channel()
    parser.end()
    unsupported = tuple(parser.unsupported)
    return StopSlave(unsupported) if verb == "STOP" else StartSlave(unsupported)


def _reset(parser: _Parser) -> ResetSlave:
    """RESET SLAVE|REPLICA ['connection'] [ALL] [FOR CHANNEL 'c']."""
    parser.expect_word("SLAVE", "REPLICA")
    parser.connection_name()
    everything = parser.accept_word("ALL") is not None
    parser.for_channel()
    parser.end()
    return ResetSlave(everything, tuple(parser.unsupported))


_STRING_OPTIONS = {"MASTER_HOST": "host", "MASTER_USER": "user", "MASTER_PASSWORD": "password",
                   "MASTER_SSL_CA": "ssl_ca", "MASTER_SSL_CERT": "ssl_cert", "MASTER_SSL_KEY": "ssl_key"}
_NUMBER_OPTIONS = {"MASTER_PORT": "port"}
_FLAG_OPTIONS = {"MASTER_SSL": "ssl", "MASTER_SSL_VERIFY_SERVER_CERT": "ssl_verify_server_cert"}
# Options MariaDB's grammar has that the relay does not take, by the value they are given, and why.
_OTHER_STRING_OPTIONS = {
    "MASTER_SSL_CAPATH": "give MASTER_SSL_CA, a CA bundle", "MASTER_SSL_CIPHER": "TLS ciphers are Python's defaults",
    "MASTER_SSL_CRL": "no certificate revocation lists", "MASTER_SSL_CRLPATH": "no certificate revocation lists",
    "MASTER_LOG_FILE": "the relay resumes where its stored history ends; a fresh one starts where "
                       "upstream.start says", "RELAY_LOG_FILE": "the relay has no relay log"}
_OTHER_NUMBER_OPTIONS = {
    "MASTER_LOG_POS": "the relay resumes where its stored history ends",
    "RELAY_LOG_POS": "the relay has no relay log",
    "MASTER_CONNECT_RETRY": "see upstream.reconnect in the configuration",
    "MASTER_DELAY": "the relay stores as soon as it receives",
    "MASTER_HEARTBEAT_PERIOD": "see upstream.heartbeat_period in the configuration"}
_LIST_OPTIONS = {"IGNORE_SERVER_IDS": "see upstream.ignore_server_ids in the configuration",
                 "DO_DOMAIN_IDS": "the relay stores every domain", "IGNORE_DOMAIN_IDS": "the relay stores every domain"}


def _change_master(parser: _Parser) -> ChangeMaster:
    """CHANGE MASTER ['connection'] TO option [, option ...] [FOR CHANNEL 'c']."""
    parser.expect_word("MASTER")
    parser.connection_name()
    parser.expect_word("TO")
    given: dict[str, object] = {}
    while True:
        _option(parser, given)
        if not parser.at_symbol(","):
            break
        parser.take()
    parser.for_channel()
    parser.end()
    return ChangeMaster(UpstreamChange(**given), tuple(parser.unsupported))  # type: ignore[arg-type]


def _option(parser: _Parser, given: dict[str, object]) -> None:
    if parser.token.kind != "word":
        raise parser.fail()
    name = parser.token.value.upper()
    known = (_STRING_OPTIONS, _NUMBER_OPTIONS, _FLAG_OPTIONS, _OTHER_STRING_OPTIONS, _OTHER_NUMBER_OPTIONS,
             _LIST_OPTIONS)
    if not any(name in options for options in known) and name not in ("MASTER_USE_GTID", "MASTER_DEMOTE_TO_SLAVE"):
        raise parser.fail()
    parser.take()
    parser.expect_symbol("=")
    if name in _STRING_OPTIONS:
        given[_STRING_OPTIONS[name]] = parser.string()
    elif name in _NUMBER_OPTIONS:
        given[_NUMBER_OPTIONS[name]] = parser.number()
    elif name in _FLAG_OPTIONS:
        given[_FLAG_OPTIONS[name]] = parser.number() != 0
    elif name == "MASTER_USE_GTID":
        given["use_gtid"] = parser.expect_word("CURRENT_POS", "SLAVE_POS", "NO").lower()
    elif name == "MASTER_DEMOTE_TO_SLAVE":
        if not parser.accept_word("TRUE", "FALSE"):
            parser.number()
        parser.unsupported.append("MASTER_DEMOTE_TO_SLAVE (the relay has no transactions of its own to demote)")
    elif name in _LIST_OPTIONS:
        parser.expect_symbol("(")
        if not parser.at_symbol(")"):
            parser.number()
            while parser.at_symbol(","):
                parser.take()
                parser.number()
        parser.expect_symbol(")")
        parser.unsupported.append(f"{name} ({_LIST_OPTIONS[name]})")
    else:
        if name in _OTHER_STRING_OPTIONS:
            parser.string()
        else:
            parser.number() if name != "MASTER_HEARTBEAT_PERIOD" else _heartbeat(parser)
        reason = _OTHER_STRING_OPTIONS.get(name) or _OTHER_NUMBER_OPTIONS[name]
        parser.unsupported.append(f"{name} ({reason})")


def _heartbeat(parser: _Parser) -> None:
    """MASTER_HEARTBEAT_PERIOD takes any number (NUM_literal), a signed one included."""
    if parser.at_symbol("-") or parser.at_symbol("+"):
        parser.take()
    parser.number()


def parse_control(sql: str) -> ControlStatement | Error | None:
    """The statement ``sql`` is, if it is one of STOP/START SLAVE, CHANGE MASTER TO and RESET SLAVE;
    an ER_PARSE_ERROR if it begins as one and MariaDB's grammar would refuse it; None otherwise."""
    text = sql.rstrip().rstrip(";").rstrip()
    try:
        tokens = tokenize(text)
    except ParseError as bad:
        return parse_error(text, bad.token.start) if _first_words(text) else None
    if not _is_control(tokens[0], tokens[1] if len(tokens) > 1 else tokens[0]):
        return None
    parser = _Parser(tokens)
    verb = parser.take().value.upper()
    try:
        if verb in ("STOP", "START"):
            return _stop_start(parser, verb)
        if verb == "RESET":
            return _reset(parser)
        return _change_master(parser)
    except ParseError as bad:
        return parse_error(text, bad.token.start)


def _is_control(first: Token, second: Token) -> bool:
    """Whether a statement beginning with these tokens is one of ours: every STOP (MariaDB has no
    other), every START but START TRANSACTION, RESET SLAVE|REPLICA and CHANGE MASTER."""
    if not first.is_word("STOP", "START", "RESET", "CHANGE"):
        return False
    verb = first.value.upper()
    if verb == "STOP":
        return True
    if verb == "START":
        return not second.is_word("TRANSACTION")
    return second.is_word("SLAVE", "REPLICA") if verb == "RESET" else second.is_word("MASTER")


def _first_words(text: str) -> bool:
    """Whether ``text`` (which does not tokenize) begins as a control statement."""
    words = [Token("word", word, 0) for word in text.split(None, 2)[:2]]
    return _is_control(words[0], words[-1]) if words else False


def parse_error(text: str, at: int) -> Error:
    """MariaDB's ER_PARSE_ERROR: the statement from where the parser stopped, 80 characters of it."""
    line = text.count("\n", 0, at) + 1
    return Error(ER_PARSE_ERROR, "You have an error in your SQL syntax; check the manual that corresponds to your "
                 f"MariaDB server version for the right syntax to use near '{text[at:at + 80]}' at line {line}",
                 "42000")


_PASSWORD_VALUE = re.compile(r"""(MASTER_PASSWORD\s*=\s*)('(?:[^'\\]|\\.|'')*'?|"(?:[^"\\]|\\.|"")*"?)""",
                             re.IGNORECASE | re.DOTALL)


def without_passwords(sql: str) -> str:
    """``sql`` for a log line: MASTER_PASSWORD's value replaced by '***'."""
    return _PASSWORD_VALUE.sub(r"\1'***'", sql)
