"""The relay's per-event loops run compiled (relay/binlog/_scan.c) or in Python; tests run both.

The compiled module is optional for users, not for the tests: the test command builds it, so a
missing module fails the "compiled" runs instead of skipping them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType

import pytest

LOOPS = ["compiled", "python"]
NOT_BUILT = "relay/binlog/_scan.c is not built (pip install -e . needs gcc and Python's headers)"


def select_loop(loop: str, monkeypatch: pytest.MonkeyPatch, module: ModuleType, attribute: str) -> str:
    """Make ``module`` run ``loop``: its compiled function ``attribute`` must exist for
    "compiled" and is taken away for "python"."""
    if loop == "compiled":
        assert getattr(module, attribute) is not None, NOT_BUILT
    else:
        monkeypatch.setattr(module, attribute, None)
    return loop


@contextmanager
def python_loop(module: ModuleType, attribute: str) -> Iterator[None]:
    """Inside: ``module`` runs its Python loop (for tests that compare both within one example)."""
    compiled = getattr(module, attribute)
    assert compiled is not None, NOT_BUILT
    setattr(module, attribute, None)
    try:
        yield
    finally:
        setattr(module, attribute, compiled)
