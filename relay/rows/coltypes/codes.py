"""The column type codes of row events (the server's enum_field_types) and their names.

Every code the servers define is here, decoded or not; what each decodes to is in the
family modules beside this one, registered in relay.rows.coltypes.registry.
"""

from __future__ import annotations

# enum_field_types (include/mysql_com.h / field_types.h)
DECIMAL = 0
TINY = 1
SHORT = 2
LONG = 3
FLOAT = 4
DOUBLE = 5
NULL = 6
TIMESTAMP = 7
LONGLONG = 8
INT24 = 9
DATE = 10
TIME = 11
DATETIME = 12
YEAR = 13
NEWDATE = 14
VARCHAR = 15
BIT = 16
TIMESTAMP2 = 17
DATETIME2 = 18
TIME2 = 19
VECTOR = 242  # MySQL 9.0+
JSON = 245
NEWDECIMAL = 246
ENUM = 247
SET = 248
TINY_BLOB = 249
MEDIUM_BLOB = 250
LONG_BLOB = 251
BLOB = 252
VAR_STRING = 253
STRING = 254
GEOMETRY = 255

TYPE_NAMES: dict[int, str] = {
    DECIMAL: "DECIMAL", TINY: "TINY", SHORT: "SHORT", LONG: "LONG", FLOAT: "FLOAT",
    DOUBLE: "DOUBLE", NULL: "NULL", TIMESTAMP: "TIMESTAMP", LONGLONG: "LONGLONG",
    INT24: "INT24", DATE: "DATE", TIME: "TIME", DATETIME: "DATETIME", YEAR: "YEAR",
    NEWDATE: "NEWDATE", VARCHAR: "VARCHAR", BIT: "BIT", TIMESTAMP2: "TIMESTAMP2",
    DATETIME2: "DATETIME2", TIME2: "TIME2", VECTOR: "VECTOR", JSON: "JSON", NEWDECIMAL: "NEWDECIMAL",
    ENUM: "ENUM", SET: "SET", TINY_BLOB: "TINY_BLOB", MEDIUM_BLOB: "MEDIUM_BLOB",
    LONG_BLOB: "LONG_BLOB", BLOB: "BLOB", VAR_STRING: "VAR_STRING", STRING: "STRING",
    GEOMETRY: "GEOMETRY",
}

BLOB_TYPES = frozenset({TINY_BLOB, MEDIUM_BLOB, LONG_BLOB, BLOB})


def type_name(col_type: int) -> str:
    return TYPE_NAMES.get(col_type, f"type {col_type}")
