"""The export's JSON form of row values (relay.pipeline.jsonform): values without a column type,
and columns normalised by their type in row images decoded from MariaDB's and MySQL's binlogs.

row_json writes a row with the encoders it generates per table map; row_json_general is the
general path (each value converted, then json's encoder), the reference: both must give the
same text, byte for byte, for every change of every fixture binlog, and for edge values put
into those rows column by column (control characters, non-ASCII, zero dates, negative TIME,
aware datetimes, NaN, bytes in text columns, NULL in NOT NULL columns, ...). The tests of
row_json run twice: with the compiled encoders (relay/pipeline/_jsontext.c) and with the
generated Python ones alone; the compiled encoder is also compared with the Python encoder
it wraps, directly, on the same rows and on random strings."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relay.pipeline import jsonform
from relay.pipeline.jsonform import (
    compile_encoder,
    compiled_encoder,
    python_encoder,
    row_json,
    row_json_general,
    value_json,
)
from relay.pipeline.read import iter_changes
from relay.rows import coltypes as ct

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
BINLOGS = [*sorted((FIXTURES / "rows").glob("*.binlog")),
           *sorted(p for p in (FIXTURES / "mysql").iterdir() if p.suffix != ".md"),
           FIXTURES / "wire" / "mariadb-10.11-mixed.000001"]

# The compiled encoders are optional for users, not for the tests (scripts/test.sh builds them):
# a missing module fails the "compiled" runs instead of skipping them.
NOT_BUILT = "relay/pipeline/_jsontext.c is not built (pip install -e . needs gcc and Python's headers)"
COMPILED = jsonform._jsontext


@pytest.fixture(params=["compiled", "python"])
def encoders(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """row_json with the compiled encoders, or with the generated Python ones alone; the
    encoders of table maps seen before (either kind) forgotten."""
    if request.param == "compiled":
        assert COMPILED is not None, NOT_BUILT
    else:
        monkeypatch.setattr(jsonform, "_jsontext", None)
    monkeypatch.setattr(jsonform, "_TABLES", {})
    monkeypatch.setattr(jsonform, "_last", (None, jsonform._encode))
    return request.param  # type: ignore[no-any-return]


@pytest.mark.usefixtures("encoders")
def test_value_normalisation() -> None:
    assert value_json(Decimal("-0.50")) == "-0.50"
    assert value_json(b"\x00\xff") == "AP8="
    assert value_json(dt.date(2024, 2, 29)) == "2024-02-29"
    assert value_json(dt.timedelta(hours=-1, seconds=1)) == "-00:59:59"
    assert value_json({"a": [Decimal("1.5"), dt.datetime(2024, 1, 2, 3, 4, 5, 600000)]}) == {
        "a": ["1.5", "2024-01-02 03:04:05.600000"]}
    assert json.loads(row_json({"a": b"\x01", "b": None, "c": 3})) == {"a": "AQ==", "b": None, "c": 3}
    ints = [c for c in iter_changes(FIXTURES / "rows" / "full.binlog") if c.table == "ints"][3]
    assert json.loads(row_json(ints.after, ints.table_map))["f"] == 0.1  # float32 0.1, shortest


def changes() -> list[tuple[str, Any]]:
    return [(path.name, c) for path in BINLOGS for c in iter_changes(path)]


@pytest.mark.usefixtures("encoders")
def test_fixture_json_is_unchanged() -> None:
    """The JSON text of every change image of every fixture binlog, as the export wrote it
    before the generated encoders (a digest: a deliberate change of a JSON form updates it)."""
    digest = hashlib.sha256()
    count = 0
    for name, c in changes():
        for image in (c.before, c.after):
            digest.update(f"{name} {row_json(image, c.table_map)}\n".encode("utf-8", "surrogatepass"))
            count += 1
    assert count == 766
    assert digest.hexdigest() == "a562724f1ad299853e2b8c558c591094785d4a7680df937f55b4c513e21ed404"


@pytest.mark.usefixtures("encoders")
def test_generated_encoders_equal_the_general_path_on_every_fixture() -> None:
    all_changes = changes()
    images = [(image, c.table_map) for _, c in all_changes for image in (c.before, c.after) if image is not None]
    assert len(images) == 415
    # in order, again, reversed (other neighbours)
    for image, tm in images + images + images[::-1]:
        assert row_json(image, tm) == row_json_general(image, tm)
        assert row_json(image) == row_json_general(image)  # without a table map: no column types
    kinds = {ct.type_name(tm.column_types[i]) for _, tm in images for i in range(tm.column_count)}
    assert kinds >= {"TINY", "SHORT", "INT24", "LONG", "LONGLONG", "YEAR", "BIT", "FLOAT", "DOUBLE",
                     "NEWDECIMAL", "DATE", "TIME", "TIME2", "DATETIME", "DATETIME2", "TIMESTAMP",
                     "TIMESTAMP2", "VARCHAR", "STRING", "BLOB", "GEOMETRY", "JSON", "VECTOR"}


# --------------------------------------------------------------------------- edge values

TEXTS = ["", "plain", 'quote " and \\ backslash', "\x00\x01\x1f\x7f", "\n\r\t\b\f", "é€ÿ Привет 😀 𝄞",
         "\u2028\u2029", "\ud800 lone surrogate", "</script>", "x" * 1000]
BYTES = [b"", b"\x00\xff", bytearray(b"ab"), memoryview(b"xyz"), bytes(range(256))]
DATETIMES = [dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999), dt.datetime(2024, 2, 29, 12),
             dt.datetime(2024, 2, 29, 12, 0, 0, 1), dt.datetime(2024, 2, 29, 12, 0, 0, 100000),
             dt.datetime(2024, 2, 29, 12, tzinfo=dt.UTC),
             dt.datetime(2024, 2, 29, 12, 0, 0, 5, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30))),
             dt.datetime(1970, 1, 1, tzinfo=dt.timezone(-dt.timedelta(hours=8))),
             "0000-00-00 00:00:00", "0000-00-00 00:00:00.000000", "2024-00-15 01:02:03.5"]
DATES = [dt.date(1, 1, 1), dt.date(2024, 2, 29), dt.date(9999, 12, 31), "0000-00-00", "2024-00-15"]
TIMES = [dt.timedelta(0), dt.timedelta(microseconds=-1), dt.timedelta(hours=-1, seconds=1),
         dt.timedelta(hours=838, minutes=59, seconds=59), -dt.timedelta(hours=838, minutes=59, seconds=59),
         dt.timedelta(days=-1, microseconds=500000), dt.timedelta(seconds=1, microseconds=123456), "-00:00:00"]
FLOATS = [0.0, -0.0, 0.1, -1.5, 1e-45, 3.4028234663852886e38, 2.2250738585072014e-308, 1e300,
          float("nan"), float("inf"), float("-inf")]
INTS = [0, 1, -1, 255, -(2 ** 63), 2 ** 64 - 1, 10 ** 30]


def edge_values(tm: Any, i: int, value: Any) -> list[Any]:
    """Values to put into column i of tm, whose decoded value was value: those of its type and
    the ones the decoder gives instead (zero dates as str, bytes for undecodable text), and
    types the general path takes anywhere. Integer columns get integers only: the generated
    encoder trusts the decoder there (an int written as it is)."""
    code = tm.column_types[i]
    out: list[Any] = [None]
    if isinstance(value, bool) or code in (ct.TINY, ct.SHORT, ct.INT24, ct.LONG, ct.LONGLONG, ct.YEAR, ct.BIT):
        return out + INTS
    if isinstance(value, int):  # an ENUM's index or a SET's mask without names
        return out + INTS
    if code == ct.NEWDECIMAL:
        scale = tm.column_meta[i][1]
        return out + [Decimal(f"{n}E-{scale}") for n in ("0", "-0", "1", "-1", "5", 10 ** 20 + 1, -(10 ** 30))] + [
            Decimal("1E+3"), Decimal("1E-9"), Decimal("-0.000"), Decimal("NaN"), Decimal("-Infinity")]
    if isinstance(value, (str, bytes)) and code not in (ct.DATE, ct.NEWDATE, ct.TIME, ct.TIME2, ct.DATETIME,
                                                        ct.DATETIME2, ct.TIMESTAMP, ct.TIMESTAMP2):
        return out + TEXTS + BYTES  # text columns take bytes (no charset known), binary ones str
    if isinstance(value, dt.datetime) or code in (ct.DATETIME, ct.DATETIME2, ct.TIMESTAMP, ct.TIMESTAMP2):
        return out + DATETIMES
    if isinstance(value, dt.date) or code in (ct.DATE, ct.NEWDATE):
        return out + DATES + [dt.datetime(2024, 2, 29, 1, 2, 3)]
    if isinstance(value, dt.timedelta) or code in (ct.TIME, ct.TIME2):
        return out + TIMES
    if isinstance(value, float):
        return out + FLOATS
    if isinstance(value, frozenset):
        names = sorted(value) + sorted(tm.set_values[i])
        return out + [frozenset(), frozenset(names), frozenset(names[:1]), 5]
    if isinstance(value, tuple):  # VECTOR
        return out + [(), (0.0, -0.0, 1.5, 0.1, float("inf")), tuple(FLOATS[:8])]
    # MySQL JSON documents, partial updates
    return out + [{}, [], {"a": [1, 2.5, "x\x00😀", None, True, {"b": Decimal("1.50")}]}, "text", 3, 2.5,
                  ct.JsonPartialUpdate((ct.JsonDiff("REPLACE", "$.a", {"b": 1}), ct.JsonDiff("REMOVE", "$.c"))),
                  dt.date(2024, 1, 2), Decimal("1.230")]


def outcome(write: Any, row: dict[str, Any], tm: Any) -> tuple[str, Any]:
    try:
        return "text", write(row, tm)
    except Exception as e:  # e.g. a FLOAT of 1e300, which float32 cannot hold: both raise
        return "raises", type(e)


def table_maps() -> list[tuple[Any, dict[str, Any]]]:
    """One (table map, full image) per table map of the fixtures."""
    seen: dict[int, tuple[Any, dict[str, Any]]] = {}
    for _, c in changes():
        for image in (c.before, c.after):
            if image is not None and c.table_map is not None and len(image) == c.table_map.column_count:
                seen.setdefault(id(c.table_map), (c.table_map, image))
    return list(seen.values())


@pytest.mark.usefixtures("encoders")
def test_edge_values_equal_the_general_path() -> None:
    checked = 0
    for tm, image in table_maps():
        for i, name in enumerate(tm.column_names):
            values = edge_values(tm, i, image[name])
            # each value after each, and twice in a row
            for value in values + values[::-1] + [v for v in values for _ in (0, 1)]:
                row = dict(image)
                row[name] = value
                assert outcome(row_json, row, tm) == outcome(row_json_general, row, tm), (tm.table, name, value)
                checked += 1
    assert checked > 5000


@pytest.mark.usefixtures("encoders")
def test_images_with_columns_missing_or_foreign() -> None:
    """MINIMAL/NOBLOB images (some columns absent, each set compiled once), and rows that are
    no image of the table map: other keys, or its keys in another order. (A row with as many
    keys as the table map has columns is taken for a full image, as row_json says.)"""
    for tm, image in table_maps():
        names = list(image)
        subsets = [names[:1], names[1:], names[::2], names[-1:], [], names[:0:-1], names + ["extra"],
                   ["col_x"] + names[1:] + ["extra"]]
        for keys in subsets + subsets:
            row = {k: image.get(k, 1) for k in keys}
            assert row_json(row, tm) == row_json_general(row, tm), (tm.table, keys)
    assert row_json({}, table_maps()[0][0]) == "{}"


@pytest.mark.usefixtures("encoders")
def test_column_names_are_escaped_as_json_escapes_keys() -> None:
    """Names go into the generated source as literals: quotes, backslashes, braces, control
    characters, non-ASCII and lone surrogates (a name that is no UTF-8) come out as json's."""
    tm, image = next((tm, image) for tm, image in table_maps() if tm.column_count >= 8)
    odd = ['a"b', "back\\slash", "{braces}", "f'{x}'", "tab\tnl\n\x00", "é😀", "\udc80", "'''"]
    names = tuple(odd[i] if i < len(odd) else n for i, n in enumerate(tm.column_names))
    renamed = dataclasses.replace(tm, column_names=names)
    row = dict(zip(names, image.values()))
    assert row_json(row, renamed) == row_json_general(row, renamed)
    assert json.loads(row_json(row, renamed).encode("utf-8", "surrogatepass").decode("utf-8", "surrogatepass"))


