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
# SIGUSR1 prints). b's sockets join two IP multicast groups on the
# interface, which its ipoib must join and leave with them; a sends to
# them (ipoib/ci/mcast-check.py). a measures iperf3 TCP each way through the interfaces and
# over the netdev (a table: both rates, their ratio, the program's datagrams
# per second and CPU per datagram) and sends b 100 MiB over TCP through the
# interfaces, checked by hash. Then b's ipoib restarts (SIGTERM, exit 0,
# started again: a new QP) while a pings it; a's entries must change to
# b's new address and its pings succeed again. The hosts order their steps
# by connecting to each other over the netdev. Each prints the times of its
# steps (`ipoib pair (ROLE): STEP at N s`). Last, each stops ipoib with SIGTERM and checks that it
# exited 0, the interface is gone and rxe0 has the kernel objects it had
# before (no PD, CQ, QP, CM id or MR left).
set -uo pipefail
role=${1:?role a or b}
if [ "$role" = a ]; then me=1 peer=2; else me=2 peer=1; fi
ifname=ipoib0
log=/tmp/ipoib-$role.log
pair="ipoib pair"
# shellcheck source=ipoib/ci/pair-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/pair-lib.sh"
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

# b serves iperf3 (one test at a time, on every address) and receives the
# transfer checked by hash.
command -v iperf3 >/dev/null || fail "no iperf3 (ci/setup.sh installs it)"
if [ "$role" = b ]; then
    python3 ipoib/ci/tcp-check.py serve "10.77.0.$me" 7800 &
    iperf3 -s -p 5201 >/tmp/iperf3-server.log 2>&1 &
    iperf_pid=$!
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
mark "pings done"

# IP multicast beyond the broadcast groups: b's sockets join 239.77.0.1 and
# ff12::77 on the interface; its ipoib must join their IPoIB groups (its
# log), a sends to both (groups it never joined), b must receive them, and
# when b's sockets close, its ipoib must leave both groups.
g4=239.77.0.1 g6=ff12::77
if [ "$role" = b ]; then
    python3 ipoib/ci/mcast-check.py recv "$ifname" "10.77.0.$me" "$g4" "$g6" 7795 >/tmp/mcast-recv.log 2>&1 &
    mc=$!
    for _ in $(seq 1 20); do
        grep -q "^ipoib: joined $g4 " "$log" && grep -q "^ipoib: joined $g6 " "$log" && break
        sleep 0.5
    done
    grep "^ipoib: joined" "$log" || fail "no group joined for the sockets' memberships"
    grep -q "^ipoib: joined $g4 (group ff12:401b:ffff::f4d:1)" "$log" || fail "$g4 not joined as its IPoIB group"
    grep -q "^ipoib: joined $g6 (group ff12:601b:ffff::77)" "$log" || fail "$g6 not joined as its IPoIB group"
    # RoCE v2 delivers a group's packets through the netdev's IPv6
    # membership of the MGID: there while joined, gone once left.
    maddr() { ip -6 maddr show dev "$RDMA_NETDEV" | grep -cE "inet6 (ff12:401b:ffff::f4d:1|ff12:601b:ffff::77)$"; }
    [ "$(maddr)" = 2 ] || fail "the netdev is not a member of both MGIDs: $(ip -6 maddr show dev "$RDMA_NETDEV")"
    tell "$RDMA_A_IPV4" 7796 || fail "host a never listened (multicast)"
    wait "$mc" || fail "multicast datagrams not received: $(cat /tmp/mcast-recv.log)"
    cat /tmp/mcast-recv.log
    for _ in $(seq 1 10); do
        grep -q "^ipoib: left $g4 " "$log" && grep -q "^ipoib: left $g6 " "$log" && break
        sleep 0.5
    done
    grep "^ipoib: left" "$log" || fail "the groups were not left when the sockets closed"
    grep -q "^ipoib: left $g4 " "$log" || fail "$g4 not left"
    grep -q "^ipoib: left $g6 " "$log" || fail "$g6 not left"
    [ "$(maddr)" = 0 ] || fail "the netdev is still a member of an MGID left: $(ip -6 maddr show dev "$RDMA_NETDEV")"
else
    listen 7796 || fail "host b did not join its groups"
    python3 ipoib/ci/mcast-check.py send "$ifname" "10.77.0.$me" "$g4" "$g6" 7795 || fail "multicast send"
fi
mark "multicast done"

# Throughput: iperf3 (TCP, 10 s each way: a to b, and b to a with -R) through
# the interfaces and over the netdev itself (its MTU 4500 against ipoib's
# 4092), a table of both and their ratio, and for ipoib the program's
# datagrams per second and CPU per datagram (its user + system time from
# /proc/PID/stat over the transfer, its counters from SIGUSR1). Only counts
# are asserted: each transfer moved bytes, and the program's counters moved
# by at least the bytes iperf3 received and that many MTU-sized datagrams.
# Then a sends b $MIB MiB through ipoib, checked by hash. a tells b when it
# is done, so that b's server stops and its bad datagrams come after.
MIB=100
# stats: ipoib's counters line, printed afresh.
stats() {
    kill -USR1 "$pid"
    sleep 1
    grep '^ipoib: Stats' "$log" | tail -1
}
# field NAME LINE: a counter of a stats line.
field() { sed -E "s/.*[{ ]$1: ([0-9]+)[,} ].*/\1/" <<<"$2"; }
# cpu: ipoib's user + system clock ticks; sys: the system ones (the
# kernel's rxe sends in the program's system calls).
cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
sys() { awk '{print $15}' "/proc/$pid/stat"; }
hz=$(getconf CLK_TCK)
# iperf NAME ARGS: iperf3 -c ARGS for 10 s; "BYTES BITS_PER_SECOND" received.
iperf() {
    local name=$1 j=/tmp/iperf-$1.json
    shift
    for _ in 1 2 3; do
        iperf3 -c "$@" -p 5201 -t 10 -J >"$j" 2>&1 && break
        sleep 2
    done
    python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))["end"]["sum_received"]
