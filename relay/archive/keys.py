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
    the older ones (they open what was archived under them).  Older ones without a current key are
    refused: the first key is the one new uploads use (config.py's check refuses them first)."""
    old_paths = list(older)
    if current is None and old_paths:
        raise InputError("archive.old_encryption_key_files is given without archive.encryption_key_file")
    return tuple(read_kek(path) for path in ([current] if current else []) + old_paths)
