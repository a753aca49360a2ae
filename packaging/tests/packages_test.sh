#!/bin/bash
# Checks of the .deb and .rpm that `cpack` built (test packaging.cpack).
#   packages_test.sh lintian|rpmlint|contents PACKAGE_DIR VERSION
set -u
check=$1 dir=$2 version=$3
deb=$dir/anneal_${version}_$(dpkg --print-architecture).deb
rpm=$dir/anneal-${version}.$(uname -m).rpm
here=$(cd "$(dirname "$0")" && pwd)
for f in "$deb" "$rpm"; do
  [ -f "$f" ] || { echo "FAIL: $f was not built" >&2; exit 1; }
done
need() {
  command -v "$1" >/dev/null || { echo "$1 is missing: run packaging/install-deps package" >&2; exit 1; }
}

case $check in
  lintian)
    # Errors fail; warnings and infos are printed for the record.
    need lintian
    lintian --fail-on error --info --display-level ">=info" "$deb" 2>&1 | grep -v "^N:"
    rc=${PIPESTATUS[0]}
    [ "$rc" -eq 0 ] && echo "lintian: no errors"
    exit "$rc"
    ;;
  rpmlint)
    # rpmlint exits non-zero on any error; packaging/rpmlint.toml says what
    # it is told and why.
    need rpmlint
    rpmlint -c "$here/../rpmlint.toml" "$rpm"
    exit $?
    ;;
  contents) ;;
  *) echo "unknown check $check" >&2; exit 2 ;;
esac

need dpkg-deb
need rpm
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# What the issue asks each package to install.
common="/usr/bin/anneal /usr/share/man/man1/anneal.1.gz /usr/share/bash-completion/completions/anneal
/usr/share/doc/anneal/examples/iris.ini /usr/share/doc/anneal/examples/fmnist-mlp.ini /etc/anneal/retrain.d"
units="anneal-worker.service anneal-retrain@.service anneal-retrain@.timer"
deb_files=$(dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\.||; s|/$||')
rpm_files=$(rpm -qlp "$rpm" 2>/dev/null)
for f in $common /usr/share/doc/anneal/copyright /usr/share/doc/anneal/changelog.gz; do
  grep -qxF "$f" <<<"$deb_files" || fail "deb lacks $f"
done
for f in $common; do
  grep -qxF "$f" <<<"$rpm_files" || fail "rpm lacks $f"
done
for u in $units; do
  grep -qxF "/lib/systemd/system/$u" <<<"$deb_files" || fail "deb lacks /lib/systemd/system/$u"
  grep -qxF "/usr/lib/systemd/system/$u" <<<"$rpm_files" || fail "rpm lacks /usr/lib/systemd/system/$u"
done

# Versions come from project(); dependencies are computed: dpkg-shlibdeps
# and rpm's library requires name oneDNN, which nobody listed by hand.
[ "$(dpkg-deb -f "$deb" Version)" = "$version" ] || fail "deb version is not $version"
[ "$(rpm -qp --qf '%{VERSION}' "$rpm" 2>/dev/null)" = "$version" ] || fail "rpm version is not $version"
depends=$(dpkg-deb -f "$deb" Depends)
for dep in adduser libdnnl libc6 libsqlite3 libtbb; do
  grep -q "$dep" <<<"$depends" || fail "deb Depends lacks $dep: $depends"
done
requires=$(rpm -qpR "$rpm" 2>/dev/null)
for dep in 'libdnnl\.so' 'libsqlite3\.so' 'libtbb\.so' shadow-utils; do
  grep -q "$dep" <<<"$requires" || fail "rpm Requires lacks $dep"
done

# The binary is stripped, and the maintainer scripts are in place.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
dpkg-deb -x "$deb" "$work/deb"
file "$work/deb/usr/bin/anneal" | grep -q ", stripped" || fail "deb binary is not stripped"
dpkg-deb -e "$deb" "$work/control"
for s in postinst prerm postrm; do [ -x "$work/control/$s" ] || fail "deb lacks $s"; done
grep -q "adduser --system" "$work/control/postinst" || fail "deb postinst does not add the user"
scripts=$(rpm -qp --scripts "$rpm" 2>/dev/null)
grep -q "useradd -r" <<<"$scripts" || fail "rpm %pre does not add the user"
grep -q "install -d -m 0750 -o anneal" <<<"$scripts" || fail "rpm %post does not create /var/lib/anneal"

# The packaged man page is the one the binary prints.
"$work/deb/usr/bin/anneal" --help-man | cmp -s - <(gzip -dc "$work/deb/usr/share/man/man1/anneal.1.gz") ||
  fail "packaged man page differs from the packaged binary's --help-man"

if [ "$failures" -ne 0 ]; then exit 1; fi
echo "package contents: all checks passed"