print(r["bytes"], int(r["bits_per_second"]))' "$j" || fail "iperf3 $name: $(tail -5 "$j")"
}
# through NAME DIR ARGS: iperf over ipoib, DIR (tx or rx) the direction of
# the data at a; sets bps and prints the program's rates.
through() {
    local name=$1 dir=$2 s0 s1 c0 c1 k0 k1 t0 t1 bytes dp db
    shift 2
    s0=$(stats) c0=$(cpu) k0=$(sys) t0=$(date +%s.%N)
    read -r bytes bps < <(iperf "$name" "$@")
    t1=$(date +%s.%N) c1=$(cpu) k1=$(sys) s1=$(stats)
    [ "${bytes:-0}" -gt 0 ] || fail "iperf3 $name moved no bytes"
    dp=$(($(field "$dir" "$s1") - $(field "$dir" "$s0")))
    db=$(($(field "${dir}_bytes" "$s1") - $(field "${dir}_bytes" "$s0")))
    local pk=$(($(field tx "$s1") + $(field rx "$s1") - $(field tx "$s0") - $(field rx "$s0")))
    echo "ipoib perf: $name: iperf3 received $bytes bytes; ipoib $dir $dp datagrams, $db bytes; $pk datagrams both ways, $((c1 - c0)) CPU ticks of 1/$hz s ($((k1 - k0)) in the kernel)"
    [ "$db" -ge "$bytes" ] || fail "$name: ipoib's $dir bytes moved by $db, less than iperf3's $bytes"
    [ "$dp" -ge $((bytes / 4092)) ] || fail "$name: ipoib's $dir datagrams moved by $dp, fewer than $((bytes / 4092))"
    rate=$(awk -v p="$pk" -v c=$((c1 - c0)) -v t0="$t0" -v t1="$t1" -v hz="$hz" \
        'BEGIN { printf "%.0f %.1f", p / (t1 - t0), c / hz * 1e6 / p }')
}
if [ "$role" = a ]; then
    through ipoib-a-to-b tx "10.77.0.$peer"
    ab_ipoib=$bps ab_rate=$rate
    through ipoib-b-to-a rx "10.77.0.$peer" -R
    ba_ipoib=$bps ba_rate=$rate
    read -r bytes ab_virtio < <(iperf virtio-a-to-b "$RDMA_B_IPV4")
    [ "${bytes:-0}" -gt 0 ] || fail "iperf3 over the netdev (a to b) moved no bytes"
    read -r bytes ba_virtio < <(iperf virtio-b-to-a "$RDMA_B_IPV4" -R)
    [ "${bytes:-0}" -gt 0 ] || fail "iperf3 over the netdev (b to a) moved no bytes"
    echo "ipoib perf: iperf3 TCP, 10 s each way (Mbit/s; ipoib's datagrams/s both ways, CPU us per datagram)"
    printf 'ipoib perf: %-7s %10s %10s %7s %10s %8s\n' way ipoib virtio ratio pps us/pkt
    # row WAY IPOIB_BPS VIRTIO_BPS "PPS US"
    row() {
        local pps us
        read -r pps us <<<"$4"
        awk -v w="$1" -v i="$2" -v v="$3" -v pps="$pps" -v us="$us" \
            'BEGIN { printf "ipoib perf: %-7s %10.1f %10.1f %7.3f %10s %8s\n", w, i / 1e6, v / 1e6, i / v, pps, us }'
    }
    row a-to-b "$ab_ipoib" "$ab_virtio" "$ab_rate"
    row b-to-a "$ba_ipoib" "$ba_virtio" "$ba_rate"
    mark "iperf3 done"
    s0=$(stats) c0=$(cpu)
    python3 ipoib/ci/tcp-check.py send "10.77.0.$peer" 7800 "$MIB" || fail "$MIB MiB over TCP through ipoib"
    s1=$(stats) c1=$(cpu)
    p=$(($(field tx "$s1") + $(field rx "$s1") - $(field tx "$s0") - $(field rx "$s0")))
    echo "ipoib: $p datagrams sent and received, $((c1 - c0)) CPU ticks of 1/$hz s:" \
        "$(awk -v p="$p" -v c=$((c1 - c0)) -v hz="$hz" 'BEGIN { printf "%.1f us", c / hz * 1e6 / p }') CPU per datagram"
    # The IPv6 entry, unused by the transfers, has aged out meanwhile: ping
    # again, so that both entries are there when b restarts.
    ping -c 3 -W 2 "10.77.0.$peer" >/dev/null || fail "IPv4 ping after the transfers"
    ping -6 -c 3 -W 2 "fd77::$peer" >/dev/null || fail "IPv6 ping after the transfers"
    mark "transfers done"
    tell "$RDMA_B_IPV4" 7789 || fail "host b never listened (transfers done)"
else
    listen 7789 600 || fail "host a did not report its transfers done"
    kill "$iperf_pid"
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
    mark "b restarted"
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
    mark "injected"
    tell "$RDMA_A_IPV4" 7790 || fail "host a never listened"
    sleep 3
    kill -TERM "$pid"
    wait "$pid" || fail "ipoib exited $? after SIGTERM (restart)"
    echo "--- ipoib output before the restart:"
    cat "$log"
    up "$log"
    grep "^ipoib: $ifname up" "$log"
    mark "restarted"
    tell "$RDMA_A_IPV4" 7791 || fail "host a never listened (restart)"
    listen 7792 || fail "host a did not report its pings after the restart"
fi

stop_clean
