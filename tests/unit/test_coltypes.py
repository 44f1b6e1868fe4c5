"""Column types one by one (relay.rows.coltypes), a section per family module: hand-made
bytes against the values the servers document, each read by the column's decoder and by the
row readers (its inline plan in a generated Python reader, its kind in the compiled reader of
_rowread.c). Whole binlogs from real servers: tests/unit/test_rows.py (MariaDB) and
tests/unit/test_mysql_rows.py (MySQL); the compiled readers against the Python ones on every
fixture binlog, and on corrupted rows events: the last section."""

from __future__ import annotations

import datetime as dt
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relay.pipeline.read import iter_changes
from relay.rows import coltypes as ct
from relay.rows import rows as rows_module
from relay.rows import tablemap as tablemap_module
from relay.rows.coltypes import readers
from relay.rows.coltypes.readers import compiled_reader, python_body, python_run
from relay.rows.rows import ROWS_EVENT_TYPES, parse_rows_event

# The compiled readers are optional for users, not for the tests (scripts/test.sh builds them):
# a missing module fails the tests that read through them instead of skipping them.
NOT_BUILT = "relay/rows/coltypes/_rowread.c is not built (pip install -e . needs gcc and Python's headers)"


def read_both_ways(col_type: int, meta: Any, raw: bytes, *, unsigned: bool = False, charset: int | None = None,
                   names: tuple[str, ...] | None = None, in_c: bool | None = True) -> Any:
    """The value of raw (one column's bytes, all of them) as its decoder reads it, checked to be
    what the row readers of a one-column row give: the generated Python reader and the compiled
    one, each as a body and as a run: same value, same type, same end. in_c: the compiled
    reader reads the value itself (False: it hands the row to the Python reader, as for a
    zero date; None: either)."""
    decoder = ct.make_decoder(col_type, meta, unsigned=unsigned, charset=charset, names=names)
    value, end = decoder(raw, 0)
    assert end == len(raw)
    table_map = SimpleNamespace(database="d", table="t", column_types=(col_type,), column_meta=(meta,),
                                unsigned=(unsigned,), column_charsets=(charset,), column_count=1,
                                column_names=("c",), decoders=(decoder,))
    handed: list[str] = []

    def counted(reader: Any, form: str) -> Any:
        def fallback(*args: Any) -> Any:
            handed.append(form)
            return reader(*args)
        return fallback

    def check(body: Any, run: Any) -> None:
        row, row_end = body(raw, 0, 0)
        assert repr(row["c"]) == repr(value) and row_end == end
        rows: list[dict[str, Any]] = []
        framed = b"\x00" + raw  # a run's rows start with their null bitmap
        assert run(framed, 0, len(framed), rows.append) == len(framed)
        assert len(rows) == 1 and repr(rows[0]["c"]) == repr(value)

    body, run = python_body(table_map, (0,), 0), python_run(table_map, (0,), 0)  # type: ignore[arg-type]
    check(body, run)
    assert readers._rowread is not None, NOT_BUILT
    check(compiled_reader(table_map, (0,), 0, counted(body, "body"), run=False),  # type: ignore[arg-type]
          compiled_reader(table_map, (0,), 0, counted(run, "run"), run=True))  # type: ignore[arg-type]
    if in_c is not None:
        assert handed == ([] if in_c else ["body", "run"])
    return value


# --------------------------------------------------------------------------- registry


def test_every_type_code_has_a_name_and_an_entry():
    assert set(ct.TYPES) == set(ct.TYPE_NAMES)


def test_metadata_sizes_and_unknown_types():
    meta = ct.parse_column_meta((ct.LONG, ct.VARCHAR, ct.NEWDECIMAL, ct.BIT, ct.STRING, 200),
                                b"\x2c\x01" + b"\x0c\x02" + b"\x03\x01" + bytes([ct.STRING, 40]))
    assert meta == (0, 300, (12, 2), 11, (ct.STRING, 40), 0)
    with pytest.raises(ValueError, match="types need"):
        ct.parse_column_meta((ct.LONG,), b"\x00")
    with pytest.raises(ValueError, match="cannot decode type 200: type not supported"):
        ct.make_decoder(200, 0)(b"\x00", 0)
    assert ct.inline_plan(200, 0) is None


