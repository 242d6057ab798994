#!/usr/bin/env bash
# ipoib/ci/twohost-pair.sh ROLE: one host's side of the ipoib pairs of
# ci/twohost-suite.sh (run in the guests of ci/twohost.sh, with its
# environment: RDMA_HOST, RDMA_{A,B}_IPV4, RDMA_NETDEV, BIN).
#
# Host a is 10.77.0.1/24 and fd77::1/64, host b .2 and ::2. Each raises its
# netdev's MTU so that rxe's port MTU is 4096 (the interface's MTU is that
# less 4; IPv6 needs 1280), starts ipoib on rxe0, waits for its "up" line,
# pings the other over IPv4 and IPv6 (5 each once the peer answers), checks
# that the neighbour entries were learnt (the log line, and the table that
# SIGUSR1 prints); a sends b 8 MiB over TCP through the interfaces and the
# same over the netdev, each checked by hash, and prints both rates. Then b's ipoib restarts (SIGTERM, exit 0, started again:
# a new QP) while a pings it; a's entries must change to b's new address and
# its pings succeed again. The hosts order their steps by connecting to each
# other over the netdev. Last, each stops ipoib with SIGTERM and checks that it
# exited 0, the interface is gone and rxe0 has the kernel objects it had
# before (no PD, CQ, QP, CM id or MR left).
set -uo pipefail
role=${1:?role a or b}
if [ "$role" = a ]; then me=1 peer=2; else me=2 peer=1; fi
ifname=ipoib0
log=/tmp/ipoib-$role.log
fail() {
    echo "!! ipoib pair ($role): $*"
    echo "--- ipoib output:"
    cat "$log" 2>/dev/null
    [ -z "${pid:-}" ] || kill -TERM "$pid" 2>/dev/null
    exit 1
}
# listen PORT: wait (120 s at most) for the other host to connect; tell
# HOST PORT: connect to it (retrying for 120 s). The hosts' steps in order.
listen() {
    python3 -c "import socket; s = socket.create_server(('', $1)); s.settimeout(120); s.accept()"
}
tell() {
    local _
    for _ in $(seq 1 120); do
        python3 -c "import socket; socket.create_connection(('$1', $2), timeout=2)" 2>/dev/null && return 0
        sleep 1
    done
    return 1
}
# up LOG: start ipoib writing to LOG and wait for its up line.
up() {
    "$BIN/ipoib" -d rxe0 --ip "10.77.0.$me/24" --ip6 "fd77::$me/64" --name "$ifname" >"$1" 2>&1 &
    pid=$!
    for _ in $(seq 1 60); do
        grep -q "^ipoib: $ifname up, lladdr " "$1" && return 0
        kill -0 "$pid" 2>/dev/null || fail "ipoib exited before it was up"
        sleep 0.5
    done
    fail "no up line in 30 s"
}

# The kernel objects of rxe0 (PDs, CQs, QPs, CM ids, MRs, contexts).
objects() { rdma res show | grep -E '^[0-9]+: rxe0:'; }
objects0=$(objects)
echo "before: $objects0"

modprobe tun || fail "modprobe tun"
[ -c /dev/net/tun ] || fail "no /dev/net/tun"
ip link set "$RDMA_NETDEV" mtu 4500 || fail "netdev MTU"
trap 'ip link set "$RDMA_NETDEV" mtu 1500' EXIT
sleep 1
up "$log"
grep "^ipoib: $ifname up, lladdr " "$log"
echo "running: $(objects)"
[ "$(objects)" != "$objects0" ] || fail "ipoib's kernel objects are not seen"
ip addr show "$ifname"

# b receives a TCP transfer through the interfaces and one over the netdev.
if [ "$role" = b ]; then
    python3 ipoib/ci/tcp-check.py serve "10.77.0.$me" 7800 &
    python3 ipoib/ci/tcp-check.py serve "$RDMA_B_IPV4" 7801 &
fi

# Until the peer answers (it starts a few seconds later), then 5 each way.
for _ in $(seq 1 60); do ping -c 1 -W 1 "10.77.0.$peer" >/dev/null && break; done
ping -c 5 -W 2 "10.77.0.$peer" || fail "IPv4 ping"
for _ in $(seq 1 30); do ping -6 -c 1 -W 1 "fd77::$peer" >/dev/null && break; done
ping -6 -c 5 -W 2 "fd77::$peer" || fail "IPv6 ping"
grep -q "^ipoib: neighbour 10.77.0.$peer lladdr " "$log" || fail "no IPv4 neighbour learnt"
grep -q "^ipoib: neighbour fd77::$peer lladdr " "$log" || fail "no IPv6 neighbour learnt"
kill -USR1 "$pid"
sleep 1
grep -q "^ipoib: table 10.77.0.$peer lladdr " "$log" || fail "IPv4 neighbour not in the table"
grep -q "^ipoib: table fd77::$peer lladdr " "$log" || fail "IPv6 neighbour not in the table"

