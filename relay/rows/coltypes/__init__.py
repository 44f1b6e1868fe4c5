"""Column types of row events and their value decoders (sans-IO), one module per family.

A *decoder* is ``dec(buf: bytes, pos: int) -> (value, next_pos)``. One is built per
column when a table map is parsed, with everything that depends on the column
(metadata, signedness, charset, ENUM/SET names) already bound, so decoding a value
costs one call, one ``Struct.unpack_from`` or slice, and no lookups on the type. The
common types also have an *inline plan*, the lines the generated row readers
(``readers``) read them with, without a call, and a *compiled kind*, how the compiled
readers (``_rowread.c``, an optional C module) read them in C.

    codes      the type codes (enum_field_types) and their names
    base       the shapes every family shares: Decoder, Column, Inline, ColumnType
    charsets   collation ids -> codecs, MySQL's latin1, text converters
    numbers    TINY..LONGLONG, INT24, FLOAT, DOUBLE, YEAR, BIT
    decimal    NEWDECIMAL (and the old DECIMAL, not decoded)
    temporal   DATE, TIME, DATETIME, TIMESTAMP, old and fractional forms
    strings    CHAR/VARCHAR/BINARY/TEXT/BLOB, ENUM, SET, GEOMETRY, VECTOR
    json       MySQL's binary JSON and the diffs of its partial updates
    registry   TYPES: type code -> ColumnType, from the families; parse_column_meta,
               make_decoder, inline_plan, compiled_kind
    readers    the row readers: generated Python, wrapped in _rowread.c's when it is built

The Python value of each type is documented in its family's module; NULL type columns
read as None. docs/column-types.md says how to add a type.
"""

from .base import Column, ColumnType, Decoder, Inline, Truncated, inline_same, lenenc_at, unsupported
from .charsets import BINARY_CHARSET, charset_codec, decode_mysql_latin1, text_converter
from .codes import (
    BIT,
    BLOB,
    BLOB_TYPES,
    DATE,
    DATETIME,
    DATETIME2,
    DECIMAL,
    DOUBLE,
    ENUM,
    FLOAT,
    GEOMETRY,
    INT24,
    JSON,
    LONG,
    LONG_BLOB,
    LONGLONG,
    MEDIUM_BLOB,
    NEWDATE,
    NEWDECIMAL,
    NULL,
    SET,
    SHORT,
    STRING,
    TIME,
    TIME2,
    TIMESTAMP,
    TIMESTAMP2,
    TINY,
    TINY_BLOB,
    TYPE_NAMES,
    VAR_STRING,
    VARCHAR,
    VECTOR,
    YEAR,
    type_name,
)
from .decimal import decimal_size, decode_decimal
from .json import (
    JSON_DIFF_OPERATIONS,
    JsonDiff,
    JsonPartialUpdate,
    apply_json_diffs,
    decode_json_diffs,
    decode_mysql_json,
    parse_json_path,
    partial_json_decoder,
)
from .registry import (
    INLINE_GLOBALS,
    TYPES,
    has_sign_bit,
    inline_plan,
    is_character,
    make_decoder,
    parse_column_meta,
)
from .strings import member_kind

__all__ = [
    "BIT", "BLOB", "BLOB_TYPES", "DATE", "DATETIME", "DATETIME2", "DECIMAL", "DOUBLE", "ENUM", "FLOAT",
    "GEOMETRY", "INT24", "JSON", "LONG", "LONG_BLOB", "LONGLONG", "MEDIUM_BLOB", "NEWDATE", "NEWDECIMAL",
    "NULL", "SET", "SHORT", "STRING", "TIME", "TIME2", "TIMESTAMP", "TIMESTAMP2", "TINY", "TINY_BLOB",
    "TYPE_NAMES", "VAR_STRING", "VARCHAR", "VECTOR", "YEAR", "type_name",
    "BINARY_CHARSET", "charset_codec", "decode_mysql_latin1", "text_converter",
    "Column", "ColumnType", "Decoder", "Inline", "Truncated", "inline_same", "lenenc_at", "unsupported",
    "INLINE_GLOBALS", "TYPES", "has_sign_bit", "inline_plan", "is_character", "make_decoder",
    "parse_column_meta", "member_kind",
    "decimal_size", "decode_decimal",
    "JSON_DIFF_OPERATIONS", "JsonDiff", "JsonPartialUpdate", "apply_json_diffs", "decode_json_diffs",
    "decode_mysql_json", "parse_json_path", "partial_json_decoder",
]