def test_flavour_rules_of_the_optional_metadata():
    # SIGNEDNESS: MariaDB has a bit for YEAR, MySQL not; charsets: MariaDB counts GEOMETRY, MySQL VECTOR.
    assert ct.has_sign_bit(ct.YEAR, "mariadb") and not ct.has_sign_bit(ct.YEAR, "mysql")
    assert ct.has_sign_bit(ct.NEWDECIMAL, "mysql") and not ct.has_sign_bit(ct.VARCHAR, "mariadb")
    assert ct.is_character(ct.GEOMETRY, 4, "mariadb") and not ct.is_character(ct.GEOMETRY, 4, "mysql")
    assert ct.is_character(ct.VECTOR, 4, "mysql") and not ct.is_character(ct.VECTOR, 4, "mariadb")
    assert ct.is_character(ct.STRING, (ct.STRING, 4), "mysql")
    assert not ct.is_character(ct.STRING, (ct.ENUM, 1), "mysql")  # ENUM/SET have charset fields of their own


def test_null_type():
    assert ct.make_decoder(ct.NULL, 0)(b"", 0) == (None, 0)


# --------------------------------------------------------------------------- numbers


def test_integer_signedness_and_widths():
    for t, raw, signed, unsigned in [
        (ct.TINY, b"\xff", -1, 255), (ct.SHORT, b"\x00\x80", -32768, 32768),
        (ct.INT24, b"\xff\xff\x7f", 8388607, 8388607), (ct.INT24, b"\x00\x00\x80", -8388608,
                                                      8388608),
        (ct.LONG, b"\xff\xff\xff\xff", -1, 2 ** 32 - 1),
        (ct.LONGLONG, b"\xff" * 8, -1, 2 ** 64 - 1),
    ]:
        assert read_both_ways(t, 0, raw) == signed
        assert read_both_ways(t, 0, raw, unsigned=True) == unsigned


def test_floats_year_and_bit():
    assert read_both_ways(ct.FLOAT, 4, struct.pack("<f", 0.1)) == struct.unpack("<f", struct.pack("<f", 0.1))[0]
    assert read_both_ways(ct.DOUBLE, 8, struct.pack("<d", -2.5)) == -2.5
    assert read_both_ways(ct.YEAR, 0, b"\x7c") == 2024 and read_both_ways(ct.YEAR, 0, b"\x00") == 0
    assert read_both_ways(ct.BIT, 11, b"\x05\x01") == 0x501


# --------------------------------------------------------------------------- decimal


def test_decimal_reference_encoding():
    # The worked example of strings/decimal.cc (decimal2bin): DECIMAL(14,4).
    assert ct.decode_decimal(bytes.fromhex("810DFB38D204D2"), 14, 4) == \
        Decimal("1234567890.1234")
    assert ct.decode_decimal(bytes.fromhex("7EF204C72DFB2D"), 14, 4) == \
        Decimal("-1234567890.1234")
    assert ct.decimal_size(14, 4) == 7 and ct.decimal_size(65, 30) == 30


def encode_decimal(value: Decimal, precision: int, scale: int) -> bytes:
    """Independent decimal2bin: digits grouped from the decimal point outwards."""
    negative = value < 0
    digits = format(value.copy_abs(), f".{scale}f")
    int_part, _, frac_part = digits.partition(".")
    intg = precision - scale
    int_part = int_part.lstrip("0").rjust(intg, "0")
    assert len(int_part) == intg
    dig2bytes = [0, 1, 1, 2, 2, 3, 3, 4, 4, 4]
    out = b""
    lead = intg % 9
    if lead:
        out += int(int_part[:lead]).to_bytes(dig2bytes[lead], "big")
    for i in range(lead, intg, 9):
        out += int(int_part[i:i + 9]).to_bytes(4, "big")
    for i in range(0, scale - scale % 9, 9):
        out += int(frac_part[i:i + 9]).to_bytes(4, "big")
    if scale % 9:
        out += int(frac_part[scale - scale % 9:]).to_bytes(dig2bytes[scale % 9], "big")
    out = bytearray(out)
    out[0] ^= 0x80
    if negative:
        out = bytearray(b ^ 0xFF for b in out)
    return bytes(out)


@st.composite
def decimals(draw):
    precision = draw(st.integers(1, 65))
    scale = draw(st.integers(0, min(precision, 30)))
    unscaled = draw(st.integers(-(10 ** precision - 1), 10 ** precision - 1))
    return Decimal(f"{unscaled}E-{scale}"), precision, scale  # exact, no context rounding


