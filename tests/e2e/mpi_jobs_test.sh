#!/bin/bash
# `anneal submit --ranks N [--hostfile FILE]`: the worker starts the job
# through mpirun, and the run trains across the ranks exactly as
# `mpirun -np N anneal train` does (the same weights), with its lineage
# recording the ranks; bad --ranks / --hostfile are refused in one line and
# queue nothing. Skipped (77) where mpirun or the MPI plugin is missing.
. "$E2E_LIB"

require_mpi plugin

expect_rc 0 init
expect_rc 0 data import digits "$TEST_DATA/digits.csv"
digits_mpi_config "$WORK/d.ini" digits-job "epochs = 2"

# Bad requests: one line, exit 2, nothing queued.
before=$(catalog_dump | sha256sum)
expect_rc 2 submit "$WORK/d.ini" --ranks 0
expect_contains "$ERR" "--ranks 0: expected 1 to 4096 processes" "--ranks 0 refused"
expect_rc 2 submit "$WORK/d.ini" --ranks 2 --hostfile "$WORK/no-such-hostfile"
expect_contains "$ERR" "--hostfile" "a missing hostfile named"
printf 'localhost slots=2\n' > "$WORK/hostfile"
expect_rc 2 submit "$WORK/d.ini" --hostfile "$WORK/hostfile"
expect_contains "$ERR" "--hostfile: only for a job of 2 or more ranks" "a hostfile without ranks refused"
expect_eq "$(printf '%s\n' "$ERR" | wc -l)" "1" "one-line error"
expect_eq "$(catalog_dump | sha256sum)" "$before" "bad submits leave the catalog as it was"

# The reference: the same config on two ranks by hand.
$MPIRUN -x ANNEAL_HOME -np 2 "$ANNEAL" --json train "$WORK/d.ini" > "$WORK/out" 2> "$WORK/err"
expect_eq "$?" "0" "two ranks by hand: $(cat "$WORK/err")"
OUT=$(cat "$WORK/out")
by_hand=$(json_get 'j["weights_hash"]')

expect_rc 0 --json submit "$WORK/d.ini" --ranks 2 --hostfile "$WORK/hostfile"
expect_eq "$(json_get 'j["ranks"], j["hostfile"]')" "2 $WORK/hostfile" "the job records its ranks and hostfile"
job=$(json_get 'j["id"]')
ANNEAL_MPIRUN="$MPIRUN" "$ANNEAL" worker --cores 1 --drain > "$WORK/worker.log" 2>&1
expect_eq "$?" "0" "the worker drains: $(cat "$WORK/worker.log")"
expect_rc 0 --json jobs show "$job"
expect_eq "$(json_get 'j["state"]')" "succeeded" "the job succeeded: $("$ANNEAL" jobs logs "$job")"
model=$(json_get 'j["model"]')
expect_rc 0 --json model show "$model"
expect_eq "$(json_get 'j["lineage"]["ranks"], len(j["lineage"]["hosts"])')" "2 2" "its lineage records two ranks"
job_run=$(json_get 'j["run"]')
expect_eq "$("$ANNEAL" --json runs show "$job_run" | python3 -c 'import json,sys; print(json.load(sys.stdin)["summary"]["weights_hash"])')" \
  "$by_hand" "the job's weights are those of mpirun -np 2 anneal train"
expect_contains "$("$ANNEAL" jobs logs "$job")" "training on 2 ranks" "the job's log shows the ranks"

# The ranks keep to the CPU the worker gave the job. mpirun binds rank r to
# core r of its own choosing unless told otherwise, whatever CPUs it was
# started on; the worker tells it not to bind, so both ranks inherit the
# job's CPU. The worker runs on the last CPU this test may use (the job
# gets that one); rank 1 pauses at its first checkpoint while the test
# reads the CPU lists of both ranks, every thread.
use_fault_build
fault_fifos
cpu=$(python3 -c 'import os; print(max(os.sched_getaffinity(0)))')
expect_rc 0 --json submit "$WORK/d.ini" --ranks 2 --cores 1
pinned=$(json_get 'j["id"]')
ANNEAL_MPIRUN="$MPIRUN" ANNEAL_FAULT='train.rank-1.checkpointed=pause' taskset -c "$cpu" \
  "$ANNEAL" worker --cores 1 --drain > "$WORK/pinned.log" 2>&1 &
wpid=$!
reached=$(fault_reached) || fail "rank 1 never reached its checkpoint: $(cat "$WORK/pinned.log")"
rank1=${reached##* }
launcher=$(ps -o ppid= -p "$rank1" | tr -d ' ')
ranks_cpus=$(for pid in $(pgrep -P "$launcher"); do cat /proc/"$pid"/task/*/status; done 2> /dev/null |
  awk '/^Cpus_allowed_list/ {print $2}' | sort -u)
expect_eq "$(pgrep -P "$launcher" | wc -l)" "2" "mpirun started both ranks here"
expect_eq "$ranks_cpus" "$cpu" "every thread of both ranks runs on the job's CPU $cpu"
fault_resume
wait "$wpid"
expect_eq "$?" "0" "the worker drains: $(cat "$WORK/pinned.log")"
expect_eq "$(job_field "$pinned" state)" "succeeded" "the confined job succeeded: $("$ANNEAL" jobs logs "$pinned")"
finish
