#!/usr/bin/env bash
# scripts/bench.sh - the project's benchmark command (bench/README.md).
#
# Usage: bash scripts/bench.sh [ingest|serve|all|suite|latency|capacity|catchup|gtidstart|search|archive] [options...]
#        (default: all)
#   suite: python3 -m bench.suite - latency, serve capacity, replica catch-up (and --scenarios
#          ...,ingest) in one run, written up as BENCHMARKS.md + benchmarks.json + PNGs (--out DIR)
#   e.g. bash scripts/bench.sh --reuse --json /tmp/bench.json
#        bash scripts/bench.sh ingest --reuse --profile py-spy
#        bash scripts/bench.sh serve --reuse --clients 20 --json /tmp/serve.json
#
# ingest: python3 -m bench.ingest - the relay fetching the binlog vs mariadb-binlog.
# serve:  python3 -m bench.serve  - mariadb-binlog downloading it from the relay vs from the
#         primary, one at a time and --clients at once.
# all:    ingest, then serve, on one primary (see run_all below for how options are shared).
# archive: python3 -m bench.archive - the S3 archive (moto) keeping up with ingest, its zstd/AES cost,
#         a file only the archive holds served vs the same file local (bench/README.md, "Archive").
# latency, capacity, catchup, gtidstart, search: one scenario of the suite alone (python3 -m bench.NAME).
# Both start a throw-away MariaDB primary and fill its binlog with sysbench (or --reuse
# the one of an earlier run). Before that this script makes sure the programs exist:
#   MariaDB server and client, sysbench, gcc and Python's headers: installed with apt-get
#   when missing and run as root (scripts/setup.sh; the packaged services are kept from
#   starting), otherwise the script says what to install and exits 1.
#   The project: pip install -e . when it or its compiled loops do not import;
#   py-spy (pip) when --profile py-spy is asked for.
# The primary is started by the project's own launcher (relay/sandbox/mariadb.py) and filled by
# sysbench (bench/common.py fill_sysbench). Env: PYTHON (default python3).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# shellcheck source=scripts/setup.sh
source scripts/setup.sh

# The figures depend on the C modules (setup.py): without them the relay and the decoder run
# their Python code, and the benchmarks say so, but the point is to measure what ships.
install_python_deps() {
  "$PYTHON" -c 'import relay.upstream, relay.binlog._scan, relay.rows.coltypes._rowread, relay.pipeline._jsontext, trio' \
    > /dev/null 2>&1 && return 0
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

# ---------------------------------------------------------------- all: ingest, then serve
#
# Options both benchmarks know go to both; those only one knows go only to it (the lists
# below; keep them in step with the benchmarks' --help). --json PATH and --profile-out PATH
# become PATH with .ingest / .serve before the extension, so the second does not overwrite
# the first. The two share one primary: unless --reuse or --keep is given, ingest keeps it
# running (--keep) and serve reuses it and destroys it at the end (--reuse --destroy), so
# the binlog is filled once. The exit status is the first failure's (serve runs anyway).
INGEST_ONLY_WITH_VALUE=(--sync)
SERVE_ONLY_WITH_VALUE=(--clients --concurrent-rounds --relay-port --metrics-port --relay-log-level
                       --profile-clients --profile-rate)
SERVE_ONLY_FLAGS=(--no-primary-concurrent --destroy)
WITH_VALUE=(--json --rounds --sync --size-mb --min-mb --max-binlog-size --port --name --sandbox-dir
            --workdir --timeout --profile --profile-out "${SERVE_ONLY_WITH_VALUE[@]}")

in_list() {  # in_list WORD LIST...
  local word=$1 item; shift
  for item in "$@"; do [[ $item == "$word" ]] && return 0; done
  return 1
}

# PATH with .NAME inserted before the extension: /tmp/r.json -> /tmp/r.ingest.json
tagged() {
  local path=$1 name=$2 base=${1##*/}
  if [[ $base == *.* ]]; then echo "${path%.*}.$name.${path##*.}"; else echo "$path.$name"; fi
}

run_all() {
  local ingest=() serve=() option value reuse=no keep=no
  while (($#)); do
    option=$1 value=""; shift
    if [[ $option == --*=* ]]; then
      value=${option#*=} option=${option%%=*}
    elif in_list "$option" "${WITH_VALUE[@]}"; then
      (($#)) || { log "$option needs a value"; exit 2; }
      value=$1; shift
    fi
    case $option in
      --reuse) reuse=yes ;;
      --keep) keep=yes ;;
    esac
    if [[ $option == --json || $option == --profile-out ]]; then
      ingest+=("$option" "$(tagged "$value" ingest)")
      serve+=("$option" "$(tagged "$value" serve)")
    elif in_list "$option" "${INGEST_ONLY_WITH_VALUE[@]}"; then
      ingest+=("$option" "$value")
    elif in_list "$option" "${SERVE_ONLY_WITH_VALUE[@]}"; then
      serve+=("$option" "$value")
    elif in_list "$option" "${SERVE_ONLY_FLAGS[@]}"; then
      serve+=("$option")
    elif [[ $option == --profile && $value != py-spy ]]; then
      ingest+=("$option" "$value")  # bench.serve profiles with py-spy only
    elif in_list "$option" "${WITH_VALUE[@]}"; then
      ingest+=("$option" "$value"); serve+=("$option" "$value")
    else
      ingest+=("$option"); serve+=("$option")
    fi
  done
  if [[ $reuse == no && $keep == no ]]; then
    ingest+=(--keep)
    serve+=(--reuse --destroy)
  elif [[ $reuse == no ]]; then
    serve+=(--reuse)  # --keep alone: serve takes over the primary ingest left running
  fi
  local status=0
  log "ingest benchmark: python3 -m bench.ingest ${ingest[*]}"
  "$PYTHON" -m bench.ingest "${ingest[@]}" || status=$?
  log "serve benchmark: python3 -m bench.serve ${serve[*]}"
  "$PYTHON" -m bench.serve "${serve[@]}" || { local s=$?; ((status)) || status=$s; }
  return "$status"
}

which=all
case ${1:-} in
  ingest | serve | all | suite | latency | capacity | catchup | gtidstart | search | archive) which=$1; shift ;;
esac

install_mariadb
install_debian sysbench sysbench sysbench
install_c_build_tools
install_python_deps
install_py_spy "$@"
case $which in
  ingest) exec "$PYTHON" -m bench.ingest "$@" ;;
  serve) exec "$PYTHON" -m bench.serve "$@" ;;
  all) run_all "$@" ;;
  suite | latency | capacity | catchup | gtidstart | search | archive)
    # matplotlib (the pictures), PyMySQL (latency's client) and moto (archive's S3 server): the bench extra
    "$PYTHON" -c 'import matplotlib, pymysql, moto.server' > /dev/null 2>&1 \
      || "$PYTHON" -m pip install -q --disable-pip-version-check --root-user-action=ignore -e '.[bench]'
    exec "$PYTHON" -m "bench.$which" "$@" ;;
esac
