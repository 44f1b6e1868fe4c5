"""What a relay loads as it starts: a restarted relay (a crash, a rollout) serves nobody until it
listens, and importing the archive's libraries (boto3 most of all) had doubled that time for every
relay, with an archive or not.  Each probe is a fresh interpreter, as a relay's start is."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ARCHIVE_LIBRARIES = ["boto3", "botocore", "zstandard"]

# Builds what `binlog-relay run` builds before it goes into trio (relay/cli.py, relay/app.py): the
# Relay, or for a config with an archive the archive's settings, the first thing such a relay makes
# (its store cannot be reached here), then says which of the libraries asked about are loaded.
PROBE = """
import json, sys
from relay.app import Relay, archive_settings
from relay.config import parse_config
config = parse_config(json.loads(sys.argv[1]), {})
if config.archive.url is None:
    Relay(config)
else:
    archive_settings(config)
print(json.dumps(sorted(name for name in json.loads(sys.argv[2]) if name in sys.modules)))
"""


def loaded_at_start(config: dict) -> list[str]:
    probe = subprocess.run([sys.executable, "-c", PROBE, json.dumps(config), json.dumps(ARCHIVE_LIBRARIES)],
                           capture_output=True, text=True, timeout=120, cwd=Path(__file__).parents[2])
    assert probe.returncode == 0, probe.stderr
    return json.loads(probe.stdout)


def relay_config(data_dir: Path) -> dict:
    return {"server_id": 1001, "data_dir": str(data_dir),
            "upstream": {"host": "127.0.0.1", "user": "repl", "password": "secret"}}


def test_a_relay_without_an_archive_does_not_load_the_archives_libraries(tmp_path):
    assert loaded_at_start(relay_config(tmp_path / "data")) == []


def test_a_relay_with_an_archive_loads_them(tmp_path):
    config = relay_config(tmp_path / "data") | {"archive": {"url": "s3://bucket/prefix"}}
    assert loaded_at_start(config) == ARCHIVE_LIBRARIES