@settings(max_examples=500, deadline=None)
@given(decimals())
def test_decimal_round_trip(case):
    value, precision, scale = case
    raw = encode_decimal(value, precision, scale)
    assert len(raw) == ct.decimal_size(precision, scale)
    got = ct.decode_decimal(raw, precision, scale)
    assert got == value and -got.as_tuple().exponent == scale
    assert read_both_ways(ct.NEWDECIMAL, (precision, scale), raw) == got
    dec = ct.make_decoder(ct.NEWDECIMAL, (precision, scale))
    assert dec(b"\xaa" + raw + b"\xbb", 1) == (got, 1 + len(raw))
    with pytest.raises(ValueError):
        dec(raw[:-1], 0)


def test_decimal_rejects_out_of_range_groups():
    # DECIMAL(9,0): one 4-byte group; 10**9 cannot be a 9-digit group.
    with pytest.raises(ValueError):
        ct.decode_decimal((0x80000000 | 10 ** 9).to_bytes(4, "big"), 9, 0)


def test_decimal_negative_zero_keeps_its_sign_and_scale():
    assert str(read_both_ways(ct.NEWDECIMAL, (4, 2), bytes.fromhex("7fff"))) == "-0.00"


# --------------------------------------------------------------------------- temporal


def test_time2_negative_fractions():
    # TIME(1) '-00:00:00.5': int part 0x800000 - 1, fraction byte (char)-50.
    assert ct.make_decoder(ct.TIME2, 1)(bytes.fromhex("7fffffce"), 0)[0] == \
        -dt.timedelta(microseconds=500000)
    assert ct.make_decoder(ct.TIME2, 0)(bytes.fromhex("800000"), 0)[0] == dt.timedelta(0)


def test_dates():
    assert read_both_ways(ct.DATE, 0, (2024 << 9 | 2 << 5 | 29).to_bytes(3, "little")) == dt.date(2024, 2, 29)
    assert read_both_ways(ct.DATE, 0, b"\x00\x00\x00", in_c=False) == "0000-00-00"


def test_datetime2_and_timestamp2():
    packed = ((2024 * 13 + 5) << 22 | 6 << 17 | 7 << 12 | 8 << 6 | 9) + 0x8000000000
    assert read_both_ways(ct.DATETIME2, 0, packed.to_bytes(5, "big")) == dt.datetime(2024, 5, 6, 7, 8, 9)
    assert read_both_ways(ct.DATETIME2, 3, (0x8000000000).to_bytes(5, "big") + b"\x00\x00", in_c=False) == \
        "0000-00-00 00:00:00.000"
    assert read_both_ways(ct.TIMESTAMP2, 3, bytes(6)) == "0000-00-00 00:00:00.000"  # in C: no date to make
    assert read_both_ways(ct.TIMESTAMP2, 6, (1000).to_bytes(4, "big") + (5).to_bytes(3, "big")) == \
        dt.datetime(1970, 1, 1, 0, 16, 40, 5, tzinfo=dt.UTC)


# --------------------------------------------------------------------------- strings


def test_string_charsets():
    assert read_both_ways(ct.VARCHAR, 10, b"\x03\x80\x81\xff", charset=8) == "€\x81ÿ"  # MySQL's latin1
    assert read_both_ways(ct.VARCHAR, 300, b"\x02\x00\xc3\xa9", charset=45) == "é"
    assert read_both_ways(ct.BLOB, 1, b"\x02\xc3\xa9") == "é"  # no charset: UTF-8 if it is
    assert read_both_ways(ct.BLOB, 1, b"\x01\xff") == b"\xff"
    assert read_both_ways(ct.STRING, (ct.STRING, 4), b"\x01a", charset=63) == b"a\0\0\0"  # BINARY(4)
    with pytest.raises(ValueError):
        ct.make_decoder(ct.VARCHAR, 300, charset=45)(b"\x05\x00ab", 0)


def test_enum_and_set():
    assert read_both_ways(ct.STRING, (ct.ENUM, 1), b"\x02", names=("a", "b")) == "b"
    assert read_both_ways(ct.STRING, (ct.ENUM, 1), b"\x02") == 2
    assert read_both_ways(ct.STRING, (ct.SET, 1), b"\x05", names=("a", "b", "c")) == frozenset({"a", "c"})
    assert ct.member_kind(ct.STRING, (ct.SET, 1)) == ct.SET and ct.member_kind(ct.STRING, (ct.STRING, 4)) is None


# --------------------------------------------------------------------------- json


