"""Character sets of text columns (sans-IO): collation ids to Python codecs, MySQL's latin1,
and the bytes -> value converter of a character column."""

from __future__ import annotations

import codecs
from collections.abc import Callable
from typing import Any

BINARY_CHARSET = 63


def _mysql_latin1_table() -> str:
    # MySQL's latin1 is cp1252, except that the 5 bytes cp1252 leaves undefined map to
    # the C1 control characters of the same value (strings/ctype-latin1.c).
    chars = []
    for b in range(256):
        try:
            chars.append(bytes([b]).decode("cp1252"))
        except UnicodeDecodeError:
            chars.append(chr(b))
    return "".join(chars)


_LATIN1_TABLE = _mysql_latin1_table()


def decode_mysql_latin1(raw: bytes) -> str:
    return codecs.charmap_decode(raw, "strict", _LATIN1_TABLE)[0]


def _charset_ids() -> dict[int, str]:
    # Collation id -> Python codec, for MySQL/MariaDB built-in collations.
    groups: dict[str, tuple[int, ...]] = {
        "utf-8": (33, 83, 45, 46, 76, *range(192, 216), 223, *range(224, 248),
                  *range(255, 324), 576, 577, 578, 608, 609, 610),
        "mysql-latin1": (5, 8, 15, 31, 47, 48, 49, 94),
        "ascii": (11, 65),
        "iso8859-2": (2, 9, 21, 27, 77),
        "iso8859-7": (25, 70),
        "iso8859-8": (16, 71),
        "iso8859-9": (30, 78),
        "iso8859-13": (20, 41, 42, 79),
        "koi8-r": (7, 74),
        "koi8-u": (22, 75),
        "cp850": (4, 80),
        "cp852": (40, 81),
        "cp866": (36, 68),
        "cp1250": (26, 34, 44, 66, 99),
        "cp1251": (14, 23, 50, 51, 52),
        "cp1256": (57, 67),
        "cp1257": (29, 58, 59),
        "mac-roman": (39, 53),
        "tis-620": (18, 89),
        "big5": (1, 84),
        "gbk": (28, 87),
        "gb2312": (24, 86),
        "gb18030": (248, 249, 250),
        "shift_jis": (13, 88),
        "cp932": (95, 96),
        "euc-jp": (12, 91),
        "euc_jis_2004": (97, 98),
        "euc-kr": (19, 85),
        "utf-16-be": (35, 90, *range(128, 152), 159, 54, 55, *range(101, 125),
                      640, 641, 642, 672, 673, 674),
        "utf-16-le": (56, 62),
        "utf-32-be": (60, 61, *range(160, 184), 736, 737, 738),
    }
    ids = {cid: codec for codec, cids in groups.items() for cid in cids}
    # MariaDB: NO PAD collations are the PAD ones + 1024; UCA-14.0.0 ones live at
    # 2048 + 256*k for utf8mb3, utf8mb4, ucs2, utf16, utf32 (ctype-uca.c).
    for cid, codec in list(ids.items()):
        if cid < 256:
            ids.setdefault(cid + 1024, codec)
    for k, codec in enumerate(("utf-8", "utf-8", "utf-16-be", "utf-16-be", "utf-32-be")):
        for cid in range(2048 + 256 * k, 2048 + 256 * (k + 1)):
            ids[cid] = codec
    return ids


_CHARSET_CODECS = _charset_ids()


def charset_codec(charset: int | None) -> str | None:
    """Python codec for a collation id; "binary" for 63; None when unknown."""
    if charset is None:
        return None
    if charset == BINARY_CHARSET:
        return "binary"
    return _CHARSET_CODECS.get(charset)


def text_converter(charset: int | None) -> Callable[[bytes], Any]:
    """bytes -> value for a character column: str by the collation's codec (``latin1`` is
    MySQL's cp1252 variant), bytes for the binary charset (63); without a known collation,
    str if the bytes are valid UTF-8, else bytes."""
    codec = charset_codec(charset)
    if codec == "binary":
        return bytes
    if codec == "mysql-latin1":
        return decode_mysql_latin1
    if codec is None:
        return _utf8_or_bytes
    return lambda raw: raw.decode(codec)


def _utf8_or_bytes(raw: bytes) -> str | bytes:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw
