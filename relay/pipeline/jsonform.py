"""The export's JSON form of row values: one row image of relay.rows' change rows as JSON
text, each column normalised by its type (row_json), and the form of values whose column type
is unknown (value_json). The Spark source and ``binlog-relay export`` write it.

Each column type's form is one entry of ``_FORMS`` (a ``Form``): ``convert``, the value turned
into a JSON-ready Python value, which the *general path* (``row_json_general``) hands to
json's encoder; and ``text``, the Python expression of the value's JSON text that the
*generated encoders* inline. An encoder is Python source written and compiled per table map
and set of columns present (as the row readers of relay.rows.coltypes.readers are): one
f-string per row, each column's text computed in place, no dict built, no call to json's
encoder. It expects the Python types the decoder gives (an int, a str, a Decimal, a
datetime, a zero date's str...); a ``text`` raises for a value of another type, and the row
is then written by the general path.

When the optional C module ``relay.pipeline._jsontext`` is built (setup.py; its source's
header says what it writes), each generated encoder is wrapped in a compiled one
(``_jsontext.Encoder``), which writes the whole row in one call from each column's C kind
(``Form.kind``: int, str, Decimal, datetime...) and hands any row it does not expect to the
generated encoder. All three give the same text, byte for byte (tests/unit/test_jsonform.py
checks it on every fixture binlog and on edge values, with the C module and without it).
"""

from __future__ import annotations

import base64
import binascii
import datetime as _dt
import json
import struct
from collections.abc import Callable
from decimal import Decimal
from typing import Any, NamedTuple, overload

from ..rows import coltypes as ct
from ..rows.tablemap import TableMap

try:
    import relay.pipeline._jsontext as _jsontext
except ImportError:  # not built (no C compiler where the package was installed): Python only
    _jsontext = None
else:
    _jsontext.setup(Decimal)

__all__ = ["row_json", "row_json_general", "value_json"]

Convert = Callable[[Any], Any]  # a decoded value -> its JSON-ready form
Encode = Callable[[dict[str, Any]], str]  # a row image -> its JSON text


