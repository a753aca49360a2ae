#!/bin/bash
# Checks of the .deb and .rpm packages that `cpack` built (test packaging.cpack):
# anneal's, with `cuda` (the CUDA plugin was built) anneal-cuda's, and with
# `mpi` (the MPI plugin was built) anneal-mpi's.
#   packages_test.sh lintian|rpmlint|contents|rpm-requires PACKAGE_DIR VERSION cuda|no-cuda mpi|no-mpi
set -u
usage="usage: packages_test.sh lintian|rpmlint|contents|rpm-requires PACKAGE_DIR VERSION cuda|no-cuda mpi|no-mpi"
[ $# -eq 5 ] || { echo "$usage" >&2; exit 2; }
check=$1 dir=$2 version=$3 cuda=$4 mpi=$5
case $cuda in
  cuda | no-cuda) ;;
  *) echo "packages_test.sh: expected cuda or no-cuda, got '$cuda'" >&2; exit 2 ;;
esac
case $mpi in
  mpi | no-mpi) ;;
  *) echo "packages_test.sh: expected mpi or no-mpi, got '$mpi'" >&2; exit 2 ;;
esac
deb=$dir/anneal_${version}_$(dpkg --print-architecture).deb
rpm=$dir/anneal-${version}.$(uname -m).rpm
cuda_deb=$dir/anneal-cuda_${version}_$(dpkg --print-architecture).deb
cuda_rpm=$dir/anneal-cuda-${version}.$(uname -m).rpm
mpi_deb=$dir/anneal-mpi_${version}_$(dpkg --print-architecture).deb
mpi_rpm=$dir/anneal-mpi-${version}.$(uname -m).rpm
here=$(cd "$(dirname "$0")" && pwd)
debs=$deb rpms=$rpm
if [ "$cuda" = cuda ]; then
  debs="$debs $cuda_deb" rpms="$rpms $cuda_rpm"
else
  # Without the plugin, cpack builds no package of it.
  for f in "$cuda_deb" "$cuda_rpm"; do
    [ -e "$f" ] && { echo "FAIL: $f was built, but the CUDA plugin was not" >&2; exit 1; }
  done
fi
if [ "$mpi" = mpi ]; then
  debs="$debs $mpi_deb" rpms="$rpms $mpi_rpm"
else
  for f in "$mpi_deb" "$mpi_rpm"; do
    [ -e "$f" ] && { echo "FAIL: $f was built, but the MPI plugin was not" >&2; exit 1; }
  done
fi
for f in $debs $rpms; do
  [ -f "$f" ] || { echo "FAIL: $f was not built" >&2; exit 1; }
done
need() {
  command -v "$1" >/dev/null || { echo "$1 is missing: run packaging/install-deps package" >&2; exit 1; }
}

case $check in
  lintian)
    # Errors fail; warnings and infos are printed for the record.
    need lintian
    # shellcheck disable=SC2086
    lintian --fail-on error --info --display-level ">=info" $debs 2>&1 | grep -v "^N:"
    rc=${PIPESTATUS[0]}
    [ "$rc" -eq 0 ] && echo "lintian: no errors"
    exit "$rc"
    ;;
  rpmlint)
    # rpmlint exits non-zero on any error; packaging/rpmlint.toml says what
    # it is told and why.
    need rpmlint
    # shellcheck disable=SC2086
    rpmlint -c "$here/../rpmlint.toml" $rpms
    exit $?
    ;;
  contents | rpm-requires) ;;
  *) echo "unknown check $check" >&2; exit 2 ;;
esac

need dpkg-deb
need rpm
need readelf
need rpm2cpio
need cpio
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
oneline() { tr '\n' ' ' <<<"$1"; }

