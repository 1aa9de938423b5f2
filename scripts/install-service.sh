#!/usr/bin/env bash
# Install spec-controller as a systemd service (README "Install as a service"). Run from the clone:
#   sudo scripts/install-service.sh
# Puts the package in a virtualenv at /opt/spec-controller (where the unit's ExecStart points), the
# unit, an example config (never overwrites one), the spec-controller user and group, the README
# the unit's Documentation= names, and specctl on PATH. Settings (environment):
#   EXTRAS='[sglang]'  pip extras ('' for the simulator only)    PIP_FLAGS=''  extra pip arguments
#   ROOT=/             install under another root (tests; no user, no systemctl there)
#   PYTHON=python3     the interpreter the virtualenv is made from: 3.11 or newer (e.g. /usr/bin/python3.11)
set -euo pipefail
# Settings are environment variables, never arguments: `--help` used to start the install as root.
if [ "$#" -gt 0 ]; then
  case "$1" in
    -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install-service.sh: takes no arguments (got '$1'); settings are environment variables:" \
            "sudo PIP_FLAGS='torch==2.11.0' scripts/install-service.sh (--help lists them); nothing installed" >&2
       exit 2 ;;
  esac
fi
cd "$(dirname "$0")/.."
ROOT="${ROOT:-/}"; ROOT="${ROOT%/}"
PREFIX=/opt/spec-controller
EXTRAS="${EXTRAS-[sglang]}"
PYTHON="${PYTHON:-python3}"
# The real install writes /opt, /etc and /usr and adds a user: run without sudo it stopped part way (venv's
# "Error: [Errno 13] Permission denied: '/opt/spec-controller'", or, where /opt let it, a venv and no unit).
if [ -z "$ROOT" ] && [ "$(id -u)" -ne 0 ]; then
  echo "install-service.sh: run it as root (sudo scripts/install-service.sh, its settings after sudo: sudo PIP_FLAGS=..." \
       "scripts/install-service.sh): it installs into /opt, /etc and /usr and adds the spec-controller user; nothing installed" >&2
  exit 2
fi
# Python 3.11+ (pyproject): the python3 of Ubuntu 22.04 (3.10) or RHEL 9 (3.9) failed in pip, after the venv was made,
# and every later run reused that venv. Refused before anything is made, and an existing venv on an older one named.
too_old() { ! "$1" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; }
if [ -x "$ROOT$PREFIX/bin/pip" ]; then
  if too_old "$ROOT$PREFIX/bin/python"; then
    echo "install-service.sh: $ROOT$PREFIX was made from $({ "$ROOT$PREFIX/bin/python" -V 2>&1 || echo 'an interpreter that does not run'; } | tail -n 1);" \
         "spec-controller needs Python 3.11 or newer: remove it (sudo rm -rf $ROOT$PREFIX) and run again with" \
         "PYTHON=/usr/bin/python3.11 (or newer); nothing installed" >&2
    exit 2
  fi
elif too_old "$PYTHON"; then
  echo "install-service.sh: PYTHON=$PYTHON is $({ "$PYTHON" -V 2>&1 || echo 'not an interpreter that runs'; } | tail -n 1); spec-controller" \
       "needs Python 3.11 or newer: sudo PYTHON=/usr/bin/python3.11 scripts/install-service.sh; nothing installed" >&2
  exit 2
else
  "$PYTHON" -m venv "$ROOT$PREFIX"
fi
# shellcheck disable=SC2086
"$ROOT$PREFIX/bin/pip" install -q ${PIP_FLAGS:-} ".$EXTRAS"
# Run over an earlier install: the unit is replaced (ExecStart, User= and the sandbox move with the package), but one
# that differs (an older version's, or an operator's edit of the file itself) is kept where it can be compared.
UNIT_FILE="$ROOT/etc/systemd/system/spec-controller.service"
if [ -e "$UNIT_FILE" ]; then
  earlier=1
  if ! cmp -s systemd/spec-controller.service "$UNIT_FILE"; then
    install -Dm644 "$UNIT_FILE" "$ROOT/etc/spec-controller/spec-controller.service.old"
    echo "replaced $UNIT_FILE, which differed: it is kept as $ROOT/etc/spec-controller/spec-controller.service.old" \
         "(settings of your own go in a drop-in: systemctl edit spec-controller; CHANGELOG.md says what changed)"
  fi
fi
install -Dm644 systemd/spec-controller.service "$UNIT_FILE"
install -Dm644 systemd/spec-controller.sysusers "$ROOT/usr/lib/sysusers.d/spec-controller.conf"
install -Dm644 README.md "$ROOT/usr/share/doc/spec-controller/README.md"
install -Dm644 CHANGELOG.md "$ROOT/usr/share/doc/spec-controller/CHANGELOG.md"
install -Dm644 systemd/config.example.toml "$ROOT/usr/share/doc/spec-controller/config.example.toml"   # (every key)
install -d "$ROOT/usr/local/bin"
ln -sf "$PREFIX/bin/specctl" "$ROOT/usr/local/bin/specctl"
# an earlier install by pip (the README's before this script): its spec-controller stays on PATH, not what the unit runs
if [ -e "$ROOT/usr/local/bin/spec-controller" ] && [ ! -L "$ROOT/usr/local/bin/spec-controller" ]; then
  echo "note: $ROOT/usr/local/bin/spec-controller is an earlier install's (pip's), not $PREFIX/bin/spec-controller that" \
       "the unit runs: remove it (sudo pip uninstall spec-controller, with the pip that installed it)"
fi
if [ -e "$ROOT/etc/spec-controller/config.toml" ]; then
  echo "kept $ROOT/etc/spec-controller/config.toml"
else
  # 0640: root writes it, the service's group reads it, nobody else (it may come to hold an API key)
  install -Dm640 systemd/config.example.toml "$ROOT/etc/spec-controller/config.toml"
  wrote_config=1
  echo "wrote $ROOT/etc/spec-controller/config.toml: edit the model paths"
fi
if [ -n "${earlier:-}" ]; then
  echo "the service runs the version installed before until: sudo systemctl restart spec-controller"
fi
if [ -z "$ROOT" ]; then
  if command -v systemd-sysusers >/dev/null; then
    systemd-sysusers /usr/lib/sysusers.d/spec-controller.conf
  elif ! getent passwd spec-controller >/dev/null; then
    useradd --system --user-group --home-dir /var/lib/spec-controller --shell /usr/sbin/nologin spec-controller
  fi
  if [ -n "${wrote_config:-}" ]; then
    chgrp spec-controller /etc/spec-controller/config.toml
  fi
  if [ -d /run/systemd/system ]; then
    systemctl daemon-reload
  fi
  # (spec-controller is not on PATH: only specctl is linked into /usr/local/bin)
  echo "next: $PREFIX/bin/spec-controller config from-launch -o config.toml -- <your SGLang command>, install it as" \
       "/etc/spec-controller/config.toml, sudo $PREFIX/bin/spec-controller config check," \
       "sudo usermod -aG spec-controller \$USER" \
       "(log in again), sudo systemctl enable --now spec-controller (README, Steps)"
fi