def value_json(v: Any) -> Any:
    """A Python value of the row decoder as a JSON-ready value, when no column type is known
    (MySQL JSON documents, and the fallback of row_json)."""
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v
    if isinstance(v, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(v)).decode("ascii")
    if isinstance(v, Decimal):
        return format(v, "f")
    if isinstance(v, _dt.datetime):
        return _datetime_text(v, 6 if v.microsecond else 0)
    if isinstance(v, _dt.date):
        return v.isoformat()
    if isinstance(v, _dt.timedelta):
        return _time_text(v, 6 if v.microseconds else 0)
    if isinstance(v, (set, frozenset)):
        return ",".join(sorted(v))
    if isinstance(v, ct.JsonPartialUpdate):
        # the before value was not logged: the change itself, marked as such
        return {"$json_diffs": [{"op": d.operation, "path": d.path, **({} if d.operation == "REMOVE" else
                                                                        {"value": value_json(d.value)})}
                                for d in v.diffs]}
    if isinstance(v, dict):
        return {str(k): value_json(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [value_json(x) for x in v]
    return str(v)


def _datetime_text(v: _dt.datetime, fsp: int) -> str:
    if v.tzinfo is not None:
        v = v.astimezone(_dt.UTC)
    text = (f"{v.year:04d}-{v.month:02d}-{v.day:02d} "
            f"{v.hour:02d}:{v.minute:02d}:{v.second:02d}")
    return text + "." + f"{v.microsecond:06d}"[:fsp] if fsp else text


_MICROSECOND = _dt.timedelta(microseconds=1)


def _time_text(v: _dt.timedelta, fsp: int) -> str:
    us = v // _MICROSECOND  # TypeError for anything but a timedelta
    sign = "-" if us < 0 else ""
    secs, us = divmod(abs(us), 1_000_000)
    text = f"{sign}{secs // 3600:02d}:{secs // 60 % 60:02d}:{secs % 60:02d}"
    return text + "." + f"{us:06d}"[:fsp] if fsp else text


def _float32(v: float) -> float:
    """The shortest decimal that reads back as the same float32 (as the server prints it)."""
    packed = struct.pack("<f", v)
    for digits in range(1, 10):
        short = float(f"{v:.{digits}g}")
        try:
            if struct.pack("<f", short) == packed:
                return short
        except OverflowError:  # rounded up past FLT_MAX
            continue
    return v


def _datetime_form(fsp: int) -> Convert:
    return lambda v: v if isinstance(v, str) else _datetime_text(v, fsp)


def _time_form(fsp: int) -> Convert:
    return lambda v: v if isinstance(v, str) else _time_text(v, fsp)


def _date_form(v: Any) -> Any:
    return v if isinstance(v, str) else v.isoformat()  # a zero date stays the server's text


def _decimal_form(v: Decimal) -> str:
    return format(v, "f")


def _vector_form(v: tuple[float, ...]) -> list[float]:
    return [_float32(x) for x in v]


def _set_form(tm: TableMap, i: int) -> Convert | None:
    """SET members in definition order, when the names are known (else the bit mask, a number)."""
    names = tm.set_values[i] if tm.set_values is not None else None
    if names is None:
        return None
    order = {name: k for k, name in enumerate(names)}
    return lambda v: v if isinstance(v, int) else ",".join(sorted(v, key=order.__getitem__))


# --------------------------------------------------------------------------- the forms


class Form(NamedTuple):
    """One column's JSON form.

    convert: the decoded value -> its JSON-ready value, for the general path; None: the value
    is its own JSON form (bytes become base64).

    text: for the generated encoders, an expression of the JSON text of a value that is not
    None, ``{v}`` standing for the value; None: the general path's conversion, one call per
    value. It uses only the names of _TEXT_GLOBALS (and _d) and no quote marks; it raises for a
    value whose Python type it does not expect (the row is then written by the general
    path), but for the integers' ``{v}``, which trusts the decoder: an int written as it is
    (a call per value to check it would cost a third of the column). quote: the text is
    written between quote marks (a JSON string whose text needs no escapes). text_str: a
    str value (a zero date, which Python cannot hold, as the server's text) is written as
    that string.

    kind, arg: how the compiled encoder (relay/pipeline/_jsontext.c) writes the column, one
    of the K_* below, with the same text as ``text``; 0: by calling the Python text (or the
    general path's conversion), one call per value. arg: the text's length for K_DATETIME,
    the fraction digits for K_TIME."""

    convert: Convert | None = None
    text: str | None = None
    quote: bool = False
    text_str: bool = False
    kind: int = 0
    arg: int = 0


# The compiled encoder's column kinds (the K_* of relay/pipeline/_jsontext.c, same numbers: tests/unit/test_c_codes.py).
K_INT, K_STR, K_TEXT, K_B64, K_DECIMAL, K_DATETIME, K_DATE, K_TIME, K_FLOAT, K_CALL = range(1, 11)
K_NULLABLE = 0x80  # or-ed into a kind: None is written as null


def _datetime_fsp(fsp: int) -> Form:
    # isoformat's microseconds cut to the fsp, what _datetime_text writes 3x faster; an aware
    # value is converted to UTC first (_stamp), as _datetime_text does
    n = _stamp_length(fsp)
    naive = "_dtiso({v}, _SP, _USEC)" + (f"[:{n}]" if n < 26 else "")
    return Form(_datetime_form(fsp), f"{naive} if {{v}}.tzinfo is None else _stamp({{v}}, {n})",
                quote=True, text_str=True, kind=K_DATETIME, arg=n)


def _timestamp_fsp(fsp: int) -> Form:
    n = _stamp_length(fsp)
    return Form(_datetime_form(fsp), f"_stamp({{v}}, {n})", quote=True, text_str=True, kind=K_DATETIME, arg=n)


def _stamp_length(fsp: int) -> int:
    return 20 + min(fsp, 6) if fsp else 19  # "YYYY-MM-DD HH:MM:SS" and "." + fsp digits


def _time_fsp(fsp: int) -> Form:
    return Form(_time_form(fsp), f"_time({{v}}, {fsp})", quote=True, text_str=True, kind=K_TIME, arg=min(fsp, 6))


# str() of a Decimal is format(v, "f") unless it has an exponent (a decoded NEWDECIMAL has
# one past 6 fraction digits: 1E-9), and 40% cheaper
_DECIMAL = Form(_decimal_form, "(_dfmt({v}, _F) if _E in (_d := _dstr({v})) else _d)", quote=True,
                kind=K_DECIMAL)


def _strings(tm: TableMap, i: int) -> Form:
    """CHAR, VARCHAR, BINARY, TEXT, BLOB, ENUM, SET and GEOMETRY: str, bytes (base64), the
    ENUM's name or index, the SET's names or bit mask."""
    kind = ct.member_kind(tm.column_types[i], tm.column_meta[i])
    if kind == ct.SET:
        return Form(_set_form(tm, i))
    if kind == ct.ENUM:
        names = tm.enum_values is not None and tm.enum_values[i] is not None
        return _STR if names else Form(None, "_int({v})", kind=K_INT)
    if tm.column_types[i] == ct.GEOMETRY:
        return _BASE64
    codec = ct.charset_codec(tm.column_charsets[i] if tm.column_charsets else None)
    if codec == "binary":
        return _BASE64
    # a known charset: str; none (no charset metadata): str if the bytes were UTF-8, else bytes
    return _STR if codec is not None else Form(None, "_text({v})", kind=K_TEXT)


_STR = Form(None, "_str({v})", kind=K_STR)
_BASE64 = Form(None, "_b64({v}, newline=False).decode()", quote=True, kind=K_B64)
_DATE = Form(_date_form, "{v}.isoformat()", quote=True, text_str=True, kind=K_DATE)


def _same(form: Form) -> Callable[[TableMap, int], Form]:
    return lambda tm, i: form


def _by_fsp(form: Callable[[int], Form]) -> Callable[[TableMap, int], Form]:
    return lambda tm, i: form(tm.column_meta[i])


# type code -> (table map, column index) -> the column's form. Without text (SET, VECTOR, and
# the types not here: MySQL's JSON, NULL) a column is written by the general path's
# conversion, one call per value.
_FORMS: dict[int, Callable[[TableMap, int], Form]] = {
    **dict.fromkeys((ct.TINY, ct.SHORT, ct.INT24, ct.LONG, ct.LONGLONG, ct.YEAR, ct.BIT),
                    _same(Form(None, "{v}", kind=K_INT))),
    ct.DOUBLE: _same(Form(None, "_float({v})", kind=K_FLOAT)),
    ct.FLOAT: _same(Form(_float32, "_float(_float32({v}))")),
    ct.NEWDECIMAL: _same(_DECIMAL),
    ct.DECIMAL: _same(Form(_decimal_form)),
    ct.DATETIME2: _by_fsp(_datetime_fsp),
    ct.DATETIME: _same(_datetime_fsp(0)),
    ct.TIMESTAMP2: _by_fsp(_timestamp_fsp),
    ct.TIMESTAMP: _same(_timestamp_fsp(0)),
    ct.TIME2: _by_fsp(_time_fsp),
    ct.TIME: _same(_time_fsp(0)),
    ct.DATE: _same(_DATE),
    ct.NEWDATE: _same(_DATE),
    ct.VECTOR: _same(Form(_vector_form)),
    **dict.fromkeys((ct.VARCHAR, ct.VAR_STRING, ct.STRING, ct.ENUM, ct.SET, ct.GEOMETRY, *ct.BLOB_TYPES),
                    _strings),
}


def _form(tm: TableMap, i: int) -> Form:
    form = _FORMS.get(tm.column_types[i])
    return Form() if form is None else form(tm, i)


# --------------------------------------------------------------------------- the general path

_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), check_circular=False,
                           default=value_json).encode