if [ "$check" = rpm-requires ]; then
  # The rpm installs where nothing but glibc is (packaging/rpm/bundle.cmake):
  # it requires glibc's libraries and the tools its scriptlets run, and
  # nothing else. Any other requirement would be a library the bundle missed.
  glibc_re='^(libc\.so\.6|libm\.so\.6|libmvec\.so\.1|libpthread\.so\.0|libdl\.so\.2|librt\.so\.1|ld-linux-x86-64\.so\.2)(\(.*\))?\(64bit\)$'
  requires=$(rpm -qpR "$rpm" 2>/dev/null) || { echo "FAIL: rpm -qpR $rpm failed" >&2; exit 1; }
  echo "rpm -qpR $(basename "$rpm"):"
  sed 's/^/  /' <<<"$requires"
  while read -r req; do
    case $req in
      rpmlib\(*\)*) continue ;;           # features of rpm itself
      /bin/sh | shadow-utils) continue ;;  # the scriptlets' shell; useradd in %pre
      "rtld(GNU_HASH)") continue ;;        # glibc's dynamic linker
    esac
    [[ $req =~ $glibc_re ]] || fail "rpm requires $req, which is not glibc's"
  done <<<"$requires"
  # The newest glibc symbol version it needs is the minimum glibc
  # docs/OPERATIONS.md states for the rpm.
  newest=$(grep -o 'GLIBC_[0-9.]*[0-9]' <<<"$requires" | sed 's/GLIBC_//' | sort -uV | tail -n1)
  readme=$here/../../docs/OPERATIONS.md
  stated=$(sed -n 's/.*rpm needs glibc \([0-9][0-9.]*[0-9]\) or later.*/\1/p' "$readme" | head -n1)
  [ -n "$newest" ] || fail "rpm requires no versioned glibc symbols: the minimum glibc is unknown"
  [ -n "$stated" ] || fail "$readme does not say 'rpm needs glibc X.Y or later'"
  [ "$newest" = "$stated" ] || fail "the rpm needs glibc $newest, docs/OPERATIONS.md says $stated"
  if [ "$cuda" = cuda ]; then
    # anneal-cuda requires anneal, glibc and the CUDA libraries by soname; the
    # C++ runtime it uses is the one anneal bundles (loaded before it).
    cuda_requires=$(rpm -qpR "$cuda_rpm" 2>/dev/null)
    while read -r req; do
      case $req in
        rpmlib\(*\)* | "rtld(GNU_HASH)" | "anneal = $version-"*) continue ;;
        libcudart.so.*\(64bit\) | libcublasLt.so.*\(64bit\) | libcudnn.so.*\(64bit\)) continue ;;
      esac
      [[ $req =~ $glibc_re ]] || fail "anneal-cuda rpm requires $req, which is neither glibc's, CUDA's nor anneal"
    done <<<"$cuda_requires"
  fi
  if [ "$mpi" = mpi ]; then
    # anneal-mpi requires anneal, glibc and Open MPI's libmpi by the soname
    # the plugin links (the system's Open MPI, which must be the one mpirun
    # is: packaging/CMakeLists.txt), and nothing else: not the C++ runtime
    # (anneal's bundled one), not Open MPI's other libraries.
    mpi_requires=$(rpm -qpR "$mpi_rpm" 2>/dev/null) || { echo "FAIL: rpm -qpR $mpi_rpm failed" >&2; exit 1; }
    echo "rpm -qpR $(basename "$mpi_rpm"):"
    sed 's/^/  /' <<<"$mpi_requires"
    grep -qx 'libmpi\.so\.[0-9]*()(64bit)' <<<"$mpi_requires" || fail "anneal-mpi rpm does not require libmpi by soname"
    grep -qx "anneal = $version-[0-9]*" <<<"$mpi_requires" || fail "anneal-mpi rpm does not require anneal = $version"
    while read -r req; do
      case $req in
        rpmlib\(*\)* | "rtld(GNU_HASH)" | "anneal = $version-"*) continue ;;
        libmpi.so.[0-9]*"()(64bit)") continue ;;
      esac
      [[ $req =~ $glibc_re ]] || fail "anneal-mpi rpm requires $req, which is neither glibc's, libmpi nor anneal"
    done <<<"$mpi_requires"
  fi
  [ "$failures" -eq 0 ] || exit 1
  echo "rpm requires: glibc $newest and nothing but glibc"
  [ "$mpi" = mpi ] && echo "anneal-mpi rpm requires: anneal, glibc and $(grep -o '^libmpi[^(]*' <<<"$mpi_requires")"
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# What the issue asks each package to install.
common="/usr/bin/anneal /usr/share/man/man1/anneal.1.gz /usr/share/bash-completion/completions/anneal
/usr/share/doc/anneal/examples/iris.ini /usr/share/doc/anneal/examples/fmnist-mlp.ini /etc/anneal/retrain.d"
units="anneal-worker.service anneal-serve.service anneal-retrain@.service anneal-retrain@.timer"
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

