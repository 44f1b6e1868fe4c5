"""Change rows, or transactions, out of one binlog file on disk: the file-reading front of
``rows.changes``' sans-IO ChangeDecoder (and ``rows.transactions``' TransactionDecoder),
for the Spark source and for tools."""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from functools import partial
from typing import Any, BinaryIO

from ..binlog import events as ev
from ..rows.changes import (
    DEFAULT_SEGMENT_BYTES,
    NO_CHANGES,
    Change,
    ChangeDecodeError,
    ChangeDecoder,
    GtidRange,
    TableFilter,
)
from ..rows.transactions import Transaction, TransactionDecoder
from ..storage.scan import iter_event_batches, iter_events


def iter_changes(source: str | os.PathLike[str] | bytes | BinaryIO, start: int = 4, end: int | None = None,
                 *, file: str | None = None, gtids: GtidRange | None = None,
                 tables: TableFilter | str | None = None, segment_bytes: int = DEFAULT_SEGMENT_BYTES,
                 with_ddl: bool = True, decoder_out: list[ChangeDecoder] | None = None) -> Iterator[Change]:
    """The changes of the groups in [start, end) of one binlog file.

    source: a path, the file's bytes, or an open seekable binary stream (a group larger
    than segment_bytes is read from it twice, see ChangeDecoder). start must be a group
    boundary (4, or the end of a group); the FORMAT_DESCRIPTION event at offset 4 is read
    first when start > 4. end defaults to the source's size; a group not finished by then
    is not emitted. file: the name put into each Change (default: the path's base name).
    decoder_out: if given, the decoder is appended to it (for its counters).
    """
    return _decoded(ChangeDecoder, source, start, end, file=file, gtids=gtids, tables=tables,
                    segment_bytes=segment_bytes, with_ddl=with_ddl, decoder_out=decoder_out)


def iter_transactions(source: str | os.PathLike[str] | bytes | BinaryIO, start: int = 4,
                      end: int | None = None, *, file: str | None = None, gtids: GtidRange | None = None,
                      tables: TableFilter | str | None = None, segment_bytes: int = DEFAULT_SEGMENT_BYTES,
                      with_ddl: bool = True,
                      decoder_out: list[ChangeDecoder] | None = None) -> Iterator[Transaction]:
    """The committed transactions in [start, end) of one binlog file, as iter_changes reads
    its changes (same arguments; see relay.rows.transactions for what is counted)."""
    return _decoded(TransactionDecoder, source, start, end, file=file, gtids=gtids, tables=tables,
                    segment_bytes=segment_bytes, with_ddl=with_ddl, decoder_out=decoder_out)


def _decoded(kind: type[ChangeDecoder], source: str | os.PathLike[str] | bytes | BinaryIO, start: int,
             end: int | None, *, file: str | None, gtids: GtidRange | None, tables: TableFilter | str | None,
             segment_bytes: int, with_ddl: bool, decoder_out: list[ChangeDecoder] | None) -> Iterator[Any]:
    """What a decoder of this kind makes of [start, end) of the source."""
    own = False
    if isinstance(source, (bytes, bytearray, memoryview)):
        stream: BinaryIO = io.BytesIO(bytes(source))
        name = file or "binlog"
    elif isinstance(source, (str, os.PathLike)):
        stream = open(source, "rb")
        own = True
        name = file or os.path.basename(os.fspath(source))
    else:
        stream = source
        name = file if file else getattr(source, "name", "binlog")
    if isinstance(tables, str) or tables is None:
        tables = TableFilter(tables)
    decoder = kind(name, partial(iter_events, stream), gtids=gtids, tables=tables, segment_bytes=segment_bytes,
                   with_ddl=with_ddl)
    if decoder_out is not None:
        decoder_out.append(decoder)
    try:
        if end is None:
            stream.seek(0, os.SEEK_END)
            end = stream.tell()
        stream.seek(0)
        if stream.read(4) != ev.BINLOG_MAGIC:
            raise ChangeDecodeError(f"{name}: not a binlog file (bad magic number)")
        if start > 4:
            for _, fde in iter_events(stream, 4, end, block_size=1 << 16):
                if fde[4] != ev.FORMAT_DESCRIPTION_EVENT:
                    raise ChangeDecodeError(f"{name}: the first event is not a FORMAT_DESCRIPTION event")
                decoder.feed(4, fde)
                break
        feed, empty = decoder.feed, NO_CHANGES
        for batch in iter_event_batches(stream, start, end):
            for offset, event in batch:
                out = feed(offset, event)
                if out is not empty:
                    yield from out
    finally:
        decoder.close()
        if own:
            stream.close()
