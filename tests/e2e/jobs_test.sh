#!/bin/bash
# The job queue end to end: two workers and 20 small jobs each run exactly
# once; priorities; a job that segfaults (a fault point of the test build) is failed with
# the reason and retried from its checkpoint while a sibling finishes; a
# timeout; cancel of a running job; the per-job core cap seen on the job's
# threads; bad submits leave the store as it was.
source "$E2E_LIB"

cat > "$WORK/tiny.ini" <<'EOF'
name = tiny
dataset = iris@latest
layers = dense(8) relu dense(3)
loss = softmax_ce
optimizer = adam
lr = 0.01
batch = 16
epochs = 3
seed = 1
EOF
# A few seconds of training with a checkpoint every 20 steps.
long_config() {  # NAME EPOCHS
  cat > "$WORK/$1.ini" <<EOF
name = $1
dataset = digits@latest
layers = dense(128) relu dense(10)
loss = softmax_ce
optimizer = adam
lr = 0.001
batch = 32
epochs = $2
seed = 3
checkpoint_every = 20
EOF
}


# Two cores where the machine (or taskset) allows them, else one.
cores=$(( $(nproc) >= 2 ? 2 : 1 ))

expect_rc 0 init
expect_rc 0 data import iris "$TEST_DATA/iris.csv"
expect_rc 0 data import digits "$TEST_DATA/digits.csv"

# --- bad submits: one line, exit 2, nothing queued --------------------------
before=$(catalog_dump | sha256sum)
printf 'name = x\ndataset = iris\nlayers = dense(3)\nlearning_rat = 0.1\n' > "$WORK/bad.ini"
expect_rc 2 submit "$WORK/bad.ini"
expect_contains "$ERR" "bad.ini:4" "unknown key is located"
expect_eq "$(printf '%s\n' "$ERR" | wc -l)" "1" "one-line error"
expect_rc 2 submit "$WORK/tiny.ini" --timeout soon
expect_contains "$ERR" "--timeout 'soon'" "bad duration names the flag"
expect_rc 2 submit "$WORK/missing.ini"
expect_rc 2 submit "$WORK/tiny.ini" --cores 0
expect_contains "$ERR" "--cores must be at least 1" "the store's 'job core count' is named as its flag"
# Issue 29: a rank count mpirun would fork until the host gave out, and a
# directory as the hostfile (or the config), were accepted.
expect_rc 2 submit "$WORK/tiny.ini" --ranks 100000
expect_contains "$ERR" "--ranks 100000: expected 1 to 4096 processes" "ranks are bounded"
mkdir -p "$WORK/hosts.d"
expect_rc 2 submit "$WORK/tiny.ini" --ranks 2 --hostfile "$WORK/hosts.d"
expect_contains "$ERR" "--hostfile $WORK/hosts.d: not a regular file (a directory); expected a text file" \
  "a directory is no hostfile"
expect_rc 2 submit "$WORK/hosts.d"
expect_contains "$ERR" "CONFIG $WORK/hosts.d: not a regular file" "a directory is no config"
# A value the frozen INI text could not carry: '#' would start a comment
# (the job would run with label 'y'), a line break would add a key.
expect_rc 2 submit "$WORK/tiny.ini" --set 'label=y#z'
expect_contains "$ERR" "--set label: the value may not contain '#'" "a '#' in a value is refused"
expect_eq "$(printf '%s\n' "$ERR" | wc -l)" "1" "one-line error"
expect_rc 2 submit "$WORK/tiny.ini" --set "$(printf 'name=a\nepochs=99')"
expect_contains "$ERR" "line break" "a line break in a value is refused"
expect_rc 2 train "$WORK/tiny.ini" --set 'name=x#y'
expect_eq "$(catalog_dump | sha256sum)" "$before" "bad submits leave the catalog as it was"