# Versions come from project(); the .deb's dependencies are computed:
# dpkg-shlibdeps names oneDNN, which nobody listed by hand. (The rpm's are
# the rpm-requires check's.)
[ "$(dpkg-deb -f "$deb" Version)" = "$version" ] || fail "deb version is not $version"
[ "$(rpm -qp --qf '%{VERSION}' "$rpm" 2>/dev/null)" = "$version" ] || fail "rpm version is not $version"
depends=$(dpkg-deb -f "$deb" Depends)
for dep in adduser libdnnl libc6 libsqlite3 libtbb libprotobuf; do
  grep -q "$dep" <<<"$depends" || fail "deb Depends lacks $dep: $depends"
done
requires=$(rpm -qpR "$rpm" 2>/dev/null)
grep -qx shadow-utils <<<"$requires" || fail "rpm Requires lacks shadow-utils"

# The rpm's executable finds the libraries it carries: its RUNPATH leads to
# them, and each of them finds the others beside it. The .deb's has none.
private=/usr/lib/anneal/private
dpkg-deb -x "$deb" "$work/deb"
readelf -d "$work/deb/usr/bin/anneal" | grep -Eq "\((RPATH|RUNPATH)\)" && fail "deb's anneal has an RPATH or RUNPATH"
mkdir -p "$work/rpm"
(cd "$work/rpm" && rpm2cpio "$rpm" | cpio -idm --quiet) || fail "cannot unpack $rpm"
runpath=$(readelf -d "$work/rpm/usr/bin/anneal" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
[ "$runpath" = "\$ORIGIN/../lib/anneal/private" ] || fail "rpm's anneal has RUNPATH '$runpath', not \$ORIGIN/../lib/anneal/private"
for so in "$work/rpm$private"/*; do
  [ -e "$so" ] || { fail "rpm has nothing in $private"; break; }
  rp=$(readelf -d "$so" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
  [ "$rp" = "\$ORIGIN" ] || fail "rpm's ${so##*/} has RUNPATH '$rp', not \$ORIGIN"
done
for lib in libdnnl.so libprotobuf.so libtbb.so.12 libtbbmalloc.so.2 libstdc++.so.6 libgcc_s.so.1 libsqlite3.so.0; do
  ls "$work/rpm$private/$lib"* >/dev/null 2>&1 || fail "rpm does not bundle $lib"
done
for f in /usr/share/doc/anneal/LICENSE /usr/share/doc/anneal/NOTICE; do
  grep -qxF "$f" <<<"$rpm_files" || fail "rpm lacks $f"
