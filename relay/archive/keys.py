"""The archive's key-encryption keys, read from the files the configuration names."""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import InputError
from .objectformat import Kek, load_kek


def read_kek(path: str) -> Kek:
    """The KEK in the file at ``path``; InputError naming the file (never its content)."""
    try:
        with open(path, "rb") as key_file:
            data = key_file.read(4096)
    except OSError as exc:
        raise InputError(f"key-encryption key {path}: cannot read it ({exc.strerror or exc})") from None
    return load_kek(data, path)


def read_keks(current: str | None, older: Iterable[str]) -> tuple[Kek, ...]:
    """The current key first (it encrypts new uploads; none: new uploads are not encrypted), then
    the older ones (they open what was archived under them)."""
    return tuple(read_kek(path) for path in ([current] if current else []) + list(older))
