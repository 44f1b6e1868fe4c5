#!/usr/bin/env bash
# scripts/bench.sh - the project's benchmark command (bench/README.md).
#
# Usage: bash scripts/bench.sh [bench.ingest arguments...]
#   e.g. bash scripts/bench.sh --reuse --json /tmp/ingest.json
#        bash scripts/bench.sh --reuse --profile py-spy
#
# Runs every benchmark; for now that is the ingest benchmark (python3 -m bench.ingest),
# which starts a throw-away MariaDB primary, fills its binlog with sysbench and measures
# the relay against mariadb-binlog. Before that it makes sure the programs exist:
#   MariaDB server and client, and sysbench: installed with apt-get when missing and run
#   as root (the packaged services are kept from starting), otherwise the script says
#   what to install and exits 1.
#   The project's Python dependencies: pip install -e . when `import relay, trio` fails;
#   py-spy (pip) when --profile py-spy is asked for.
# Env: PYTHON (default python3), BENCH_TOOLS_DIR (mariadb-sandbox.sh and gen-binlog.sh,
#      default /work/shared/tools).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON=${PYTHON:-python3}
PROGRAMS=(mariadbd mariadb-install-db mariadb mariadb-binlog sysbench)
PACKAGES=(mariadb-server mariadb-client sysbench)
POLICY_RC=/usr/sbin/policy-rc.d

log() { echo "bench.sh: $*" >&2; }

# mariadbd lives in /usr/sbin, which is not on every user's PATH.
have() { command -v "$1" > /dev/null 2>&1 || [[ -x /usr/sbin/$1 ]]; }

missing_programs() {
  local p
  for p in "${PROGRAMS[@]}"; do have "$p" || echo "$p"; done
}

install_programs() {
  local missing
  missing=$(missing_programs | tr '\n' ' ')
  [[ -z $missing ]] && return 0
  if [[ $(id -u) -ne 0 ]] || ! command -v apt-get > /dev/null; then
    log "missing programs: $missing"
    log "install them, then run this again:  sudo apt-get install -y ${PACKAGES[*]}"
    exit 1
  fi
  log "installing ${PACKAGES[*]} (missing: $missing)"
  # policy-rc.d exit 101: the packages may not start their services (we run our own servers).
  local created_policy=no
  if [[ ! -e $POLICY_RC ]]; then
    printf '#!/bin/sh\n# temporary, from binlog-relay scripts/bench.sh\nexit 101\n' > "$POLICY_RC"
    chmod 755 "$POLICY_RC"
    trap 'rm -f "$POLICY_RC"' EXIT  # also when apt-get fails
    created_policy=yes
  fi
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${PACKAGES[@]}"
  if [[ $created_policy == yes ]]; then rm -f "$POLICY_RC"; trap - EXIT; fi
  missing=$(missing_programs | tr '\n' ' ')
  [[ -z $missing ]] || { log "still missing after apt-get install: $missing"; exit 1; }
}

install_python_deps() {
  "$PYTHON" -c 'import relay.upstream, trio' > /dev/null 2>&1 && return 0
  log "installing the project (pip install -e .)"
  "$PYTHON" -m pip install -q --disable-pip-version-check --root-user-action=ignore -e .
}

# --profile py-spy needs py-spy (a sampling profiler, pip-installable).
install_py_spy() {
  local arg
  for arg in "$@"; do
    if [[ $arg == py-spy || $arg == --profile=py-spy ]] && ! command -v py-spy > /dev/null; then
      log "installing py-spy (pip install py-spy)"
      "$PYTHON" -m pip install -q --disable-pip-version-check --root-user-action=ignore py-spy
    fi
  done
}

install_programs
install_python_deps
install_py_spy "$@"
exec "$PYTHON" -m bench.ingest "$@"
