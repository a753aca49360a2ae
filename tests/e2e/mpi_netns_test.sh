#!/bin/bash
# `mpirun -np 2 anneal train` with the ranks on two "hosts": two network
# namespaces on this machine (each with a host name of its own), joined to
# a bridge by veth pairs. mpirun starts its daemons in them through a launch
# agent (`ip netns exec NS`, in place of ssh) and the ranks talk over Open
# MPI's TCP transport on the veth interfaces only, so every all-reduce and
# every shard rank 0 sends crosses a network interface. Checks: the run
# gives the same weights as two ranks on one host (the reduction order does
# not depend on the transport), the lineage names both hosts, and the
# second namespace's interface carried at least the gradients' bytes.
# Skipped (77) where namespaces cannot be made (no root, no CAP_NET_ADMIN)
# or mpirun or the MPI plugin is missing.
. "$E2E_LIB"

require_mpi plugin
# Names unique to this run: tests may run side by side.
tag=$(( $$ % 100000 ))
subnet="10.214.$(( $$ % 250 ))"
bridge="anbr$tag"
ns1="anneal-$tag-1"
ns2="anneal-$tag-2"
. "$(dirname "$E2E_LIB")/two_hosts.sh"
cleanup() {
  two_hosts_down "anneal-$tag" "$bridge"
  rm -rf "$WORK"
}
if ! command -v ip > /dev/null || ! command -v unshare > /dev/null || ! ip netns add "$ns1" 2> "$WORK/netns-err"; then
  echo "SKIP: cannot create a network namespace here: $(cat "$WORK/netns-err" 2> /dev/null)"
  exit 77
fi
trap cleanup EXIT
if ! two_hosts_up "anneal-$tag" "$bridge" "$subnet" "an$tag" 2> "$WORK/setup-err"; then
  echo "SKIP: cannot join network namespaces by veth pairs here: $(cat "$WORK/setup-err")"
  exit 77
fi

# One rank on each namespace, over their veths only (two_hosts.sh).
net_mpi() { two_hosts_mpirun "anneal-$tag" "$subnet" "$WORK" -x ANNEAL_HOME "$@"; }
local_mpi() { $MPIRUN -x ANNEAL_HOME "$@"; }

expect_rc 0 init
expect_rc 0 data import digits "$TEST_DATA/digits.csv"
digits_mpi_config "$WORK/d.ini" digits-net "epochs = 2"

local_mpi -np 2 "$ANNEAL" --json train "$WORK/d.ini" > "$WORK/out" 2> "$WORK/err"
expect_eq "$?" "0" "two ranks on this host: $(cat "$WORK/err")"
OUT=$(cat "$WORK/out")
local_hash=$(json_get 'j["weights_hash"]')

tx_bytes() { ip netns exec "$ns2" cat "/sys/class/net/an${tag}p2/statistics/tx_bytes"; }
before=$(tx_bytes)
net_mpi -np 2 "$ANNEAL" --json train "$WORK/d.ini" > "$WORK/out" 2> "$WORK/err"
expect_eq "$?" "0" "two ranks in two namespaces: $(cat "$WORK/err")"
OUT=$(cat "$WORK/out")
expect_eq "$(json_get 'j["weights_hash"]')" "$local_hash" "over TCP between namespaces: the same weights as on one host"
model=$(json_get 'j["model"]')
expect_eq "$("$ANNEAL" --json model show "$model" | python3 -c "import json,sys; print(json.load(sys.stdin)['lineage']['hosts'])")" \
  "['$ns1', '$ns2']" "the lineage names each rank's host"
# Rank 1 sends its part of the gradients (dense(32) relu dense(10) on 64
# features: 2410 floats, of which the all-reduce sends half in its
# reduce-scatter and half in its all-gather) once per step, and its
# requests for rows, from its own interface.
steps=$("$ANNEAL" --json runs show "$(json_get 'j["run"]')" | python3 -c "import json,sys; print(json.load(sys.stdin)['summary']['steps'])")
sent=$(( $(tx_bytes) - before ))
[ "$steps" -gt 0 ] && [ "$sent" -ge $((steps * 2410 * 4)) ] && pass ||
  fail "rank 1's interface sent $sent bytes in $steps steps, less than the gradients"
finish
