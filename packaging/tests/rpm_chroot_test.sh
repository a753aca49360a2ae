#!/bin/bash
# The rpm on a system that has nothing of Debian's: installs the rpm into an
# empty root that holds glibc's libraries and nothing else (copied from this
# host), then, in a chroot of it, runs anneal --version and imports, trains
# and evaluates the iris example, as root with the store in /store.
#
#   rpm_chroot_test.sh RPM SOURCE_DIR WORK_DIR
#
# Whatever anneal needs beyond glibc must come from the rpm's own
# /usr/lib/anneal/private: the root has no other library to fall back on, so
# a library the bundle missed, linked or loaded with dlopen, fails here.
# rpm -i --nodeps (the root has no rpm database that provides glibc) and
# --noscripts (the root has no shell, no useradd; packaging.rpmlint and the
# .deb's package-test cover the scripts). Needs root and chroot: exits 77,
# skipped, without them. Everything is under WORK_DIR and deleted at the end.
set -uo pipefail

die() { echo "rpm_chroot_test: $*" >&2; exit 1; }
[ $# -eq 3 ] || die "usage: rpm_chroot_test.sh RPM SOURCE_DIR WORK_DIR"
if [ "$(id -u)" -ne 0 ]; then
  echo "rpm_chroot_test: skipped, needs root (chroot, rpm -i --root)" >&2
  exit 77
fi
chroot=$(command -v chroot) || { echo "rpm_chroot_test: skipped, chroot is missing" >&2; exit 77; }
command -v rpm >/dev/null || die "rpm is missing: run packaging/install-deps package"
rpm_file=$1 src=$2
[ -f "$rpm_file" ] || die "$rpm_file not found"
rpm_file=$(cd "$(dirname "$rpm_file")" && pwd)/$(basename "$rpm_file")
version=$(rpm -qp --qf '%{VERSION}' "$rpm_file" 2>/dev/null) || die "rpm -qp $rpm_file failed"
mkdir -p "$3" && work=$(cd "$3" && pwd) || exit 1
root=$work/root

cleanup() {
  umount -l "$root/proc" 2>/dev/null
  rm -rf --one-file-system "$root"
}
trap cleanup EXIT
cleanup
mkdir -p "$root"

failures=0
checks=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
pass() { checks=$((checks + 1)); echo "ok: $*"; }

# glibc's libraries, where this host's dynamic linker (the one copied in)
# looks for them, and the linker where the executable names it.
glibc="libc.so.6 libm.so.6 libmvec.so.1 libpthread.so.0 libdl.so.2 librt.so.1"
for lib in $glibc; do
  path=$(ldconfig -p | awk -v n="$lib" '$1 == n && /x86-64/ {print $NF; exit}')
  [ -n "$path" ] || die "ldconfig knows no $lib on this host"
  mkdir -p "$root$(dirname "$path")"
  cp -L "$path" "$root$path"
done
interp=$(readelf -l /bin/sh | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')
[ -n "$interp" ] || die "no program interpreter in /bin/sh"
mkdir -p "$root$(dirname "$interp")"
cp -L "$interp" "$root$interp"
mkdir -p "$root/tmp" "$root/store" "$root/proc"
chmod 1777 "$root/tmp"
before=$(cd "$root" && find . -type f | sort)
# As on any running system: the dynamic linker reads /proc/self/exe to
# expand the executable's $ORIGIN, and without it would not find the
# bundled libraries.
mount -t proc proc "$root/proc" || die "cannot mount /proc in $root"

echo "== rpm -i --nodeps --noscripts --root $root $(basename "$rpm_file")"
# The database where Fedora keeps it (Debian's rpm defaults to ~/.rpmdb).
db="--root $root --dbpath /var/lib/rpm"
# shellcheck disable=SC2086
if rpm -i --nodeps --noscripts $db "$rpm_file" >"$work/install.log" 2>&1; then
  pass "installed"
else
  cat "$work/install.log" >&2
  die "rpm -i failed"
fi
# The root holds glibc and what the rpm installed, nothing else: every
# other ELF file in it came from the rpm.
# shellcheck disable=SC2086
installed=$(rpm -ql $db anneal)
strays=$(cd "$root" && find . -path ./proc -prune -o -type f ! -path './var/lib/rpm/*' -print | sed 's|^\.||' |
         while read -r f; do
           grep -qxF ".$f" <<<"$before" || grep -qxF "$f" <<<"$installed" || echo "$f"
         done)
[ -z "$strays" ] && pass "the root holds glibc and the rpm's files only" || fail "not glibc's nor the rpm's: $strays"

# Run it as a user on another system would: no environment of this host's.
in_root() {
  env -i PATH=/usr/bin ANNEAL_HOME=/store HOME=/store LC_ALL=C "$chroot" "$root" /usr/bin/anneal "$@"
}
out=$(in_root --version 2>&1)
[[ $out == "anneal $version "* ]] && pass "anneal --version: $out" || fail "anneal --version: $out"
out=$(in_root init 2>&1) && pass "anneal init" || fail "anneal init: $out"
install -m 0644 "$src/tests/data/iris.csv" "$root/tmp/iris.csv"
out=$(in_root data import iris /tmp/iris.csv 2>&1) && pass "import iris: ${out%%$'\n'*}" || fail "import: $out"
out=$(in_root train /usr/share/doc/anneal/examples/iris.ini 2>&1) && pass "train iris-mlp" || fail "train: $out"
# stdout only: the JSON (stderr may carry notes, such as why auto is on the CPU).
out=$(in_root --json eval iris-mlp iris 2>"$work/eval.err")
accuracy=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["metrics"]["accuracy"])' <<<"$out" 2>/dev/null)
python3 -c "import sys; sys.exit(0 if float('${accuracy:-0}') >= 0.8 else 1)" 2>/dev/null &&
  pass "eval: test accuracy $accuracy" || fail "eval: $out $(cat "$work/eval.err")"

echo "== $checks checks passed, $failures failed"
[ "$failures" -eq 0 ]
