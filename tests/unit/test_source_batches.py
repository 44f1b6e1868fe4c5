"""The Spark source's executor side (relay/pipeline/source.py read_partition) cuts its Arrow batches
by row count and by the bytes of the row images, so a transaction of large rows (1 MB blobs) never
sits in one batch of thousands of rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from relay.pipeline import plan as pl
from relay.pipeline import source

FULL = Path(__file__).resolve().parents[1] / "fixtures" / "rows" / "full.binlog"


def _batches(monkeypatch: pytest.MonkeyPatch, batch_bytes: int) -> list:
    monkeypatch.setattr(source, "BATCH_BYTES", batch_bytes)
    rng = pl.FileRange(FULL.name, str(FULL), 4, FULL.stat().st_size)
    return list(source.read_partition(source.BinlogPartition(rng, {}, {}, None, 4 << 20, True)))


def _image_bytes(row: dict) -> int:
    return sum(len(row[k] or "") for k in ("before", "after", "query"))


def test_a_batch_ends_once_its_row_images_reach_the_byte_bound(monkeypatch):
    whole = [row for batch in _batches(monkeypatch, 1 << 40) for row in batch.to_pylist()]
    assert len(whole) > 20
    sizes = [_image_bytes(row) for row in whole]
    bound = 5 * sorted(sizes)[len(sizes) // 2]  # a few rows a batch; the fixture's blob rows end theirs alone
    batches = _batches(monkeypatch, bound)
    assert len(batches) > 2
    for batch in batches:
        rows = batch.to_pylist()
        # a batch reaches the bound with its last row at the latest
        assert sum(_image_bytes(row) for row in rows[:-1]) < bound
    assert [row for batch in batches for row in batch.to_pylist()] == whole
