"""A damaged closed file fetched again from the primary (ingest dumps that one file: ingest/refetch.py):
its bytes written beside the stored file as they arrive, then put in its place by
``RelayLog.replace_damaged`` (if the stored whole events are a prefix of it and it is whole: fsynced,
renamed) or removed, the stored file kept."""

from __future__ import annotations

from types import TracebackType

from ..binlog import events as ev
from .relaylog import RelayLog


class FetchedCopy:
    """``data_dir/NAME.fetched``, written as the primary's copy of the damaged ``name`` arrives.  As a
    context manager: closed at the end, and removed if what wrote it failed."""

    def __init__(self, relay_log: RelayLog, name: str) -> None:
        self.relay_log = relay_log
        self.name = name
        self.path = relay_log.data_dir / f"{name}.fetched"
        self._out = open(self.path, "wb")  # closed by __exit__
        self._out.write(ev.BINLOG_MAGIC)

    def __enter__(self) -> FetchedCopy:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self._out.close()
        if exc_type is not None:
            self.path.unlink(missing_ok=True)

    @property
    def end(self) -> int:
        """Where the next bytes go: what was written so far."""
        return self._out.tell()

    def append(self, chunks: list[memoryview | bytes]) -> None:
        self._out.writelines(chunks)

    def put_in_place(self) -> bool:
        """The copy replaces the damaged file (True), or is removed and the stored file kept (False)."""
        return self.relay_log.replace_damaged(self.name, self.path)
