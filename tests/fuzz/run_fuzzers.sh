#!/bin/bash
# Runs fuzz targets one after another (make fuzz): each for FUZZ_SECONDS
# (default 60) from a working corpus under BUILD/fuzz-work/TARGET, seeded
# with tests/fuzz/corpus/TARGET and tests/fuzz/regressions/TARGET.
# Crashes, leaks, timeouts and out-of-memory inputs land in
# BUILD/fuzz-work/TARGET/artifacts/; copy each one into
# tests/fuzz/regressions/TARGET/ once it is fixed. Each target's libFuzzer
# log is BUILD/fuzz-work/TARGET.log and ends with its final stats.
#
# Usage: run_fuzzers.sh BUILD_DIR [TARGET...]   (default: every target)
set -u
build=${1:?usage: run_fuzzers.sh BUILD_DIR [TARGET...]}
shift
source_dir=$(cd "$(dirname "$0")" && pwd)
seconds=${FUZZ_SECONDS:-60}
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(csv libsvm idx decompress object model checkpoint config layer_spec audit serve_request)

# Inputs past these sizes add time per run, not coverage.
max_len() {
  case $1 in
    model | checkpoint) echo 131072 ;;  # the tree and ensemble model seeds run to 100 KB
    layer_spec) echo 512 ;;
    *) echo 8192 ;;
  esac
}

status=0
for target in "${targets[@]}"; do
  work=$build/fuzz-work/$target
  mkdir -p "$work/corpus" "$work/artifacts"
  echo "fuzzing $target for ${seconds}s (log: $work.log)"
  "$build/tests/fuzz/fuzz_$target" "$work/corpus" "$source_dir/corpus/$target" \
    "$source_dir/regressions/$target" \
    -max_total_time="$seconds" -max_len="$(max_len "$target")" -rss_limit_mb=2048 -timeout=10 \
    -print_final_stats=1 -artifact_prefix="$work/artifacts/" >"$work.log" 2>&1
  rc=$?
  grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|Done)" "$work.log" | sed "s/^/  $target: /"
  if [ $rc -ne 0 ]; then
    echo "  $target: FAILED (exit $rc); see $work.log and $work/artifacts/"
    status=1
  fi
done
exit $status