def varlen(n: int) -> bytes:
    out = b""
    while True:
        if n < 0x80:
            return out + bytes([n])
        out += bytes([0x80 | n & 0x7F])
        n >>= 7


def jscalar(v) -> tuple[int, bytes]:
    """(type, bytes) of a MySQL binary JSON scalar (sql-common/json_binary.cc)."""
    if v is None or isinstance(v, bool):
        return 4, bytes([0 if v is None else 1 if v else 2])
    if isinstance(v, int):
        return 9, struct.pack("<q", v)
    if isinstance(v, float):
        return 11, struct.pack("<d", v)
    if isinstance(v, str):
        b = v.encode()
        return 12, varlen(len(b)) + b
    return jcontainer(v, large=False)


def jcontainer(v, large: bool) -> tuple[int, bytes]:
    osz = 4 if large else 2
    fmt = "<I" if large else "<H"
    items = list(v.items()) if isinstance(v, dict) else [(None, x) for x in v]
    n = len(items)
    header = 2 * osz + (n * (osz + 2) if isinstance(v, dict) else 0) + n * (1 + osz)
    keys = b"".join(k.encode() for k, _ in items) if isinstance(v, dict) else b""
    key_entries, off = b"", header
    for k, _ in items if isinstance(v, dict) else ():
        key_entries += struct.pack(fmt, off) + struct.pack("<H", len(k.encode()))
        off += len(k.encode())
    value_entries, blobs = b"", b""
    for _, x in items:
        t, b = jscalar(x)
        if t == 4:
            value_entries += bytes([t]) + b.ljust(osz, b"\0")
        else:
            value_entries += bytes([t]) + struct.pack(fmt, off + len(blobs))
            blobs += b
    body = key_entries + value_entries + keys + blobs
    size = 2 * osz + len(body)
    t = (0 if isinstance(v, dict) else 2) + (1 if large else 0)
    return t, struct.pack(fmt, n) + struct.pack(fmt, size) + body


def test_mysql_binary_json():
    doc = {"a": [1, 2.5, "x😀", None, True, False], "b": {"c": -7}, "": "empty key"}
    for large in (False, True):
        t, body = jcontainer(doc, large)
        assert ct.decode_mysql_json(bytes([t]) + body) == doc
    # Inline int16 values and the reference parser of python-mysql-replication.
    from pymysqlreplication.json_binary import parse_json
    small = bytes.fromhex("00" "0100" "0c00" "0b000100" "050100" "61")
    assert ct.decode_mysql_json(small) == {"a": 1}
    assert parse_json(small[0], small[1:]) == {b"a": 1}
    assert ct.decode_mysql_json(b"") is None
    assert ct.decode_mysql_json(b"\x0c\x02hi") == "hi"
    dec = ct.make_decoder(ct.JSON, 4)
    raw = b"\x0c\x02hi"
    assert dec(struct.pack("<I", len(raw)) + raw, 0) == ("hi", 4 + len(raw))
    # DECIMAL(4,2) 12.34 as an opaque value: precision, scale, decimal2bin bytes.
    opaque_decimal = bytes([15, ct.NEWDECIMAL]) + varlen(4) + bytes([4, 2]) + \
        bytes.fromhex("8c22")
    assert ct.decode_mysql_json(opaque_decimal) == Decimal("12.34")
    # An array whose only element points back at the array itself: no RecursionError.
    cyclic = bytes.fromhex("02" "0100" "0700" "020000")
    with pytest.raises(ValueError, match="deeper"):
        ct.decode_mysql_json(cyclic)




# --------------------------------------------------------------------------- compiled readers


def test_every_inline_plan_has_a_compiled_kind():
    """What the generated Python readers read inline, the compiled reader reads without a call."""
    for code, entry in ct.TYPES.items():
        assert (entry.plan is None) == (entry.compiled is None), ct.type_name(code)


