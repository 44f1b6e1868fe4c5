"""DECIMAL (sans-IO): MySQL's binary NEWDECIMAL, its decoder and its inline plan.

Python values: NEWDECIMAL is a decimal.Decimal with exactly ``scale`` fractional digits. The
pre-5.0 DECIMAL (type 0, digits as text) is not decoded: its columns raise when read.
"""

from __future__ import annotations

import decimal
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from .base import BOTH, R_DECIMAL, ColumnType, Compiled, Decoder, Inline, need, not_supported
from .codes import DECIMAL, NEWDECIMAL

_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)


def decimal_size(precision: int, scale: int) -> int:
    """Bytes of a NEWDECIMAL(precision, scale) in binary form (decimal_bin_size)."""
    intg = precision - scale
    return (intg // 9 * 4 + _DIG2BYTES[intg % 9]
            + scale // 9 * 4 + _DIG2BYTES[scale % 9])


def _decimal_groups(precision: int, scale: int) -> tuple[tuple[int, int], ...]:
    # (bytes, digits) per group, most significant first: a partial leading integer
    # group, full 9-digit groups, then fractional full groups and a partial last one.
    intg = precision - scale
    groups = []
    if intg % 9:
        groups.append((_DIG2BYTES[intg % 9], intg % 9))
    groups += [(4, 9)] * (intg // 9)
    groups += [(4, 9)] * (scale // 9)
    if scale % 9:
        groups.append((_DIG2BYTES[scale % 9], scale % 9))
    return tuple(groups)


def decode_decimal(raw: bytes, precision: int, scale: int) -> Decimal:
    """MySQL binary DECIMAL (strings/decimal.cc, decimal2bin) -> Decimal.

    Big-endian groups of 9 decimal digits in 4 bytes, partial groups in fewer; the
    sign bit (MSB of the first byte) is set for positive numbers, and a negative
    number is stored with every bit inverted.
    """
    if len(raw) != decimal_size(precision, scale):
        raise ValueError(f"DECIMAL({precision},{scale}) needs {decimal_size(precision, scale)} "
                         f"bytes, got {len(raw)}")
    return _decimal_reader(precision, scale)(raw)


def _decimal_reader(precision: int, scale: int) -> Callable[[bytes], Decimal]:
    """Precomputes the group layout of one DECIMAL(precision, scale)."""
    size = decimal_size(precision, scale)
    if size == 0:
        zero = Decimal(0).scaleb(-scale)
        return lambda raw: zero
    intg = precision - scale
    int_bytes = intg // 9 * 4 + _DIG2BYTES[intg % 9]
    plan = []  # (shift, mask, 10**digits, is_integer_part)
    shift = size * 8
    for nbytes, ndigits in _decimal_groups(precision, scale):
        shift -= nbytes * 8
        plan.append((shift, (1 << nbytes * 8) - 1, 10 ** ndigits, shift >= (size - int_bytes) * 8))
    sign_bit = 1 << (size * 8 - 1)
    flip_negative = ((1 << size * 8) - 1) ^ sign_bit
    frac_fmt = f"0{scale}d"

    def read(raw: bytes) -> Decimal:
        v = int.from_bytes(raw, "big")
        if v & sign_bit:
            v ^= sign_bit
            sign = ""
        else:
            v ^= flip_negative  # inverted bits; the sign bit was 0 and stays 0
            sign = "-"
        int_digits = frac_digits = 0
        for sh, mask, limit, is_int in plan:
            g = (v >> sh) & mask
            if g >= limit:
                raise ValueError(f"corrupt DECIMAL({precision},{scale}) digit group {g}")
            if is_int:
                int_digits = int_digits * limit + g
            else:
                frac_digits = frac_digits * limit + g
        if scale:
            return Decimal(f"{sign}{int_digits}.{frac_digits:{frac_fmt}}")
        return Decimal(f"{sign}{int_digits}")
    return read


def _decimal(meta: tuple[int, int]) -> Decoder:
    precision, scale = meta
    if scale > precision or precision > 65 or scale > 38:
        raise ValueError(f"bad DECIMAL metadata ({precision},{scale})")
    size = decimal_size(precision, scale)
    read = _decimal_reader(precision, scale)

    def dec(buf: bytes, pos: int) -> tuple[Decimal, int]:
        end = pos + size
        if end > len(buf):
            need(end, buf)
        return read(buf[pos:end]), end
    return dec


_DECIMAL_CONTEXT = decimal.Context(prec=100, Emax=999999, Emin=-999999)  # never rounds a column


def _decimal_plan(precision: int, scale: int) -> Inline | None:
    """NEWDECIMAL as its digit groups: one struct code per group (a 3-byte group is two),
    the sign flip and range checks of _decimal_reader, and the Decimal built from the
    integer of all its digits (exact, ~4x cheaper than parsing text): that integer times
    10**-scale, multiplied by the context that never rounds. The context's methods take
    the int as it is, which saves building a Decimal of it first (a third of the cost);
    the product's exponent is the factor's, -scale, as the decoder's text gives."""
    _decimal((precision, scale))  # same metadata checks as the decoder
    groups = _decimal_groups(precision, scale)
    if not groups:
        return None
    codes = "".join({1: "B", 2: "H", 3: "BH", 4: "I"}[nbytes] for nbytes, _ in groups)
    sign = 1 << (groups[0][0] * 8 - 1)
    negative_zero = Decimal(f"-0.{'0' * scale}" if scale else "-0")
    unit = Decimal(1).scaleb(-scale)  # 1E-scale

    def render(v: str, t: list[str], c: str) -> list[str]:
        lines, names, it = [], [], iter(t)
        for nbytes, _ in groups:
            if nbytes == 3:
                hi, lo = next(it), next(it)
                lines.append(f"{hi} = {hi} << 16 | {lo}")
                names.append(hi)
            else:
                names.append(next(it))
        masks = [(1 << nbytes * 8) - 1 for nbytes, _ in groups]
        limits = [10 ** digits for _, digits in groups]
        out_of_range = " or ".join(f"{g} >= {lim}" for g, lim in zip(names, limits))
        digits = names[0]
        for g, lim in zip(names[1:], limits[1:]):
            digits = f"({digits}) * {lim} + {g}"

        def value(n: str) -> str:
            return f"_decimal_multiply({n}, {c}unit)" if scale else f"_Decimal({n})"
        return lines + [
            f"if {names[0]} & {sign}:",
            f"    {names[0]} ^= {sign}",
            f"    if {out_of_range}:",
            f"        _bad_decimal({precision}, {scale})",
            f"    {v} = {value(digits)}",
            "else:",
            *(f"    {g} ^= {m ^ (sign if i == 0 else 0)}" for i, (g, m) in enumerate(zip(names, masks))),
            f"    if {out_of_range}:",
            f"        _bad_decimal({precision}, {scale})",
            f"    x = {digits}",
            f"    {v} = {value('-x')} if x else {c}negzero"]
    return Inline(codes, ">", render, {"negzero": negative_zero, "unit": unit}, False)


def _decimal_compiled(precision: int, scale: int) -> Compiled | None:
    """The compiled reader's NEWDECIMAL: the plan's groups, checks and objects (_rowread.c)."""
    _decimal((precision, scale))  # same metadata checks as the decoder
    if not _decimal_groups(precision, scale):
        return None
    negative_zero = Decimal(f"-0.{'0' * scale}" if scale else "-0")
    return (R_DECIMAL, precision, scale,
            (_DECIMAL_CONTEXT.multiply, Decimal(1).scaleb(-scale), negative_zero, Decimal))


def _bad_decimal(precision: int, scale: int) -> None:
    raise ValueError(f"corrupt DECIMAL({precision},{scale}) digit group")


def _decimal_meta(meta: bytes, pos: int) -> tuple[int, int]:
    return meta[pos], meta[pos + 1]  # (precision, scale)


TYPES: dict[int, ColumnType] = {
    NEWDECIMAL: ColumnType(lambda col: _decimal(col.meta), lambda col: _decimal_plan(*col.meta),
                           meta_size=2, read_meta=_decimal_meta, signedness=BOTH,
                           compiled=lambda col: _decimal_compiled(*col.meta)),
    DECIMAL: ColumnType(not_supported, signedness=BOTH),
}
# Names the lines of the plans use, for the reader's globals.
INLINE_GLOBALS: dict[str, Any] = {
    "_Decimal": Decimal, "_decimal_multiply": _DECIMAL_CONTEXT.multiply, "_bad_decimal": _bad_decimal,
}
