#!/bin/bash
# OpenBLAS starts a pool of threads when the process loads it, and they
# spin for about 0.1 s on a core anneal's own work needs (5% of a 2-core
# import). anneal runs its BLAS on the calling thread and stops that pool
# first thing (run_blas_on_calling_threads): an import paused before any
# work of its own has started holds one thread, its main one.
. "$E2E_LIB"
use_fault_build

expect_rc 0 init
fault_fifos
ANNEAL_FAULT="import.prepared=pause" "$ANNEAL" data import iris "$TEST_DATA/iris.csv" > "$WORK/import.out" 2>&1 &
importer=$!
read -r point pid < <(fault_reached) || fail "the import never reached import.prepared"
expect_eq "$point" "import.prepared" "paused where asked"
# A thread joined a moment ago can still be listed while the kernel tears
# it down: wait for each other thread to go (lib.sh's wait_gone; a finished
# one goes at once, a pool thread never would: it sleeps once it stops
# spinning, and the bound turns that into the failure below).
for task in /proc/"$pid"/task/*; do
  tid=${task##*/}
  [ "$tid" = "$pid" ] || wait_gone "$tid" || true
done
threads=$(ls "/proc/$pid/task" | wc -l)
fault_resume
wait "$importer"
expect_eq "$?" 0 "the import went on and succeeded: $(cat "$WORK/import.out")"
expect_eq "$threads" 1 "threads of the paused import (an OpenBLAS pool would add one per further core)"

finish