def test_compiled_kinds_edge_values():
    for size, t in ((1, ct.TINY), (2, ct.SHORT), (3, ct.INT24), (4, ct.LONG), (8, ct.LONGLONG)):
        for raw in (bytes(size), b"\xff" * size, b"\x7f" + b"\xff" * (size - 1), b"\xff" * (size - 1) + b"\x7f",
                    b"\x00" * (size - 1) + b"\x80"):
            read_both_ways(t, 0, raw)
            read_both_ways(t, 0, raw, unsigned=True)
    for raw in (struct.pack("<f", float("inf")), b"\x01\x00\xc0\x7f", struct.pack("<d", -0.0), b"\xff" * 8):
        read_both_ways(ct.FLOAT if len(raw) == 4 else ct.DOUBLE, len(raw), raw)  # NaN payloads: repr
    assert read_both_ways(ct.YEAR, 0, b"\xff") == 2155
    # strings: every length-prefix size, empty, codecs, a converter, BINARY(n) full and padded
    for prefix in (1, 2, 3, 4):
        for text in ("", "é" * 70, "x" * 300):
            raw = text.encode()
            if len(raw) < 1 << 8 * prefix:
                assert read_both_ways(ct.BLOB, prefix, len(raw).to_bytes(prefix, "little") + raw, charset=45) == text
                assert read_both_ways(ct.BLOB, prefix, len(raw).to_bytes(prefix, "little") + raw, charset=63) == raw
    assert read_both_ways(ct.VARCHAR, 100, b"\x04\xc4\xe3\xba\xc3", charset=28) == "你好"  # gbk
    assert read_both_ways(ct.VARCHAR, 100, b"\x02hi", charset=11) == "hi"  # ascii
    assert read_both_ways(ct.STRING, (ct.STRING, 2), b"\x02ab", charset=63) == b"ab"  # BINARY(2), no padding
    assert read_both_ways(ct.STRING, (ct.STRING, 300), b"\x00\x00", charset=63) == bytes(300)
    assert read_both_ways(ct.GEOMETRY, 4, b"\x03\x00\x00\x00abc") == b"abc"
    # decimals: scale 0, 9-digit groups, the 18-digit boundary of the compiled integer path
    for precision, scale, value in ((1, 0, "7"), (9, 0, "-123456789"), (18, 9, "-123456789.123456789"),
                                    (19, 0, "9999999999999999999"), (65, 30, "-1E-30"), (10, 10, "-1E-10")):
        d = Decimal(value)
        assert repr(read_both_ways(ct.NEWDECIMAL, (precision, scale), encode_decimal(d, precision, scale))) == \
            repr(d.quantize(Decimal(1).scaleb(-scale)))
    # dates Python cannot hold go to the Python reader, as its text
    for raw in (b"\x21\x00\x00", (2024 << 9 | 13 << 5 | 1).to_bytes(3, "little"),
                (2023 << 9 | 2 << 5 | 29).to_bytes(3, "little")):
        assert isinstance(read_both_ways(ct.DATE, 0, raw, in_c=False), str)


@settings(max_examples=400, deadline=None)
@given(st.integers(0, 6), st.data())
def test_compiled_temporal_values_equal_the_decoders(fsp, data):
    """DATETIME2 and TIMESTAMP2 from any bytes (valid fields or not), and DATE: the compiled
    reader's fields and epoch arithmetic against the decoders'."""
    frac = (fsp + 1) // 2
    fields = st.tuples(st.integers(0, 9999), st.integers(0, 13), st.integers(0, 31), st.integers(0, 24),
                       st.integers(0, 60), st.integers(0, 60))
    y, mo, d, h, mi, sec = data.draw(fields)
    packed = ((y * 13 + mo) << 22 | d << 17 | h << 12 | mi << 6 | sec) + 0x8000000000
    raw = data.draw(st.one_of(st.just(packed.to_bytes(5, "big")), st.binary(min_size=5, max_size=5)))
    raw += data.draw(st.binary(min_size=frac, max_size=frac))
    read_both_ways(ct.DATETIME2, fsp, raw, in_c=None)
    stamp = data.draw(st.binary(min_size=4 + frac, max_size=4 + frac))
    read_both_ways(ct.TIMESTAMP2, fsp, stamp)
    read_both_ways(ct.DATE, 0, data.draw(st.binary(min_size=3, max_size=3)), in_c=None)


# Every binlog file among the fixtures: MariaDB's (rows/, wire/) and MySQL's (mysql/).
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
FIXTURE_BINLOGS = [*sorted((FIXTURES / "rows").glob("*.binlog")),
                   *sorted(p for p in (FIXTURES / "mysql").iterdir() if p.suffix != ".md"),
                   FIXTURES / "wire" / "mariadb-10.11-mixed.000001"]


@contextmanager
def python_readers() -> Iterator[None]:
    """Inside: the row readers are the generated Python ones, compiled afresh (no table map
    cached from before, whose images would keep their readers); afresh again after."""
    module = readers._rowread
    assert module is not None, NOT_BUILT
    tablemap_module._parse_table_map.cache_clear()
    readers._rowread = None
    try:
        yield
    finally:
        readers._rowread = module
        tablemap_module._parse_table_map.cache_clear()


