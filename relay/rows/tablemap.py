"""The TABLE_MAP event of row-based replication, parsed (sans-IO).

    tm = parse_table_map(table_map_body, post_header_len=phl[19 - 1])

A TableMap holds a table's columns (types, metadata, names, charsets, ENUM/SET members ...)
and the decoder of each column (relay.rows.coltypes). It is a module of its own, below both
rows.py, which decodes rows events with it, and coltypes/readers.py, which generates the row
readers of a table from it: so neither of them imports the other, not even for types.

Errors in the bytes raise RowDecodeError naming database.table and the byte offset; never
IndexError/struct.error.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

from relay.errors import InputError
from relay.rows import coltypes as ct
from relay.rows.coltypes import Decoder

__all__ = ["RowDecodeError", "TableMap", "parse_table_map"]

Flavor = Literal["mariadb", "mysql"]

TABLE_MAP_EVENT = 19

# Optional metadata field types (MySQL 8 Table_map_log_event::Optional_metadata_field_type,
# also written by MariaDB 10.5+).
SIGNEDNESS = 1
DEFAULT_CHARSET = 2
COLUMN_CHARSET = 3
COLUMN_NAME = 4
SET_STR_VALUE = 5
ENUM_STR_VALUE = 6
GEOMETRY_TYPE = 7
SIMPLE_PRIMARY_KEY = 8
PRIMARY_KEY_WITH_PREFIX = 9
ENUM_AND_SET_DEFAULT_CHARSET = 10
ENUM_AND_SET_COLUMN_CHARSET = 11
COLUMN_VISIBILITY = 12
VECTOR_DIMENSIONALITY = 13  # MySQL 9.0+: one lenenc per VECTOR column


class RowDecodeError(InputError):
    """Malformed or unsupported row data; the message says where."""

    def __init__(self, message: str, *, database: str | None = None,
                 table: str | None = None, column_index: int | None = None,
                 column_name: str | None = None, column_type: int | None = None,
                 offset: int | None = None) -> None:
        where = []
        if database is not None or table is not None:
            where.append(f"{database}.{table}")
        if column_index is not None:
            where.append(f"column {column_index} {column_name!r} "
                         f"({ct.type_name(column_type) if column_type is not None else '?'})")
        if offset is not None:
            where.append(f"byte offset {offset}")
        super().__init__(f"{', '.join(where)}: {message}" if where else message)
        self.database = database
        self.table = table
        self.column_index = column_index
        self.column_name = column_name
        self.column_type = column_type
        self.offset = offset


# Whatever a decoder may raise on bad bytes; wrapped into RowDecodeError.
_DECODE_ERRORS = (IndexError, struct.error, ValueError, OverflowError, zlib.error)


@dataclass(frozen=True)
class TableMap:
    """A parsed TABLE_MAP event. Per-column tuples are indexed by column number.

    Optional-metadata fields are None when the event did not carry them
    (binlog_row_metadata=NO_LOG, or a field the server writes only with FULL).
    """

    table_id: int
    flags: int
    database: str
    table: str
    column_types: tuple[int, ...]
    column_meta: tuple[Any, ...]
    nullable: tuple[bool, ...]
    column_names: tuple[str, ...]  # col_0, col_1, ... without COLUMN_NAME metadata
    has_column_names: bool
    unsigned: tuple[bool, ...] | None  # from SIGNEDNESS; False for non-numeric columns
    default_charset: int | None
    column_charsets: tuple[int | None, ...] | None  # None for non-character columns
    enum_set_default_charset: int | None
    enum_set_charsets: tuple[int | None, ...] | None  # None for non-ENUM/SET columns
    enum_values: tuple[tuple[str, ...] | None, ...] | None
    set_values: tuple[tuple[str, ...] | None, ...] | None
    geometry_types: tuple[int | None, ...] | None
    simple_primary_key: tuple[int, ...] | None
    primary_key_with_prefix: tuple[tuple[int, int], ...] | None  # (column, prefix; 0 = whole)
    column_visibility: tuple[bool, ...] | None
    vector_dimensions: tuple[int | None, ...] | None  # per VECTOR column, None for the others
    unknown_metadata: tuple[tuple[int, bytes], ...]
    flavor: Flavor
    decoders: tuple[Decoder, ...] = field(repr=False, compare=False)
    # present-bitmap bytes -> rows._Image; filled lazily by the rows decoder (Any: rows.py imports
    # this module, not the other way round)
    _images: dict[bytes, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def column_count(self) -> int:
        return len(self.column_types)

    @property
    def primary_key(self) -> tuple[int, ...] | None:
        """Primary-key column numbers from either PK metadata field, if present."""
        if self.simple_primary_key is not None:
            return self.simple_primary_key
        if self.primary_key_with_prefix is not None:
            return tuple(c for c, _ in self.primary_key_with_prefix)
        return None


class _Reader:
    """Bounds-checked cursor for the (cold) table-map parser."""

    def __init__(self, data: bytes, pos: int = 0, end: int | None = None) -> None:
        self.data = data
        self.pos = pos
        self.end = len(data) if end is None else end

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > self.end:
            raise ct.Truncated(f"need {n} bytes at offset {self.pos}, have {self.end - self.pos}")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def uint(self, n: int) -> int:
        return int.from_bytes(self.take(n), "little")

    def lenenc(self) -> int:
        value, end = ct.lenenc_at(self.data, self.pos)  # the protocol's one reader
        self.take(end - self.pos)  # Truncated when it runs past the reader's end
        return value

    def lenenc_bytes(self) -> bytes:
        return self.take(self.lenenc())

    def done(self) -> bool:
        return self.pos >= self.end


def parse_table_map(body: bytes | memoryview, post_header_len: int = 8, *,
                    flavor: Flavor = "mariadb") -> TableMap:
    """Parse a TABLE_MAP event body (after the common header, without CRC).

    post_header_len: the FDE's entry for type 19 (6 means a 4-byte table id).
    flavor: which server wrote it; MariaDB counts GEOMETRY columns as character
    columns in the charset metadata and YEAR as numeric in SIGNEDNESS, MySQL does not.
    Identical bodies return the same (immutable, cached) TableMap object.
    """
    return _parse_table_map(bytes(body), post_header_len, flavor)


@lru_cache(maxsize=1024)
def _parse_table_map(data: bytes, post_header_len: int, flavor: Flavor) -> TableMap:
    r = _Reader(data)
    database = table = None
    try:
        table_id = r.uint(4 if post_header_len == 6 else 6)
        flags = r.uint(2)
        r.pos = max(r.pos, post_header_len)
        database = _name(r.take(r.uint(1)))
        r.take(1)
        table = _name(r.take(r.uint(1)))
        r.take(1)
        ncols = r.lenenc()
        types = tuple(r.take(ncols))
        meta = ct.parse_column_meta(types, r.lenenc_bytes())
        null_bits = r.take((ncols + 7) // 8)
        nullable = tuple(bool(null_bits[i >> 3] >> (i & 7) & 1) for i in range(ncols))
        fields = _parse_optional_metadata(r, types, meta, flavor)
    except _DECODE_ERRORS as e:
        raise RowDecodeError(f"bad TABLE_MAP event: {e}", database=database, table=table,
                             offset=r.pos) from None
    return _build_table_map(table_id, flags, database, table, types, meta, nullable,
                            fields, flavor)


def _name(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def _msb_bits(raw: bytes, count: int) -> list[bool]:
    # Metadata bitmaps are most-significant-bit first (unlike row bitmaps).
    if len(raw) * 8 < count:
        raise ct.Truncated(f"bitmap of {len(raw)} bytes for {count} columns")
    return [bool(raw[i >> 3] & (0x80 >> (i & 7))) for i in range(count)]


def _parse_optional_metadata(r: _Reader, types: tuple[int, ...], meta: tuple[Any, ...],
                             flavor: Flavor) -> dict[int, Any]:
    """TLV fields (type u8, lenenc length, value) after the null bitmap."""
    out: dict[int, Any] = {}
    unknown = []
    while not r.done():
        ftype = r.uint(1)
        chunk = r.lenenc_bytes()
        f = _Reader(chunk)
        if ftype in (SIGNEDNESS, COLUMN_VISIBILITY):
            out[ftype] = chunk
        elif ftype in (DEFAULT_CHARSET, ENUM_AND_SET_DEFAULT_CHARSET):
            default = f.lenenc()
            pairs = []
            while not f.done():
                pairs.append((f.lenenc(), f.lenenc()))
            out[ftype] = (default, pairs)
        elif ftype in (COLUMN_CHARSET, ENUM_AND_SET_COLUMN_CHARSET, GEOMETRY_TYPE,
                       SIMPLE_PRIMARY_KEY, VECTOR_DIMENSIONALITY):
            vals = []
            while not f.done():
                vals.append(f.lenenc())
            out[ftype] = vals
        elif ftype == COLUMN_NAME:
            names = []
            while not f.done():
                names.append(_name(f.lenenc_bytes()))
            out[ftype] = names
        elif ftype in (SET_STR_VALUE, ENUM_STR_VALUE):
            lists = []
            while not f.done():
                lists.append([f.lenenc_bytes() for _ in range(f.lenenc())])
            out[ftype] = lists
        elif ftype == PRIMARY_KEY_WITH_PREFIX:
            pairs = []
            while not f.done():
                pairs.append((f.lenenc(), f.lenenc()))
            out[ftype] = pairs
        else:
            unknown.append((ftype, chunk))
    out[0] = tuple(unknown)
    return out


def _spread(values: list[Any], mask: list[bool], what: str) -> tuple[Any, ...]:
    """Values listed for the columns selected by mask -> a per-column tuple."""
    if len(values) != sum(mask):
        raise ValueError(f"{what}: {len(values)} entries for {sum(mask)} columns")
    it = iter(values)
    return tuple(next(it) if m else None for m in mask)


def _charsets(fields: dict[int, Any], default_type: int, column_type: int,
              mask: list[bool]) -> tuple[int | None, tuple[int | None, ...] | None]:
    if column_type in fields:
        return None, _spread(fields[column_type], mask, "column charsets")
    if default_type not in fields:
        return None, None
    default, pairs = fields[default_type]
    per = [default] * sum(mask)
    for idx, cs in pairs:
        if idx >= len(per):
            raise ValueError(f"charset exception for column {idx} of {len(per)}")
        per[idx] = cs
    return default, _spread(per, mask, "default charsets")


def _build_table_map(table_id: int, flags: int, database: str, table: str,
                     types: tuple[int, ...], meta: tuple[Any, ...],
                     nullable: tuple[bool, ...], fields: dict[int, Any],
                     flavor: Flavor) -> TableMap:
    ncols = len(types)
    try:
        is_num = [ct.has_sign_bit(t, flavor) for t in types]
        is_char = [ct.is_character(t, m, flavor) for t, m in zip(types, meta)]
        kinds = [ct.member_kind(t, m) for t, m in zip(types, meta)]
        is_es = [kind is not None for kind in kinds]
        is_enum = [kind == ct.ENUM for kind in kinds]
        is_set = [kind == ct.SET for kind in kinds]

        unsigned = None
        if SIGNEDNESS in fields:
            bits = iter(_msb_bits(fields[SIGNEDNESS], sum(is_num)))
            unsigned = tuple(next(bits) if n else False for n in is_num)
        default_cs, col_cs = _charsets(fields, DEFAULT_CHARSET, COLUMN_CHARSET, is_char)
        es_default, es_cs = _charsets(fields, ENUM_AND_SET_DEFAULT_CHARSET,
                                      ENUM_AND_SET_COLUMN_CHARSET, is_es)
        names = fields.get(COLUMN_NAME)
        if names is not None and len(names) != ncols:
            raise ValueError(f"{len(names)} column names for {ncols} columns")
        enum_values = _member_names(fields.get(ENUM_STR_VALUE), is_enum, es_cs, "ENUM")
        set_values = _member_names(fields.get(SET_STR_VALUE), is_set, es_cs, "SET")
        geometry = None
        if GEOMETRY_TYPE in fields:
            geometry = _spread(fields[GEOMETRY_TYPE], [t == ct.GEOMETRY for t in types],
                               "geometry types")
        visibility = None
        if COLUMN_VISIBILITY in fields:
            visibility = tuple(_msb_bits(fields[COLUMN_VISIBILITY], ncols))
        dimensions = None
        if VECTOR_DIMENSIONALITY in fields:
            dimensions = _spread(fields[VECTOR_DIMENSIONALITY], [t == ct.VECTOR for t in types],
                                 "vector dimensionalities")
        pk = fields.get(SIMPLE_PRIMARY_KEY)
        pk_prefix = fields.get(PRIMARY_KEY_WITH_PREFIX)
    except _DECODE_ERRORS as e:
        raise RowDecodeError(f"bad TABLE_MAP optional metadata: {e}", database=database, table=table) from None

    decoders = []
    for i, (t, m) in enumerate(zip(types, meta)):
        try:
            decoders.append(ct.make_decoder(
                t, m, unsigned=bool(unsigned and unsigned[i]),
                charset=col_cs[i] if col_cs else None,
                names=(enum_values and enum_values[i]) or (set_values and set_values[i])
                or None))
        except _DECODE_ERRORS as e:
            decoders.append(ct.unsupported(t, str(e)))

    return TableMap(
        table_id=table_id, flags=flags, database=database, table=table,
        column_types=types, column_meta=meta, nullable=nullable,
        column_names=tuple(names) if names is not None else
        tuple(f"col_{i}" for i in range(ncols)),
        has_column_names=names is not None, unsigned=unsigned,
        default_charset=default_cs, column_charsets=col_cs,
        enum_set_default_charset=es_default, enum_set_charsets=es_cs,
        enum_values=enum_values, set_values=set_values, geometry_types=geometry,
        simple_primary_key=tuple(pk) if pk is not None else None,
        primary_key_with_prefix=tuple(pk_prefix) if pk_prefix is not None else None,
        column_visibility=visibility, vector_dimensions=dimensions, unknown_metadata=fields[0], flavor=flavor,
        decoders=tuple(decoders))


def _member_names(lists: list[list[bytes]] | None, mask: list[bool],
                  charsets: tuple[int | None, ...] | None,
                  what: str) -> tuple[tuple[str, ...] | None, ...] | None:
    if lists is None:
        return None
    per = _spread(lists, mask, f"{what} value lists")
    out: list[tuple[str, ...] | None] = []
    for i, members in enumerate(per):
        if members is None:
            out.append(None)
            continue
        conv = ct.text_converter(charsets[i] if charsets else None)
        out.append(tuple(_member_text(conv(m)) for m in members))
    return tuple(out)


def _member_text(v: str | bytes) -> str:
    # Names in a binary-charset or undecodable ENUM still need to be dict-friendly text.
    return v if isinstance(v, str) else v.decode("latin-1")
