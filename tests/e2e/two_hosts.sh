# Two network "hosts" on this machine, for the MPI tests and benchmarks that
# need the ranks' traffic to cross a real network interface: network
# namespaces NS-1 and NS-2, each with one end of a veth pair (LINKp1, LINKp2)
# whose other end (LINKv1, LINKv2) sits on bridge BRIDGE; the bridge is
# SUBNET.254/24 and namespace i is SUBNET.i. Sourced (bash); needs root or
# CAP_NET_ADMIN and iproute2.
#
#   two_hosts_up NS BRIDGE SUBNET LINK    makes them (NS-1 may already exist:
#                                         a caller's probe); 1 on any failure,
#                                         iproute2's message on stderr
#   two_hosts_down NS BRIDGE              removes whatever of them exists
#   two_hosts_mpirun NS SUBNET DIR ARGS...
#                                         mpirun ARGS with one rank slot on
#                                         each namespace (DIR/hostfile), its
#                                         daemons started there by a launch
#                                         agent (DIR/agent.sh), and every
#                                         byte on SUBNET's veths
two_hosts_up() {
  local ns=$1 bridge=$2 subnet=$3 link=$4 i
  { ip netns list | grep -qw "$ns-1" || ip netns add "$ns-1"; } && ip netns add "$ns-2" &&
    ip link add "$bridge" type bridge && ip addr add "$subnet.254/24" dev "$bridge" && ip link set "$bridge" up ||
    return 1
  for i in 1 2; do
    ip link add "${link}v$i" type veth peer name "${link}p$i" && ip link set "${link}p$i" netns "$ns-$i" &&
      ip link set "${link}v$i" master "$bridge" up && ip -n "$ns-$i" addr add "$subnet.$i/24" dev "${link}p$i" &&
      ip -n "$ns-$i" link set "${link}p$i" up && ip -n "$ns-$i" link set lo up || return 1
  done
}
two_hosts_down() {  # safe under set -e: what is not there is not an error
  ip netns del "$1-1" 2> /dev/null || true
  ip netns del "$1-2" 2> /dev/null || true
  ip link del "$2" 2> /dev/null || true
}
# The launch agent: mpirun calls it as `AGENT HOST COMMAND...` (as it would
# ssh); it runs the command in the namespace named HOST, under that name.
# Daemons and ranks talk on the namespaces' subnet only: no shared memory
# (vader) between the "hosts", no loopback shortcut. Unbound: each "host"'s
# daemon sees a machine of its own and would bind its one rank to core 0,
# both ranks to the same core.
two_hosts_mpirun() {
  local ns=$1 subnet=$2 dir=$3
  shift 3
  if [ ! -x "$dir/agent.sh" ]; then
    cat > "$dir/agent.sh" << 'SH'
#!/bin/sh
host=$1
shift
exec ip netns exec "$host" unshare --uts sh -c 'hostname "$0" && exec sh -c "$1"' "$host" "$*"
SH
    chmod +x "$dir/agent.sh"
    printf '%s slots=1\n%s slots=1\n' "$ns-1" "$ns-2" > "$dir/hostfile"
  fi
  mpirun --allow-run-as-root --bind-to none --hostfile "$dir/hostfile" --mca plm_rsh_agent "$dir/agent.sh" \
    --mca oob_tcp_if_include "$subnet.0/24" --mca btl self,tcp --mca btl_tcp_if_include "$subnet.0/24" "$@"
}