@pytest.mark.usefixtures("encoders")
def test_equal_values_with_different_text_keep_their_own() -> None:
    """-0.00 == 0.00, but their texts differ; equal instants in other time zones have one text."""
    decimals = next((tm, image, i) for tm, image in table_maps() for i in range(tm.column_count)
                    if tm.column_types[i] == ct.NEWDECIMAL and tm.column_meta[i][1] == 2)
    tm, image, i = decimals
    name = tm.column_names[i]
    texts = [json.loads(row_json({**image, name: Decimal(v)}, tm))[name] for v in ("0.00", "-0.00", "0.00")]
    assert texts == ["0.00", "-0.00", "0.00"]
    stamps = next((tm, image, i) for tm, image in table_maps() for i in range(tm.column_count)
                  if tm.column_types[i] == ct.TIMESTAMP2 and tm.column_meta[i] == 0)
    tm, image, i = stamps
    name = tm.column_names[i]
    utc = dt.datetime(2024, 1, 1, 12, tzinfo=dt.UTC)
    same_instant = utc.astimezone(dt.timezone(dt.timedelta(hours=2)))  # == utc: the same UTC text
    texts = [json.loads(row_json({**image, name: v}, tm))[name] for v in (utc, same_instant, None, utc)]
    assert texts == ["2024-01-01 12:00:00", "2024-01-01 12:00:00", None, "2024-01-01 12:00:00"]
    texts_of = next((tm, image, name) for tm, image in table_maps() for name, v in image.items()
                    if isinstance(v, str) and tm.column_types[tm.column_names.index(name)] == ct.VARCHAR)
    tm, image, name = texts_of
    long = "\n" * 40000  # a long text of escapes
    for v in (long, long, "a", "a" + "", long, None, "a"):
        assert row_json({**image, name: v}, tm) == row_json_general({**image, name: v}, tm)


