"""A relay's seed from its archive cut short at a chosen step, as kill -9 would cut it:
``python -m tests.support.crashseed CONFIG STEP`` runs relay.archive.archiver.seed_from_archive for
the relay of CONFIG and ends the process with os._exit at STEP:

- ``import``: inside the import, its index written, its state not (importer.write_state);
- ``catalog``: the import done, archive.json and the next file not written (archiver.save_catalog).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import relay.archive.archiver as archiver
import relay.storage.importer as importer
from relay.app import archive_settings
from relay.config import load_config

KILLED = 9


def _die(*_: Any, **__: Any) -> None:
    sys.stdout.flush()
    os._exit(KILLED)


def main(config_path: str, step: str) -> None:
    config = load_config(config_path)
    settings = archive_settings(config)
    assert settings is not None, "the relay has no archive"
    if step == "import":
        importer.write_state = _die  # type: ignore[assignment]
    elif step == "catalog":
        archiver.save_catalog = _die  # type: ignore[assignment]
    else:
        raise SystemExit(f"no step {step!r}")
    archiver.seed_from_archive(settings, Path(config.data_dir))
    raise SystemExit("the seed ended before the step it was to be cut at")


if __name__ == "__main__":
    main(*sys.argv[1:])