# a sends $MIB MiB through ipoib, then over the netdev itself (with the
# netdev's MTU of 4500 against ipoib's 4092): each checked by hash.
MIB=8
# packets: tx + rx of ipoib's last counters line; cpu: its user + system
# clock ticks.
packets() { grep '^ipoib: Stats' "$log" | tail -1 | sed -E 's/.*tx: ([0-9]+), rx: ([0-9]+),.*/\1 \2/' | awk '{print $1 + $2}'; }
cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
if [ "$role" = a ]; then
    p0=$(packets) c0=$(cpu)
    python3 ipoib/ci/tcp-check.py send "10.77.0.$peer" 7800 "$MIB" || fail "TCP through ipoib"
    kill -USR1 "$pid"
    sleep 1
    p1=$(packets) c1=$(cpu)
    echo "ipoib: $((p1 - p0)) datagrams sent and received, $((c1 - c0)) CPU ticks of $(getconf CLK_TCK)/s:" \
        "$(awk -v p=$((p1 - p0)) -v c=$((c1 - c0)) -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.0f us", c / hz * 1e6 / p }') CPU per datagram"
    python3 ipoib/ci/tcp-check.py send "$RDMA_B_IPV4" 7801 "$MIB" || fail "TCP over the netdev"
fi

# Both hosts' pings are over; then b's program restarts (a new QP) while a
# pings: a's entry must change to the new address (b announces itself when
# it comes up) and the ping resume.
# Before that, b's ipoib-inject sends a's interface the datagrams it must drop
# (ipoib/src/bin/ipoib-inject.rs): each counted once by its reason, and the
# flood of 2,000 ARP requests from made-up addresses leaves the table within
# its 1,024 entries; a's pings that follow show the interface still carries.
if [ "$role" = a ]; then
    listen 7790 || fail "host b did not report its pings done"
    kill -USR1 "$pid"
    sleep 1
    drops=$(grep '^ipoib: Stats' "$log" | tail -1)
    echo "$drops"
    for want in "short: 1" "ether_type: 1" "ip: 2" "arp: 1" "forged: 1"; do
        grep -qE "[ {]${want}[, ]" <<<"${drops#*Drops}" || fail "bad input: want $want in ${drops#*Drops}"
    done
    size=$(grep '^ipoib: table size' "$log" | tail -1 | awk '{print $4}')
    echo "ipoib: neighbour table of $size entries after the flood"
    [ "$size" -le 1024 ] || fail "the neighbour table grew to $size entries"
    ping -i 0.5 -c 40 -W 1 "10.77.0.$peer" >/tmp/ipoib-restart-ping.log 2>&1 &
    bg=$!
    listen 7791 || fail "host b did not report its restart"
    ping -c 5 -W 2 "10.77.0.$peer" || fail "IPv4 ping after the peer's restart"
    ping -6 -c 5 -W 2 "fd77::$peer" || fail "IPv6 ping after the peer's restart"
    grep "^ipoib: neighbour 10.77.0.$peer lladdr .* (was " "$log" ||
        fail "the IPv4 entry did not change to the restarted peer's address"
    grep "^ipoib: neighbour fd77::$peer lladdr .* (was " "$log" ||
        fail "the IPv6 entry did not change to the restarted peer's address"
    wait "$bg"
    echo "--- the ping across the restart:"
    tail -3 /tmp/ipoib-restart-ping.log
    tell "$RDMA_B_IPV4" 7792 || fail "host b never listened"
else
    lla=$(sed -nE "s/^ipoib: neighbour 10.77.0.$peer lladdr ([0-9a-f:]+)$/\1/p" "$log" | tail -1)
    "$BIN/ipoib-inject" -d rxe0 -g "$RDMA_GID_IDX_V6" --to "$lla" --ip "10.77.0.$peer" ||
        fail "ipoib-inject to $lla"
    tell "$RDMA_A_IPV4" 7790 || fail "host a never listened"
    sleep 3
    kill -TERM "$pid"
    wait "$pid" || fail "ipoib exited $? after SIGTERM (restart)"
    echo "--- ipoib output before the restart:"
    cat "$log"
    up "$log"
    grep "^ipoib: $ifname up" "$log"
    tell "$RDMA_A_IPV4" 7791 || fail "host a never listened (restart)"
    listen 7792 || fail "host a did not report its pings after the restart"
fi

kill -TERM "$pid"
wait "$pid"
rc=$?
pid=
[ "$rc" = 0 ] || fail "ipoib exited $rc after SIGTERM"
if ip link show "$ifname" >/dev/null 2>&1; then fail "$ifname left behind"; fi
for _ in $(seq 1 10); do
    [ "$(objects)" = "$objects0" ] && break
    sleep 0.5
done
echo "after: $(objects)"
[ "$(objects)" = "$objects0" ] || fail "kernel objects left behind: $(objects), before: $objects0"
echo "--- ipoib output:"
cat "$log"
echo "ipoib pair ($role): ok"