def fixture_images(make: Any) -> Iterator[tuple[Any, dict[str, Any], Any]]:
    """(table map, image, make(table map, its columns)) for every change image of every
    fixture binlog with a table map; make is called once per table map and set of columns."""
    made: dict[tuple[int, tuple[str, ...]], Any] = {}
    for _, c in changes():
        for image in (c.before, c.after):
            if image is None or c.table_map is None:
                continue
            tm = c.table_map
            key = (id(tm), tuple(image))
            if key not in made:
                made[key] = make(tm, tuple(tm.column_names.index(name) for name in image))
            yield tm, image, made[key]


@pytest.mark.usefixtures("encoders")
def test_fixture_images_need_no_general_path() -> None:
    """Every value the decoder gives for a fixture (zero dates as str, bytes in a text column
    without charset metadata, NULLs) has its text in the generated encoder: no row of the
    fixtures is written by the general path."""
    to_general: list[Any] = []
    for tm, image, encode in fixture_images(lambda tm, idx: compile_encoder(tm, idx, to_general.append)):
        assert encode(image) == row_json_general(image, tm)
    assert to_general == []


@pytest.mark.usefixtures("encoders")
def test_generated_encoder_text() -> None:
    """One sysbench-like row through a generated encoder: each column inline, the same text as
    the general path, and values no text fits sent to the general path."""
    [c] = [c for c in iter_changes(FIXTURES / "rows" / "full.binlog")
           if c.table_map is not None and c.table_map.column_count > 3][:1]
    tm = c.table_map
    fallbacks: list[dict[str, Any]] = []
    encode = compile_encoder(tm, tuple(range(tm.column_count)), fallbacks.append)  # type: ignore[arg-type]
    assert encode(c.after) == row_json_general(c.after, tm) == encode(dict(c.after))
    assert not fallbacks
    encode({k: object() for k in c.after})  # values no text fits: to the general path
    assert len(fallbacks) == 1