_CONVERTERS: dict[int, tuple[TableMap, dict[str, Convert]]] = {}  # id(table map) -> its converters


def _converters(tm: TableMap) -> dict[str, Convert]:
    hit = _CONVERTERS.get(id(tm))
    if hit is not None and hit[0] is tm:
        return hit[1]
    conv = {}
    for i, name in enumerate(tm.column_names):
        c = _form(tm, i).convert
        if c is not None:
            conv[name] = c
    if len(_CONVERTERS) > 4096:
        _CONVERTERS.clear()
    _CONVERTERS[id(tm)] = (tm, conv)
    return conv


@overload
def row_json_general(row: dict[str, Any], tm: TableMap | None = None) -> str: ...
@overload
def row_json_general(row: None, tm: TableMap | None = None) -> None: ...
def row_json_general(row: dict[str, Any] | None, tm: TableMap | None = None) -> str | None:
    """row_json by the general path: each column's value converted (Form.convert), the dict
    written by json's encoder. It takes any row and any value; row_json uses it for what its
    generated encoders do not expect, and the tests as the reference."""
    if row is None:
        return None
    if tm is None:
        return _encode(row)
    conv = _converters(tm)
    out: dict[str, Any] = {}
    for k, v in row.items():
        if v is None:
            out[k] = None
            continue
        c = conv.get(k)
        if c is not None:
            out[k] = c(v)
        elif type(v) is bytes:
            out[k] = base64.b64encode(v).decode("ascii")
        else:
            out[k] = v
    return _encode(out)


