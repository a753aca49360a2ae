#!/bin/bash
# anneal under mpirun: every command but train (which trains one run
# across the ranks, mpi_train_test) is refused on more than one rank in one
# line (exit 2) before it touches the store, instead of N copies of it
# racing on one store; one rank (-np 1) runs as usual. Skipped (77) where
# Open MPI's mpirun is not installed.
. "$E2E_LIB"

require_mpi
mpi() { $MPIRUN "$@"; }

mpi -np 2 "$ANNEAL" init > "$WORK/out" 2> "$WORK/err"
expect_eq "$?" "2" "two ranks: exit 2"
# (Both ranks write to one stderr through mpirun, whose forwarding may
# join their lines: the message is looked for, not counted per line.)
expect_contains "$(cat "$WORK/err")" "anneal init under mpirun with 2 ranks: only 'anneal train' runs across ranks" \
  "the ranks say why"
[ ! -e "$ANNEAL_HOME" ] && pass || fail "a refused init created the store"

mpi -np 1 "$ANNEAL" init > "$WORK/out" 2> "$WORK/err"
expect_eq "$?" "0" "one rank under mpirun runs as usual"
expect_rc 0 data import iris "$TEST_DATA/iris.csv"
before=$(store_state)
mpi -np 2 "$ANNEAL" data import iris2 "$TEST_DATA/iris.csv" > "$WORK/out" 2> "$WORK/err"
expect_eq "$?" "2" "an import on two ranks: exit 2"
expect_contains "$(cat "$WORK/err")" "anneal data import under mpirun with 2 ranks" "the import says why"
expect_eq "$(store_state)" "$before" "the store is as it was"
mpi -np 2 "$ANNEAL" --json runs list > "$WORK/out" 2> "$WORK/err"
expect_eq "$?" "2" "even a read-only command on two ranks: exit 2"
mpi -np 2 "$ANNEAL" --version > "$WORK/out" 2> "$WORK/err"
expect_eq "$?" "0" "--version answers on any number of ranks"
finish
