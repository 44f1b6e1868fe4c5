# scripts/setup.sh - sourced by test.sh and demo.sh: installs what the relay needs on a
# Debian machine (MariaDB server and client through apt when root; the Python package).
# shellcheck shell=bash
PYTHON=${PYTHON:-python3}
POLICY_RC=/usr/sbin/policy-rc.d

log() { echo "setup: $*" >&2; }

# mariadbd lives in /usr/sbin, which is not on every user's PATH.
have() { command -v "$1" > /dev/null 2>&1 || [[ -x /usr/sbin/$1 ]]; }

# invoke-rc.d and deb-systemd-invoke ask policy-rc.d whether a package may start its
# service; exit 101 = no. Containers usually have one already; a plain machine does not.
# Returns 0 if it created the file (then the caller removes it with allow_service_starts).
deny_service_starts() {
  [[ -e $POLICY_RC ]] && return 1
  printf '#!/bin/sh\n# temporary, from binlog-relay scripts/test.sh\nexit 101\n' > "$POLICY_RC"
  chmod 755 "$POLICY_RC"
  trap 'rm -f "$POLICY_RC"' EXIT  # also when apt-get fails
}

allow_service_starts() { rm -f "$POLICY_RC"; trap - EXIT; }

# install_debian "what" "program program ..." "package package ...": installs the packages
# with apt-get when a program is missing (as root); otherwise says what to install and exits 1.
install_debian() {
  local what=$1 programs=$2 packages=$3 missing p
  missing=$(for p in $programs; do have "$p" || echo "$p"; done | tr '\n' ' ')
  [[ -z ${missing// /} ]] && return 0
  apt_install "$what" "$packages" "missing: $missing"
  missing=$(for p in $programs; do have "$p" || echo "$p"; done | tr '\n' ' ')
  [[ -z ${missing// /} ]] || { log "still missing after apt-get install: $missing"; exit 1; }
}

# apt_install "what" "package ..." "why": apt-get install as root, else say what to install, exit 1.
apt_install() {
  local what=$1 packages=$2 why=$3
  if [[ $(id -u) -ne 0 ]] || ! command -v apt-get > /dev/null; then
    log "missing $what ($why)"
    log "install them, then run this again:  sudo apt-get install -y $packages"
    exit 1
  fi
  log "installing $packages ($why)"
  local created_policy=no
  deny_service_starts && created_policy=yes
  apt-get update -q
  # shellcheck disable=SC2086  # word splitting of the package list is wanted
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $packages
  [[ $created_policy == no ]] || allow_service_starts
}

python_headers_present() {
  "$PYTHON" -c 'import os, sys, sysconfig
sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'
}

# The relay's C modules (setup.py: the compiled loops, the row reader, the JSON writer) need a C
# compiler and Python's headers. Without them the package still installs and runs the same code
# in Python, only slower; the tests check that the modules are built, so test.sh installs them.
install_c_build_tools() {
  install_debian "C compiler" "gcc" "gcc libc6-dev"
  python_headers_present && return 0
  apt_install "Python C headers" "python3-dev" "no Python.h for $PYTHON"
  python_headers_present || { log "still no Python.h for $PYTHON after installing python3-dev"; exit 1; }
}

install_mariadb() {
  install_debian MariaDB "mariadbd mariadb-install-db mariadb mariadb-binlog" "mariadb-server mariadb-client"
}

# True when this checkout is installed editable, no older than pyproject.toml, and every
# requirement of the project and its test extra is satisfied: then pip (5 s) is skipped.
python_deps_current() {
  # -P: not the cwd first on sys.path, where a stale binlog_relay.egg-info may lie.
  "$PYTHON" -P - > /dev/null 2>&1 <<'PY'
import json, pathlib, shutil, tomllib
from importlib import metadata
from packaging.requirements import Requirement

root = pathlib.Path.cwd()
pyproject = root / "pyproject.toml"
project = tomllib.loads(pyproject.read_text())["project"]
dist = metadata.distribution(project["name"])
direct_url = json.loads(dist.read_text("direct_url.json") or "{}")
# A clone elsewhere (CI), an edited pyproject.toml or setup.py needs a fresh install.
assert direct_url.get("url") == root.as_uri() and direct_url["dir_info"]["editable"]
assert dist.version == project["version"]
meta = next(f for f in dist.files if f.name == "METADATA").locate()
installed = pathlib.Path(meta).stat().st_mtime
assert installed >= pyproject.stat().st_mtime and installed >= (root / "setup.py").stat().st_mtime
# The install builds the C modules when there is a compiler: each must be newer than its source.
if shutil.which("gcc") or shutil.which("cc"):
    for source in root.glob("relay/**/_*.c"):
        built = next(source.parent.glob(source.stem + ".*.so"))
        assert built.stat().st_mtime >= source.stat().st_mtime
for spec in project["dependencies"] + project["optional-dependencies"]["test"]:
    req = Requirement(spec)
    if req.marker is None or req.marker.evaluate():
        assert req.specifier.contains(metadata.version(req.name), prereleases=True), spec
PY
}

# $1: what to install, '.[test]' for the tests, '.' for the demo.
install_python_deps() {
  python_deps_current && return 0
  "$PYTHON" -m pip install -q --disable-pip-version-check --root-user-action=ignore -e "${1:-.[test]}"
}