# --- 20 jobs, two workers: each runs exactly once ---------------------------
for i in $(seq 1 20); do
  run submit "$WORK/tiny.ini" --set "seed=$i"
  [ "$RC" -eq 0 ] || fail "submit $i exited $RC: $ERR"
done
expect_eq "$OUT" "job-20" "submit prints the job id"
"$ANNEAL" worker --cores 1 --drain > "$WORK/w1.log" 2>&1 &
w1=$!
"$ANNEAL" worker --cores 1 --drain > "$WORK/w2.log" 2>&1 &
w2=$!
wait "$w1"; rc1=$?
wait "$w2"; rc2=$?
expect_eq "$rc1:$rc2" "0:0" "both workers drain and exit 0"
run --json jobs list
expect_eq "$(json_get "sum(1 for x in j['jobs'] if x['state'] == 'succeeded')")" "20" "20 jobs succeeded"
expect_eq "$(json_get "sorted(set(x['attempts'] for x in j['jobs']))")" "[1]" "each job ran once"
expect_eq "$(json_get "len(set(x['run'] for x in j['jobs']))")" "20" "20 distinct runs"
expect_eq "$(json_get "len(set(x['model'] for x in j['jobs']))")" "20" "20 distinct models"
run --json runs list
expect_eq "$(json_get "len(j['runs'])")" "20" "no run was started twice"
both=$(grep -h "succeeded" "$WORK/w1.log" "$WORK/w2.log" | wc -l)
expect_eq "$both" "20" "the workers together report 20 successes"
grep -q succeeded "$WORK/w1.log" && grep -q succeeded "$WORK/w2.log" && pass || fail "both workers took jobs"

# --- priorities: the higher one first ---------------------------------------
expect_rc 0 submit "$WORK/tiny.ini" --set name=low
expect_rc 0 submit "$WORK/tiny.ini" --set name=high --priority 10
mkdir -p "$WORK/textfile"
"$ANNEAL" worker --cores 1 --max-jobs 1 --drain --metrics-textfile "$WORK/textfile" > "$WORK/prio.log" 2>&1
first=$(grep -o "(\(low\|high\)) started" "$WORK/prio.log" | head -1)
expect_eq "$first" "(high) started" "higher priority runs first"
expect_contains "$(cat "$WORK/textfile/anneal.prom")" 'anneal_jobs{state="succeeded"} 22' "the worker keeps the textfile current"

# --- a job that segfaults is failed and retried; its sibling finishes -------
long_config crashy 30
long_config sibling 30
expect_rc 0 submit "$WORK/crashy.ini" --retries 1
crashy=$OUT
expect_rc 0 submit "$WORK/sibling.ini"
sibling=$OUT
ANNEAL_FAULT='job.crashy.attempt-1.trained=segv' "$ANNEAL_FAULTS_BIN" worker --cores "$cores" --drain --backoff 1s \
  > "$WORK/crash.log" 2>&1 &
wpid=$!
wait "$wpid"
expect_eq "$?" "0" "the worker survives a crashing job"
expect_contains "$(cat "$WORK/crash.log")" "$crashy failed (attempt 1 of 2): killed by signal 11 (SIGSEGV)" "the crash is named"
expect_eq "$(job_field "$crashy" state)" "succeeded" "the crashed job succeeded on its retry"
expect_eq "$(job_field "$crashy" attempts)" "2" "two attempts"
expect_eq "$(job_field "$sibling" state)" "succeeded" "the sibling finished"
expect_eq "$(job_field "$sibling" attempts)" "1" "the sibling ran once"
expect_contains "$("$ANNEAL" jobs logs "$crashy")" "resuming run-" "the retry resumed the crashed run"
# The same fault with no retries left: failed, with the reason.
expect_rc 0 submit "$WORK/tiny.ini" --set name=doomed --retries 0
doomed=$OUT
ANNEAL_FAULT='job.doomed.*=segv' "$ANNEAL_FAULTS_BIN" worker --cores 1 --drain > /dev/null 2>&1
expect_eq "$(job_field "$doomed" state)" "failed" "a crash without retries fails the job"
expect_contains "$(job_field "$doomed" error)" "SIGSEGV" "the job records why"
expect_rc 0 jobs retry "$doomed"
"$ANNEAL" worker --cores 1 --drain > /dev/null 2>&1
expect_eq "$(job_field "$doomed" state)" "succeeded" "jobs retry gives it another attempt"