done
# Each bundled library is named in NOTICE, with its license.
for so in "$work/rpm$private"/*; do
  grep -q "^${so##*/}  .*[A-Za-z]" "$work/rpm/usr/share/doc/anneal/NOTICE" || fail "NOTICE does not name ${so##*/}"
done

# The binary is stripped, and the maintainer scripts are in place.
file "$work/deb/usr/bin/anneal" | grep -q ", stripped" || fail "deb binary is not stripped"
file "$work/rpm/usr/bin/anneal" | grep -q ", stripped" || fail "rpm binary is not stripped"
dpkg-deb -e "$deb" "$work/control"
for s in postinst prerm postrm; do [ -x "$work/control/$s" ] || fail "deb lacks $s"; done
grep -q "adduser --system" "$work/control/postinst" || fail "deb postinst does not add the user"
scripts=$(rpm -qp --scripts "$rpm" 2>/dev/null)
grep -q "useradd -r" <<<"$scripts" || fail "rpm %pre does not add the user"
grep -q "install -d -m 0750 -o anneal" <<<"$scripts" || fail "rpm %post does not create /var/lib/anneal"

# The packaged man page is the one the binary prints.
"$work/deb/usr/bin/anneal" --help-man | cmp -s - <(gzip -dc "$work/deb/usr/share/man/man1/anneal.1.gz") ||
  fail "packaged man page differs from the packaged binary's --help-man"

# Nothing of CUDA in anneal's packages: they install and run without it.
cuda_re='cuda|cudnn|cublas|nvidia'
grep -Ei "$cuda_re|/usr/lib/anneal" <<<"$deb_files" && fail "deb holds a CUDA file"
grep -q "^/usr/lib/\.build-id" <<<"$rpm_files" && fail "rpm holds /usr/lib/.build-id links"
# The rpm's /usr/lib/anneal holds the bundled libraries alone.
grep -Ei "$cuda_re" <<<"$rpm_files" && fail "rpm holds a CUDA file"
grep "^/usr/lib/anneal" <<<"$rpm_files" | grep -Ev "^/usr/lib/anneal(/private(/[^/]+)?)?$" &&
  fail "rpm holds more than its bundled libraries in /usr/lib/anneal"
grep -Eiq "$cuda_re" <<<"$depends" && fail "deb depends on CUDA: $depends"
grep -Ei "$cuda_re" <<<"$requires" && fail "rpm requires CUDA"

# Nothing of MPI in anneal's packages either: a single server installs
# anneal without Open MPI. Neither executable links an MPI library, the
# rpm bundles none, and neither package depends on one.
mpi_re='(^|[^a-z])(lib)?(mpi|open-rte|open-pal|openmpi|mpich)([^a-z]|$)'
for exe in "$work/deb/usr/bin/anneal" "$work/rpm/usr/bin/anneal"; do
  readelf -d "$exe" | grep NEEDED | grep -Ei "$mpi_re" && fail "${exe#"$work"/} links an MPI library"
done
grep -Ei "libmpi|mpich|open-rte|open-pal|/usr/lib/anneal/libanneal-mpi" <<<"$deb_files
$rpm_files" && fail "anneal's packages hold an MPI file"
grep -Eiq "$mpi_re" <<<"$depends" && fail "deb depends on MPI: $depends"
grep -Ei "$mpi_re" <<<"$requires" && fail "rpm requires MPI"

if [ "$cuda" = cuda ]; then
  plugin=/usr/lib/anneal/libanneal-cuda.so
  ops=/usr/lib/anneal/libanneal-cuda-ops.so  # the backend the plugin loads
  # Exactly the plugin and its backend, and for Debian its copyright and changelog.
  cuda_deb_files=$(dpkg-deb -c "$cuda_deb" | awk '$1 !~ /^d/ {print $6}' | sed 's|^\.||' | sort)
  expected=$(printf '%s\n' "$plugin" "$ops" /usr/share/doc/anneal-cuda/changelog.gz \
    /usr/share/doc/anneal-cuda/copyright | sort)
  [ "$cuda_deb_files" = "$expected" ] || fail "anneal-cuda deb holds $(oneline "$cuda_deb_files"), not $(oneline "$expected")"
  cuda_rpm_files=$(rpm -qlp "$cuda_rpm" 2>/dev/null | sort)
  expected=$(printf '%s\n' /usr/lib/anneal "$plugin" "$ops" | sort)
  [ "$cuda_rpm_files" = "$expected" ] || fail "anneal-cuda rpm holds $(oneline "$cuda_rpm_files"), not $(oneline "$expected")"

  [ "$(dpkg-deb -f "$cuda_deb" Version)" = "$version" ] || fail "anneal-cuda deb version is not $version"
  [ "$(rpm -qp --qf '%{VERSION}' "$cuda_rpm" 2>/dev/null)" = "$version" ] || fail "anneal-cuda rpm version is not $version"
  [ -z "$(rpm -qp --scripts "$cuda_rpm" 2>/dev/null)" ] || fail "anneal-cuda rpm has scriptlets"
  dpkg-deb -e "$cuda_deb" "$work/cuda-control"
  for s in preinst postinst prerm postrm; do
    [ -e "$work/cuda-control/$s" ] && fail "anneal-cuda deb has a $s (the plugin needs no ldconfig, no user)"
  done

  # Both libraries are stripped, carry no build-tree RUNPATH, and are anneal's.
  dpkg-deb -x "$cuda_deb" "$work/cuda"
  for so in "$work/cuda$plugin" "$work/cuda$ops"; do
    file "$so" | grep -q ", stripped" || fail "anneal-cuda deb's ${so##*/} is not stripped"
    readelf -d "$so" | grep -Eq "\((RPATH|RUNPATH)\)" && fail "anneal-cuda deb's ${so##*/} has an RPATH or RUNPATH"
  done
  cuda_depends=$(dpkg-deb -f "$cuda_deb" Depends)
  cuda_requires=$(rpm -qpR "$cuda_rpm" 2>/dev/null)
  grep -qF "anneal (= $version)" <<<"$cuda_depends" || fail "anneal-cuda deb does not depend on anneal (= $version): $cuda_depends"
  grep -qx "anneal = $version-[0-9]*" <<<"$cuda_requires" || fail "anneal-cuda rpm does not require anneal = $version"

  # Every library the plugin links is a dependency of both packages: by
  # soname for rpm (its automatic requires), by the package that provides
  # it for Debian (see packaging/CMakeLists.txt).
  needed=$(for so in "$work/cuda$plugin" "$work/cuda$ops"; do
    readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'
  done | sort -u)
  for lib in libcudart.so. libcublasLt.so. libcudnn.so.; do
    grep -q "^$lib" <<<"$needed" || fail "the plugin does not link $lib* (needed: $(oneline "$needed"))"
  done
  # The plugin itself maps the CUDA runtime alone: probing stays cheap.
  readelf -d "$work/cuda$plugin" | grep -Eq "NEEDED.*(cublas|cudnn)" &&
    fail "libanneal-cuda.so links cuBLAS or cuDNN (they belong to libanneal-cuda-ops.so)"
  for lib in $needed; do
    # rpm: by soname, but for the C++ runtime, which anneal's rpm bundles
    # (packaging/rpm/bundle.cmake) and the plugin takes from the process
    # that loads it.
    case $lib in
      libstdc++.so.* | libgcc_s.so.*)
        grep -q "^$lib(" <<<"$cuda_requires" && fail "anneal-cuda rpm requires $lib, which anneal's rpm bundles" ;;
      *) grep -qxF "$lib()(64bit)" <<<"$cuda_requires" || fail "anneal-cuda rpm does not require $lib()(64bit)" ;;
    esac
    case $lib in
      libcudart.so.*) pkg="cuda-cudart-${lib#libcudart.so.}-" ;;
      libcublasLt.so.*) pkg="libcublas-${lib#libcublasLt.so.}-" ;;
      libcudnn.so.*) pkg="libcudnn${lib#libcudnn.so.}-cuda-" ;;
      libc.so.6 | libm.so.6) pkg=libc6 ;;
      libstdc++.so.6) pkg=libstdc++6 ;;
      libgcc_s.so.1) pkg=libgcc-s1 ;;
      *) fail "the plugin links $lib, which no Depends of anneal-cuda deb stands for"; continue ;;
    esac
    grep -qF "$pkg" <<<"$cuda_depends" || fail "anneal-cuda deb has no Depends for $lib ($pkg...): $cuda_depends"
  done
