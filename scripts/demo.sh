#!/usr/bin/env bash
# scripts/demo.sh - the README's first command: installs MariaDB and the relay if needed, then
# runs `binlog-relay demo` (a local primary, the relay replicating from it, live figures; Ctrl-C
# ends it with a verdict).  Arguments go to the demo, e.g. --seconds 20.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/setup.sh
source scripts/setup.sh

install_mariadb
install_python_deps '.'
exec "$PYTHON" -m relay.cli demo "$@"
