"""The deployment tests' tools: helm, installed by scripts/install-tools.sh (scripts/test.sh runs it)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INSTALL_HINT = "run `bash scripts/install-tools.sh` (scripts/test.sh does)"


@pytest.fixture(scope="session")
def helm() -> str:
    local = ROOT / ".tools" / "bin" / "helm"
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    found = shutil.which("helm")
    if found is None:
        pytest.fail(f"helm not found at {local} or on PATH: {INSTALL_HINT}", pytrace=False)
    return found
