"""Column types one by one (relay.binlog.coltypes), a section per family module: hand-made
bytes against the values the servers document, each read both by the column's decoder and
by a generated row reader (its inline plan) where the type has one. Whole binlogs from real
servers: tests/unit/test_rows.py (MariaDB) and tests/unit/test_mysql_rows.py (MySQL)."""

from __future__ import annotations

import datetime as dt
import struct
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relay.binlog import coltypes as ct
from relay.binlog.coltypes.readers import compile_body


def read_both_ways(col_type: int, meta: Any, raw: bytes, *, unsigned: bool = False, charset: int | None = None,
                   names: tuple[str, ...] | None = None) -> Any:
    """The value of raw (one column's bytes, all of them) as its decoder reads it, checked to be
    what a generated reader of a one-column row gives: same value, same type, same end."""
    decoder = ct.make_decoder(col_type, meta, unsigned=unsigned, charset=charset, names=names)
    value, end = decoder(raw, 0)
    assert end == len(raw)
    table_map = SimpleNamespace(database="d", table="t", column_types=(col_type,), column_meta=(meta,),
                                unsigned=(unsigned,), column_charsets=(charset,), column_count=1,
                                column_names=("c",), decoders=(decoder,))
    row, row_end = compile_body(table_map, (0,), 0)(raw, 0, 0)  # type: ignore[arg-type]
    assert repr(row["c"]) == repr(value) and row_end == end
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
    assert read_both_ways(ct.DATE, 0, b"\x00\x00\x00") == "0000-00-00"


def test_datetime2_and_timestamp2():
    packed = ((2024 * 13 + 5) << 22 | 6 << 17 | 7 << 12 | 8 << 6 | 9) + 0x8000000000
    assert read_both_ways(ct.DATETIME2, 0, packed.to_bytes(5, "big")) == dt.datetime(2024, 5, 6, 7, 8, 9)
    assert read_both_ways(ct.DATETIME2, 3, (0x8000000000).to_bytes(5, "big") + b"\x00\x00") == \
        "0000-00-00 00:00:00.000"
    assert read_both_ways(ct.TIMESTAMP2, 6, (1000).to_bytes(4, "big") + (5).to_bytes(3, "big")) == \
        dt.datetime(1970, 1, 1, 0, 16, 40, 5, tzinfo=dt.timezone.utc)


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


