"""The one table of column types: type code -> ColumnType (metadata, decoder, inline plan,
optional-metadata classes), merged from the family modules, and the functions the table-map
parser and the row readers reach the types through (sans-IO)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import decimal, json, numbers, strings, temporal
from .base import Column, ColumnType, Compiled, Decoder, Inline, not_supported
from .codes import NULL
from .strings import member_kind

FAMILIES = (numbers, decimal, temporal, strings, json)


def _null(buf: bytes, pos: int) -> tuple[None, int]:
    return None, pos


def _merge() -> dict[int, ColumnType]:
    # The NULL type (no bytes, no metadata) is too small for a family of its own.
    types = {NULL: ColumnType(lambda col: _null)}
    for family in FAMILIES:
        for code, entry in family.TYPES.items():
            if code in types:
                raise ValueError(f"column type {code} is registered twice")
            types[code] = entry
    return types


TYPES: dict[int, ColumnType] = _merge()
# Names the lines of the inline plans use, for the generated readers' globals.
INLINE_GLOBALS: dict[str, Any] = {name: value for family in FAMILIES
                                  for name, value in family.INLINE_GLOBALS.items()}
_UNKNOWN = ColumnType(not_supported)  # a type code no family registers: no metadata, not decoded


def parse_column_meta(types: tuple[int, ...], meta: bytes) -> tuple[Any, ...]:
    """Split the table map's metadata block into one decoded entry per column.

    int for most types (FLOAT/DOUBLE pack length, BLOB/JSON/GEOMETRY length-prefix
    size, VARCHAR max byte length, temporal2 fsp, BIT total bits, 0 if none);
    (precision, scale) for NEWDECIMAL; (real_type, byte_length) for STRING/ENUM/SET.
    Raises ValueError/IndexError on a short block (the caller wraps it).
    """
    out: list[Any] = []
    pos = 0
    for t in types:
        kind = TYPES.get(t, _UNKNOWN)
        out.append(kind.read_meta(meta, pos))
        pos += kind.meta_size
    if pos != len(meta):
        raise ValueError(f"column metadata is {len(meta)} bytes, types need {pos}")
    return tuple(out)


def make_decoder(col_type: int, meta: Any, *, unsigned: bool = False,
                 charset: int | None = None,
                 names: tuple[str, ...] | None = None) -> Decoder:
    """Build the value decoder of one column.

    meta: the entry of parse_column_meta for the column; charset: its collation id if
    known; names: ENUM/SET member names if known.
    """
    return TYPES.get(col_type, _UNKNOWN).decoder(Column(col_type, meta, unsigned, charset, names))


def inline_plan(col_type: int, meta: Any, *, unsigned: bool = False,
                charset: int | None = None) -> Inline | None:
    """The inline reading of a column whose decoder make_decoder builds from the same
    arguments, or None where the reader should call the decoder (rare types)."""
    return _for_column(TYPES.get(col_type, _UNKNOWN).plan, Column(col_type, meta, unsigned, charset, None))


def compiled_kind(col_type: int, meta: Any, *, unsigned: bool = False,
                  charset: int | None = None) -> Compiled | None:
    """The compiled reader's kind of a column whose decoder make_decoder builds from the same
    arguments (base.R_*), or None where the compiled reader should call the decoder."""
    return _for_column(TYPES.get(col_type, _UNKNOWN).compiled, Column(col_type, meta, unsigned, charset, None))


def _for_column(build: Callable[[Column], Any] | None, col: Column) -> Any:
    if build is None:
        return None
    try:
        return build(col)
    except (TypeError, ValueError, IndexError):
        return None  # bad metadata: the decoder is an unsupported() one, let it raise


def has_sign_bit(col_type: int, flavor: str) -> bool:
    """Whether the SIGNEDNESS metadata of this server flavour has a bit for the type."""
    return flavor in TYPES.get(col_type, _UNKNOWN).signedness


def is_character(col_type: int, meta: Any, flavor: str) -> bool:
    """Whether the charset metadata (DEFAULT_CHARSET, COLUMN_CHARSET) of this flavour counts
    the column; ENUM and SET columns have charset fields of their own."""
    return flavor in TYPES.get(col_type, _UNKNOWN).character and member_kind(col_type, meta) is None