# --------------------------------------------------------------------------- the compiled encoder


def both_encoders(tm: Any, idx: tuple[int, ...]) -> tuple[Any, Any, list[dict[str, Any]]]:
    """(compiled, python) encoders of the image idx of tm, and the rows the compiled one
    handed to the Python one: the Python encoder's rows the general path writes."""
    assert COMPILED is not None, NOT_BUILT
    python = python_encoder(tm, idx, lambda row: row_json_general(row, tm))
    handed: list[dict[str, Any]] = []
    compiled = compiled_encoder(tm, idx, lambda row: (handed.append(row), python(row))[1])
    return compiled, python, handed


def test_compiled_encoder_writes_every_fixture_row_as_the_python_encoder() -> None:
    """Every change image of every fixture binlog (all column types, NULLs, zero dates, bytes in
    text columns, MINIMAL images): the compiled encoder's text is the Python encoder's, and it
    writes every one of them itself."""
    count = 0
    for tm, image, (compiled, python, handed) in fixture_images(both_encoders):
        assert compiled(image) == python(image) == row_json_general(image, tm)
        assert handed == []
        count += 1
    assert count == 415


def test_compiled_encoder_edge_values_as_the_python_encoder() -> None:
    """The edge values of every column type, one column at a time: the compiled encoder gives
    the Python encoder's text (or its exception), writing what its kinds take itself."""
    checked = written = 0
    for tm, image in table_maps():
        compiled, python, handed = both_encoders(tm, tuple(range(tm.column_count)))
        for i, name in enumerate(tm.column_names):
            values = edge_values(tm, i, image[name])
            for value in values + values[::-1]:
                row = dict(image)
                row[name] = value
                before = len(handed)
                assert (outcome(lambda r, _, encode=compiled: encode(r), row, tm)
                        == outcome(lambda r, _, encode=python: encode(r), row, tm)), (tm.table, name, value)
                checked += 1
                written += len(handed) == before
    assert checked > 2500 and written > checked // 2