def all_changes() -> list[str]:
    tablemap_module._parse_table_map.cache_clear()
    return [repr(c) for path in FIXTURE_BINLOGS for c in iter_changes(path)]


@pytest.mark.parametrize("max_variants", [8, 0])
def test_compiled_readers_equal_python_readers_on_every_fixture(max_variants, monkeypatch):
    """Every change of every fixture binlog, through the compiled readers and the Python ones
    (per pattern of NULLs, or past _MAX_VARIANTS the readers testing each bit): the same
    values, types, Decimal exponents, zero dates' text (compared by repr). The compiled
    readers read every row themselves but the ones holding a value Python cannot hold (a
    zero date: its text, by the Python reader)."""
    monkeypatch.setattr(rows_module, "_MAX_VARIANTS", max_variants)
    handed: list[dict[str, Any]] = []
    compiled = readers.compiled_reader

    def counting(tm: Any, idx: Any, nulls: Any, fallback: Any, *, run: bool) -> Any:
        def body(buf: bytes, pos: int, nulls: int) -> Any:
            row, end = fallback(buf, pos, nulls)
            handed.append(row)
            return row, end

        def rows(buf: bytes, pos: int, stop: int, append: Any) -> int:
            return fallback(buf, pos, stop, lambda row: (handed.append(row), append(row)))
        return compiled(tm, idx, nulls, rows if run else body, run=run)

    monkeypatch.setattr(readers, "compiled_reader", counting)
    assert readers._rowread is not None, NOT_BUILT
    got = all_changes()
    with python_readers():
        want = all_changes()
    assert len(got) == len(want) > 350
    assert got == want
    assert handed and all(any(isinstance(v, str) and v[:1].isdigit() and "-" in v for v in row.values())
                          for row in handed), handed


def rows_events() -> list[tuple[int, bytes, bytes, int, int, str]]:
    """(event type, body, its table map's body, the table map's and the event's post-header
    lengths, flavour) of every plain rows event (CRC stripped) of the fixture binlogs."""
    out = []
    for path in FIXTURE_BINLOGS:
        data = path.read_bytes()
        pos, crc, phl, flavor, maps = 4, 0, b"", "mariadb", {}
        while pos < len(data):
            _, etype, _, length, _, _ = struct.unpack_from("<IBIIIH", data, pos)
            body = data[pos + 19:pos + length]
            pos += length
            if etype == 15:  # FORMAT_DESCRIPTION: checksum algorithm, post-header lengths, server
                crc, phl = body[-5], body[57:-5]
                flavor = "mariadb" if b"MariaDB" in body[2:52] else "mysql"
            if crc == 1:
                body = body[:-4]
            if etype == 19:
                maps[int.from_bytes(body[:6], "little")] = body
            elif etype in ROWS_EVENT_TYPES and etype != 39:
                table_map = maps[int.from_bytes(body[:6], "little")]
                out.append((etype, body, table_map, phl[18], phl[etype - 1], flavor))
    return out


def decoded(etype: int, body: bytes, table_map: bytes, phl19: int, phl: int, flavor: str) -> tuple[Any, ...]:
    """The rows of a rows event read with a table map of its own (readers built afresh), or
    the error it raises."""
    tm = tablemap_module._parse_table_map.__wrapped__(table_map, phl19, flavor)
    try:
        return ("rows", repr(parse_rows_event(etype, body, tm, phl).rows))
    except Exception as e:  # noqa: BLE001 - the same error both ways is the point
        return ("raises", type(e), str(e))


EVENTS = rows_events()


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_compiled_readers_equal_python_readers_on_corrupted_events(data):
    """A rows event cut short or with bytes changed: the compiled readers give what the Python
    ones give, the same rows or the same error (message included)."""
    event = data.draw(st.sampled_from(EVENTS))
    etype, body = event[0], bytearray(event[1])
    for _ in range(data.draw(st.integers(0, 3))):
        body[data.draw(st.integers(0, len(body) - 1))] = data.draw(st.integers(0, 255))
    body = body[:data.draw(st.integers(len(body) // 2, len(body)))]
    assert readers._rowread is not None, NOT_BUILT
    got = decoded(etype, bytes(body), *event[2:])
    with python_readers():
        want = decoded(etype, bytes(body), *event[2:])
    assert got == want