# --------------------------------------------------------------------------- the generated encoders

_NONFINITE = {"inf": "Infinity", "-inf": "-Infinity", "nan": "NaN"}  # json's allow_nan spelling


def _float(v: float) -> str:
    """A float's JSON text, as json writes it (float.__repr__; TypeError for an int)."""
    r = float.__repr__(v)
    return _NONFINITE[r] if r[-1] in "fn" else r


def _text(v: Any) -> str:
    """A text column whose charset is unknown: str if its bytes were UTF-8, else bytes (any
    other value: TypeError)."""
    if v.__class__ is str:
        return _str(v)
    return '"' + binascii.b2a_base64(v, newline=False).decode() + '"'  # TypeError for others


def _stamp(v: _dt.datetime, n: int) -> str:
    """A TIMESTAMP's (an aware datetime's) text cut to n characters: in UTC, as
    _datetime_text converts it."""
    t = _dtiso(v, " ", "microseconds")
    if len(t) > 26 and t[26:] != "+00:00":
        t = _dtiso(v.astimezone(_dt.UTC), " ", "microseconds")
    return t[:n]


_str = json.encoder.encode_basestring  # the encoder's own (C) string escaping, quotes included
_dtiso = _dt.datetime.isoformat
_TEXT_GLOBALS: dict[str, Any] = {
    "_NULL": "null", "_int": int.__repr__, "_str": _str, "_text": _text, "_float": _float,
    "_float32": _float32, "_b64": binascii.b2a_base64, "_dstr": Decimal.__str__, "_dfmt": Decimal.__format__,
    "_F": "f", "_E": "E", "_dtiso": _dtiso, "_SP": " ", "_USEC": "microseconds", "_stamp": _stamp, "_time": _time_text,
}


def _general_text(convert: Convert | None) -> Callable[[Any], str]:
    """One value's text as the general path writes it (a column whose form has no text)."""
    if convert is None:
        return lambda v: _encode(base64.b64encode(v).decode("ascii") if type(v) is bytes else v)
    return lambda v: "null" if v is None else _encode(convert(v))


def compile_encoder(tm: TableMap, idx: tuple[int, ...], otherwise: Encode) -> Encode:
    """The encoder of the row images of tm whose columns are idx, in that order: the
    generated Python encoder (python_encoder), wrapped in the compiled one (compiled_encoder)
    when the C module is built. A row neither fits goes to otherwise."""
    python = python_encoder(tm, idx, otherwise)
    return python if _jsontext is None else compiled_encoder(tm, idx, python)


