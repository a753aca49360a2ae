#!/bin/bash
# The systemd units as the .deb installs them pass `systemd-analyze verify`
# without a single message (unknown keys are only warnings there, so any
# output fails the test), and keep the hardening the worker promises.
#   systemd_verify_test.sh BUILD_DIR
set -u
build=$1
command -v systemd-analyze >/dev/null ||
  { echo "systemd-analyze is missing: run packaging/install-deps package" >&2; exit 1; }

# A root holding the installed files (binary, man page, units) and the host's
# own units, which ours refer to (multi-user.target, timers.target, ...):
# verify checks that ExecStart's binary exists and that Documentation=man:
# pages resolve, so it must see the tree the package installs.
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/lib/systemd/system"
cp -a /lib/systemd/system/. "$root/lib/systemd/system/"
for component in main deb; do
  DESTDIR=$root cmake --install "$build" --prefix /usr --component "$component" >/dev/null || exit 1
done

failures=0
units="anneal-worker.service anneal-serve.service anneal-retrain@nightly.service anneal-retrain@nightly.timer"
paths=""
for unit in $units; do paths="$paths /lib/systemd/system/$unit"; done
# shellcheck disable=SC2086
out=$(MANPATH=$root/usr/share/man systemd-analyze verify --root="$root" $paths 2>&1)
rc=$?
if [ "$rc" -ne 0 ] || [ -n "$out" ]; then
  echo "FAIL: systemd-analyze verify exited $rc:" >&2
  echo "$out" >&2
  failures=$((failures + 1))
fi

# The sandbox as systemd rates it: exposure at most 2.0 of 10 ("OK"; the
# units are at 1.4 now). --threshold counts in tenths.
for unit in anneal-worker.service anneal-serve.service anneal-retrain@nightly.service; do
  if ! out=$(systemd-analyze security --offline=true --root="$root" --threshold=20 "$unit" 2>&1); then
    echo "FAIL: $unit exposure above 2.0:" >&2
    echo "$out" | tail -n 1 >&2
    failures=$((failures + 1))
  fi
done

# The settings the issue asks for, spelled as it asks.
for unit in anneal-worker.service anneal-serve.service anneal-retrain@nightly.service; do
  for want in "User=anneal" "Environment=ANNEAL_HOME=/var/lib/anneal" "NoNewPrivileges=yes" \
              "ProtectSystem=strict" "ProtectHome=yes" "PrivateTmp=yes" \
              "ReadWritePaths=/var/lib/anneal"; do
    if ! grep -qxF "$want" "$root/lib/systemd/system/${unit/@nightly/@}"; then
      echo "FAIL: $unit lacks $want" >&2
      failures=$((failures + 1))
    fi
  done
done

if [ "$failures" -ne 0 ]; then exit 1; fi
echo "systemd-analyze verify: $units clean"