fi

if [ "$mpi" = mpi ]; then
  plugin=/usr/lib/anneal/libanneal-mpi.so
  # Exactly the plugin, and for Debian its copyright and changelog.
  mpi_deb_files=$(dpkg-deb -c "$mpi_deb" | awk '$1 !~ /^d/ {print $6}' | sed 's|^\.||' | sort)
  expected=$(printf '%s\n' "$plugin" /usr/share/doc/anneal-mpi/changelog.gz /usr/share/doc/anneal-mpi/copyright | sort)
  [ "$mpi_deb_files" = "$expected" ] || fail "anneal-mpi deb holds $(oneline "$mpi_deb_files"), not $(oneline "$expected")"
  mpi_rpm_files=$(rpm -qlp "$mpi_rpm" 2>/dev/null | sort)
  expected=$(printf '%s\n' /usr/lib/anneal "$plugin" | sort)
  [ "$mpi_rpm_files" = "$expected" ] || fail "anneal-mpi rpm holds $(oneline "$mpi_rpm_files"), not $(oneline "$expected")"

  [ "$(dpkg-deb -f "$mpi_deb" Version)" = "$version" ] || fail "anneal-mpi deb version is not $version"
  [ "$(rpm -qp --qf '%{VERSION}' "$mpi_rpm" 2>/dev/null)" = "$version" ] || fail "anneal-mpi rpm version is not $version"
  [ -z "$(rpm -qp --scripts "$mpi_rpm" 2>/dev/null)" ] || fail "anneal-mpi rpm has scriptlets"
  dpkg-deb -e "$mpi_deb" "$work/mpi-control"
  for s in preinst postinst prerm postrm; do
    [ -e "$work/mpi-control/$s" ] && fail "anneal-mpi deb has a $s (the plugin needs no ldconfig, no user)"
  done

  dpkg-deb -x "$mpi_deb" "$work/mpi"
  so=$work/mpi$plugin
  file "$so" | grep -q ", stripped" || fail "anneal-mpi deb's plugin is not stripped"
  readelf -d "$so" | grep -Eq "\((RPATH|RUNPATH)\)" && fail "anneal-mpi deb's plugin has an RPATH or RUNPATH"
  mpi_depends=$(dpkg-deb -f "$mpi_deb" Depends)
  mpi_requires=$(rpm -qpR "$mpi_rpm" 2>/dev/null)
  grep -qF "anneal (= $version)" <<<"$mpi_depends" || fail "anneal-mpi deb does not depend on anneal (= $version): $mpi_depends"
  grep -qx "anneal = $version-[0-9]*" <<<"$mpi_requires" || fail "anneal-mpi rpm does not require anneal = $version"

  # Every library the plugin links is a dependency of both packages: by
  # soname for rpm, by the Debian package that provides it (from
  # dpkg-shlibdeps) for the .deb.
  needed=$(readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort -u)
  grep -q "^libmpi\.so\.[0-9]" <<<"$needed" || fail "the MPI plugin does not link libmpi.so.* (needed: $(oneline "$needed"))"
  for lib in $needed; do
    case $lib in
      libstdc++.so.* | libgcc_s.so.*)
        grep -q "^$lib(" <<<"$mpi_requires" && fail "anneal-mpi rpm requires $lib, which anneal's rpm bundles" ;;
      *) grep -qxF "$lib()(64bit)" <<<"$mpi_requires" || fail "anneal-mpi rpm does not require $lib()(64bit)" ;;
    esac
    case $lib in
      libmpi.so.*) pkg=libopenmpi ;;
      libc.so.6 | libm.so.6) pkg=libc6 ;;
      libstdc++.so.6) pkg=libstdc++6 ;;
      libgcc_s.so.1) pkg=libgcc-s1 ;;
      *) fail "the MPI plugin links $lib, which no Depends of anneal-mpi deb stands for"; continue ;;
    esac
    grep -qF "$pkg" <<<"$mpi_depends" || fail "anneal-mpi deb has no Depends for $lib ($pkg...): $mpi_depends"
  done
  grep -Eiq "$cuda_re" <<<"$mpi_depends$mpi_requires" && fail "anneal-mpi depends on CUDA"
fi

if [ "$failures" -ne 0 ]; then exit 1; fi
echo "package contents: all checks passed"