def python_encoder(tm: TableMap, idx: tuple[int, ...], otherwise: Encode) -> Encode:
    """Generate the encoder of the row images of tm whose columns are idx, in that order:
    row -> JSON text, one f-string with each column's text inline (Form.text), NULL tested
    where a column is nullable. The values are taken in the dict's order without looking at
    its keys: a row must have exactly these columns, in this order, as the decoder builds an
    image. A row it does not fit (other columns, a value of an unexpected type) goes to
    otherwise. Names enter the source as string literals (repr), objects as globals.
"""
    env: dict[str, Any] = dict(_TEXT_GLOBALS, _otherwise=otherwise)
    pieces: list[str] = []  # string literals and f-string replacement fields, concatenated
    lines: list[str] = []
    literal = "{"
    for k, i in enumerate(idx):
        form = _form(tm, i)
        literal += ("," if k else "") + _str(tm.column_names[i]) + ":"
        v = f"v{k}"
        quote = False
        if form.text is None:
            env[f"g{k}"] = _general_text(form.convert)
            expr = f"g{k}({v})"  # NULL included
        else:
            expr = form.text.format(v=v)
            nullable = _nullable(tm, i, form)
            if form.text_str or nullable:
                text = _whole_text(form, v, nullable)
                if form.quote or form.text_str:
                    lines.append(f"t{k} = {text}")
                    expr = f"t{k}"
                else:
                    expr = text
            else:
                quote = form.quote  # the quote marks go into the literals around it
        pieces += [repr(literal + ('"' if quote else "")), f"f'{{{expr}}}'"]
        literal = '"' if quote else ""
    pieces.append(repr(literal + "}"))
    source = ["def encode(row):",
              "    try:",
              f"        ({''.join(f'v{k}, ' for k in range(len(idx)))}) = row.values()",
              *(f"        {line}" for line in lines),
              f"        return {' '.join(pieces)}",
              "    except Exception:",
              "        return _otherwise(row)"]
    exec(compile("\n".join(source), f"<json encoder {tm.database}.{tm.table}>", "exec"), env)
    return env["encode"]


def _nullable(tm: TableMap, i: int, form: Form) -> bool:
    """Whether the encoders write None as null in column i themselves (else a value of None
    raises, and its row takes the general path): "{v}", an integer as it is, would write
    None, so it is tested whatever the table map says."""
    return tm.nullable[i] or form.text == "{v}"


def _whole_text(form: Form, v: str, nullable: bool) -> str:
    """The expression of a column's whole text (quote marks, a str value, NULL), value v."""
    assert form.text is not None  # a form the general path writes has no text to put in
    expr = form.text.format(v=v)
    text = f"'\"' f'{{{expr}}}' '\"'" if form.quote else expr
    if form.text_str:
        text = f"_str({v}) if {v}.__class__ is str else {text}"
    if nullable:
        text = f"_NULL if {v} is None else {text}"
    return text


def compiled_encoder(tm: TableMap, idx: tuple[int, ...], otherwise: Encode) -> Encode:
    """The compiled encoder (relay/pipeline/_jsontext.c) of the row images of tm whose
    columns are idx, in that order, with the text python_encoder writes: each column by its
    Form.kind, or by a call per value to its Python text (K_CALL). A row it does not write
    (not a dict of len(idx) values, a value of a type its kind does not take, None where
    the Python text raises, an exception) goes to otherwise: compile_encoder hands it the
    generated Python encoder. Raises AttributeError when the C module is not built."""
    parts: list[str] = []  # the text before each value, and the closing brace
    kinds = bytearray()
    args: list[Any] = []
    for k, i in enumerate(idx):
        form = _form(tm, i)
        parts.append(("{" if k == 0 else ",") + _str(tm.column_names[i]) + ":")
        nullable = _nullable(tm, i, form)
        if form.kind:
            kinds.append(form.kind | (K_NULLABLE if nullable else 0))
            args.append(form.arg)
        else:
            kinds.append(K_CALL)
            args.append(_text_function(form, nullable))
    parts.append("}" if idx else "{}")
    return _jsontext.Encoder(tuple(parts), bytes(kinds), tuple(args), otherwise)


def _text_function(form: Form, nullable: bool) -> Callable[[Any], str]:
    """value -> the column's whole text, for a form the compiled encoder has no kind for."""
    if form.text is None:
        return _general_text(form.convert)
    env = dict(_TEXT_GLOBALS)
    exec(compile(f"def text(v):\n    return {_whole_text(form, 'v', nullable)}", "<json text>", "exec"), env)
    return env["text"]