TEXT = st.text(st.one_of(st.characters(blacklist_categories=()),  # every code point, lone surrogates too
                         st.sampled_from('"\\/\x00\x08\x09\x0a\x0c\x0d\x1f\x20\x7f\x80\xff\u0100\u2028\uffff')))


@settings(max_examples=500, deadline=None)
@given(st.lists(TEXT, min_size=3, max_size=3), st.sampled_from([0, 1, 2]))
def test_compiled_encoder_escapes_strings_as_json(texts: list[str], nulled: int) -> None:
    """Random strings (control characters, quotes, backslashes, non-ASCII of every width, lone
    surrogates) in text columns, next to each other and to NULL, under names of every width:
    json.dumps's text (ensure_ascii=False), from both encoders."""
    tm, image = STRINGS
    names = [n for n, v in image.items() if isinstance(v, str)][:3]
    row = dict(image)
    for name, text in zip(names, texts):
        row[name] = text
    compiled, python, handed = STRING_ENCODERS
    before = len(handed)
    got = compiled(row)
    assert got == python(row) == row_json_general(row, tm)
    assert len(handed) == before  # written by the compiled encoder itself
    for _, text in zip(names, texts):
        assert json.dumps(text, ensure_ascii=False) in got
    renamed = dataclasses.replace(tm, column_names=tuple(texts[nulled] + n for n in tm.column_names))
    row = dict(zip(renamed.column_names, row.values()))
    compiled, python, _ = both_encoders(renamed, tuple(range(tm.column_count)))
    assert compiled(row) == python(row) == row_json_general(row, renamed)


def text_table() -> tuple[Any, dict[str, Any]]:
    """The fixtures' table map with the most text columns of a known charset, and an image."""
    def texts(tm: Any) -> int:
        return sum(jsonform._form(tm, i).kind == jsonform.K_STR for i in range(tm.column_count))
    return max(table_maps(), key=lambda pair: texts(pair[0]))


STRINGS = text_table()
STRING_ENCODERS = both_encoders(STRINGS[0], tuple(range(STRINGS[0].column_count))) if COMPILED else (None, None, [])


def test_compiled_encoder_refuses_what_it_does_not_know() -> None:
    """Rows that are no image of its columns and values of other types go to the Python
    encoder, whatever they are: a dict of another size, a dict subclass, an int subclass
    (bool), a str subclass, a datetime in another time zone, a date in a DATETIME column."""
    assert COMPILED is not None, NOT_BUILT
    tm, image = next((tm, image) for tm, image in table_maps()
                     if any(jsonform._form(tm, i).kind == jsonform.K_DATETIME for i in range(tm.column_count)))
    compiled, python, handed = both_encoders(tm, tuple(range(tm.column_count)))

    class Row(dict):  # type: ignore[type-arg]
        pass

    class Text(str):
        pass

    rows: list[dict[str, Any]] = [{**image, "extra": 1}, dict(list(image.items())[:-1]), Row(image)]
    for i, name in enumerate(tm.column_names):
        kind = jsonform._form(tm, i).kind
        if kind == jsonform.K_INT:
            rows.append({**image, name: True})
        elif kind in (jsonform.K_STR, jsonform.K_TEXT):
            rows.append({**image, name: Text("x")})
        elif kind == jsonform.K_DATETIME:
            rows.append({**image, name: dt.datetime(2024, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=1)))})
            rows.append({**image, name: dt.date(2024, 1, 1)})
    for row in rows:
        before = len(handed)
        assert outcome(lambda r, _: compiled(r), row, tm) == outcome(lambda r, _: python(r), row, tm)
        assert len(handed) == before + 1, row