# --- timeout --------------------------------------------------------------
long_config slow 100000
expect_rc 0 submit "$WORK/slow.ini" --timeout 2s
slow=$OUT
"$ANNEAL" worker --cores 1 --drain > "$WORK/timeout.log" 2>&1
expect_eq "$(job_field "$slow" state)" "failed" "a job past its timeout fails"
expect_eq "$(job_field "$slow" error)" "timed out after 2s" "and says why"

# --- cancel a running job; the core cap on its threads ----------------------
# The job's process stops at its first checkpoint (fault point), so the run,
# its threads and a checkpoint all exist when the test looks.
long_config capped 100000
expect_rc 0 submit "$WORK/capped.ini" --cores 1
capped=$OUT
fault_fifos
ANNEAL_FAULT='checkpoint.committed@1=pause' "$ANNEAL_FAULTS_BIN" worker --cores "$cores" --lease 2s --drain \
  > "$WORK/cancel.log" 2>&1 &
wpid=$!
reached=$(fault_reached) || fail "the job never reached its first checkpoint"
cpid=${reached##* }
expect_eq "$(job_field "$capped" state)" "running" "the job runs"
test -n "$(job_field "$capped" run)" && pass || fail "the job recorded its run"
cpus=$(cat /proc/"$cpid"/task/*/status 2>/dev/null | awk '/^Cpus_allowed_list/ {print $2}' | sort -u)
expect_eq "$(printf '%s\n' "$cpus" | wc -l)" "1" "every thread of the job has one CPU list"
case "$cpus" in *,*|*-*) fail "a 1-core job may run on more than one CPU: $cpus" ;; *) pass ;; esac
threads=$(ls /proc/"$cpid"/task | wc -l)
run runs show "$(job_field "$capped" run)" --json
expect_eq "$(json_get "[l for l in j['config'].splitlines() if l.startswith('threads')][0]")" "threads = 1" \
  "the run trains with the job's core budget"
expect_rc 0 jobs cancel "$capped"
expect_contains "$OUT" "stops it at the next step" "cancel of a running job waits for a step"
fault_resume
wait "$wpid"
expect_eq "$?" "0" "the draining worker ends once the job is cancelled"
expect_eq "$(job_field "$capped" state)" "cancelled" "cancel ended the job"
run --json runs show "$(job_field "$capped" run)"
expect_eq "$(json_get "j['status']")" "cancelled" "the run is recorded cancelled"
[ "$(json_get "len(j['checkpoints'])")" -ge 1 ] && pass || fail "cancel left no checkpoint"
echo "job threads seen: $threads on CPU $cpus"

# --- SIGTERM stops an idle worker cleanly ------------------------------------
# It stops where it found nothing to claim; the signal lands while it waits.
fault_fifos
ANNEAL_FAULT='worker.idle=pause' "$ANNEAL_FAULTS_BIN" worker --cores 1 > "$WORK/idle.log" 2>&1 &
wpid=$!
fault_reached > /dev/null || fail "the worker never went idle"
kill -TERM "$wpid"
fault_resume
wait "$wpid"
expect_eq "$?" "0" "SIGTERM stops an idle worker cleanly"

# --- jobs show / logs / list on bad ids --------------------------------------
expect_rc 1 jobs show job-999
expect_contains "$ERR" "no job job-999" "unknown job"
expect_rc 2 jobs show nonsense
expect_rc 0 jobs logs "$sibling"
expect_contains "$OUT" "attempt 1" "the log has the attempt header"
expect_rc 0 jobs list

finish