class _TableEncoders:
    """The encoders of one table map: the full image's, and one per other set of columns
    (binlog_row_image=MINIMAL/NOBLOB), made when first seen."""

    __slots__ = ("tm", "names", "index", "full", "partial")

    def __init__(self, tm: TableMap) -> None:
        self.tm = tm
        self.names = tm.column_names
        self.index = {name: i for i, name in enumerate(tm.column_names)}
        self.partial: dict[tuple[str, ...], Encode] = {}
        self.full = compile_encoder(tm, tuple(range(tm.column_count)), self.other)

    def other(self, row: dict[str, Any]) -> str:
        """A row the full image's encoder does not fit."""
        keys = tuple(row)
        if keys == self.names:  # a value of another type: the general path
            return row_json_general(row, self.tm)
        encode = self.partial.get(keys)
        if encode is None:
            encode = self._general
            if len(set(keys)) == len(keys) and all(k in self.index for k in keys):
                encode = compile_encoder(self.tm, tuple(self.index[k] for k in keys), self._general)
            if len(self.partial) >= 64:  # bounded: MINIMAL images vary per statement
                self.partial.clear()
            self.partial[keys] = encode
        return encode(row)

    def _general(self, row: dict[str, Any]) -> str:
        return row_json_general(row, self.tm)


_TABLES: dict[int, tuple[TableMap, Encode]] = {}  # id(table map) -> its full image's encoder
_last: tuple[TableMap | None, Encode] = (None, _encode)  # the table map row_json saw last, its encoder


def _table_encoder(tm: TableMap | None) -> Encode:
    """The encoder of tm's full images, made when first seen; row_json's _last from now on."""
    global _last
    if tm is None:
        hit: tuple[TableMap | None, Encode] = (None, _encode)
    else:
        cached = _TABLES.get(id(tm))
        if cached is None or cached[0] is not tm:
            if len(_TABLES) >= 1024:  # as many as relay.rows.tablemap caches
                _TABLES.clear()
            cached = _TABLES[id(tm)] = (tm, _TableEncoders(tm).full)
        hit = cached
    _last = hit
    return hit[1]


def row_json(row: dict[str, Any] | None, tm: TableMap | None = None) -> str | None:
    """One row image as JSON text, in column order, with the export's normalisation:

    integers, BIT, YEAR and DOUBLE as JSON numbers; FLOAT as the shortest number that reads
    back as the same float32; DECIMAL as a string with exactly its scale's digits
    ("-0.50"); DATE "YYYY-MM-DD"; DATETIME and TIMESTAMP "YYYY-MM-DD HH:MM:SS[.ffffff]"
    with as many fraction digits as the column's precision, TIMESTAMP in UTC; TIME
    "[-]HH:MM:SS[.ffffff]" (hours may exceed 24); zero or partial dates as the server
    writes them ("0000-00-00"); text as strings; binary strings, BLOBs and GEOMETRY
    (SRID + WKB) as base64 strings; ENUM as its member's name; SET as the comma-separated
    member names in definition order, as the server shows them (without
    binlog_row_metadata=FULL: ENUM index and SET bit mask as numbers, and columns named
    col_0, col_1...); MariaDB JSON columns as their text (a string), MySQL JSON as the JSON
    value itself (a partial update whose before value the event lacks, binlog_row_image=MINIMAL,
    as {"$json_diffs": [{"op", "path", "value"}...]}); MySQL VECTOR as an array of numbers,
    each the shortest that reads back as the same float32. NULL is null; a column missing from the row image
    (binlog_row_image=MINIMAL/NOBLOB) is absent.

    row: an image of a change of tm as the decoder builds it, its keys tm's column names in
    column order (some absent in a MINIMAL/NOBLOB image). Written by the table map's
    generated encoders (compile_encoder), or by row_json_general, with the same text.
    """
    if row is None:
        return None
    last = _last  # one table map's rows after another's: no lookup
    if last[0] is tm:
        return last[1](row)
    return _table_encoder(tm)(row)
