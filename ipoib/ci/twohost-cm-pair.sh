#!/usr/bin/env bash
# ipoib/ci/twohost-cm-pair.sh ROLE: one host's side of the pair
# ipoib/connected-ping of ci/twohost-suite.sh (in the guests of
# ci/twohost.sh, with its environment: RDMA_{A,B}_IPV4, RDMA_NETDEV, BIN).
#
# Connected mode (RFC 4755) on rxe0; siw0 is not used: siw has no UD, and
# connected mode still needs the UD QP for ARP and neighbour discovery.
# Host a is 10.77.0.1/24 and fd77::1/64, b .2 and ::2. Both start ipoib
# with --mode connected (MTU 65,520) and ping each other with 8,000-byte
# payloads over IPv4 and IPv6, longer than a datagram (rxe's port MTU 4096
# less the header): each must have made a connection and accepted one, and
# the connections' counters must show the pings' bytes. Then b restarts in
# datagram mode while a stays in connected mode (fallback): a's entry for
# b changes (and its connection to b goes), and pings of 8,000 bytes both
# ways still get through: a answers its kernel's packets too long for a
# datagram with "fragmentation needed" / "packet too big" (its too_big
# counter), after which the kernels fragment. Before that, b connects to a
# with bad input (see below). Last, each stops ipoib with
# SIGTERM: exit 0, the interface gone, rxe0's kernel objects as before.
set -uo pipefail
role=${1:?role a or b}
if [ "$role" = a ]; then me=1 peer=2; else me=2 peer=1; fi
ifname=ipoib0
log=/tmp/ipoib-cm-$role.log
pair="ipoib connected pair"
# shellcheck source=ipoib/ci/pair-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/pair-lib.sh"
# up MODE MTU: start ipoib in MODE, wait for its up line, check its MTU.
up() {
    "$BIN/ipoib" -d rxe0 --ip "10.77.0.$me/24" --ip6 "fd77::$me/64" --name "$ifname" --mode "$1" >>"$log" 2>&1 &
    pid=$!
    for _ in $(seq 1 60); do
        if grep -q "^ipoib: $ifname up, lladdr .*, $1 mode, MTU $2$" "$log"; then
            ip link show "$ifname" | grep -q " mtu $2 " || fail "$ifname's MTU is not $2"
            return 0
        fi
        kill -0 "$pid" 2>/dev/null || fail "ipoib exited before it was up"
        sleep 0.5
    done
    fail "no up line ($1 mode, MTU $2) in 30 s"
}
# stats: the link's and the connections' counters lines, printed afresh.
stats() {
    kill -USR1 "$pid"
    sleep 1
    grep -E '^ipoib: (Stats|RcStats)' "$log" | tail -2 | tr '\n' ' '
}
# field NAME LINE: a counter (the first of that name: Stats before RcStats).
field() { sed -E "s/^[^{]*\{[^}]*[{ ]$1: ([0-9]+)[,} ].*/\1/" <<<"$2"; }
rcfield() { sed -E "s/.*RcStats \{[^}]*[{ ]$1: ([0-9]+)[,} ].*/\1/" <<<"$2"; }
# pings FAMILY COUNT: COUNT pings of 8,000 bytes to the peer, after up to
# 3 that may be lost (the first packets of a connection being made are
# held; a path MTU being learnt loses one).
pings() {
    local dst=10.77.0.$peer
    [ "$1" = 6 ] && dst=fd77::$peer
    for _ in 1 2 3; do ping "-$1" -c 1 -W 2 -s 8000 "$dst" | grep -E 'bytes from|received' && break; done
    ping "-$1" -c "$2" -W 2 -s 8000 "$dst" || fail "IPv$1 ping -s 8000 to $dst"
}
objects0=$(objects)

modprobe tun || fail "modprobe tun"
ip link set "$RDMA_NETDEV" mtu 4500 || fail "netdev MTU"
trap 'ip link set "$RDMA_NETDEV" mtu 1500' EXIT
sleep 1
: >"$log"
up connected 65520
for _ in $(seq 1 60); do ping -c 1 -W 1 "10.77.0.$peer" >/dev/null && break; done
for _ in $(seq 1 30); do ping -6 -c 1 -W 1 "fd77::$peer" >/dev/null && break; done
s0=$(stats)
pings 4 3
pings 6 3
s1=$(stats)
echo "$s1"
for f in connected accepted; do
    [ "$(rcfield $f "$s1")" -ge 1 ] || fail "no connection $f: $s1"
done
rx=$(($(rcfield rx_bytes "$s1") - $(rcfield rx_bytes "$s0")))
tx=$(($(rcfield tx_bytes "$s1") - $(rcfield tx_bytes "$s0")))
echo "ipoib: the connections carried $tx bytes out, $rx in during the pings"
# 6 requests out and 6 replies in, 8,028 bytes and more each (the 8,000
# bytes, the ICMP and IP headers, the 4-byte encapsulation).
[ "$tx" -ge $((6 * 8032)) ] || fail "the connections sent $tx bytes, fewer than the pings'"
[ "$rx" -ge $((6 * 8032)) ] || fail "the connections received $rx bytes, fewer than the pings'"
grep "^ipoib: connected to " "$log" || fail "no connection line"
mark "connected-mode pings done"

# b's ipoib-cm-inject (ipoib/src/bin/ipoib-cm-inject.rs) then connects to
# a as a hostile peer: two requests with bad private data (rejected), and
# on a connection it may make, four messages a must drop (each counted by
# its reason) and one longer than a's receive buffers (a closes that
# connection); a's own connection to b carries on.
if [ "$role" = a ]; then
    listen 7793 || fail "host b did not report its pings and bad input done"
    s=$(stats)
    echo "$s"
    for want in "short: 1" "ether_type: 1" "ip: 1" "forged: 1"; do
        grep -qE "[ {]${want}[, ]" <<<"${s#*Drops}" || fail "bad input: want $want in ${s#*Drops}"
    done
    [ "$(rcfield rejected "$s")" = 2 ] || fail "bad requests: want 2 rejected: $s"
    [ "$(rcfield rx_errors "$s")" = 1 ] || fail "the long message: want 1 rx_errors: $s"
    grep -q "^ipoib: accepted connection failed" "$log" || fail "the failed connection was not closed"
    grep -E '^ipoib: [0-9]+ accepted connections up' "$log" | tail -1 | grep -q '^ipoib: 1 accepted' ||
        fail "b's connection to a did not stay up beside the failed one"
    pings 4 2
    mark "bad input counted"
    tell "$RDMA_B_IPV4" 7797 || fail "host b never listened (bad input counted)"
    listen 7794 || fail "host b did not restart in datagram mode"
    s0=$(stats)
    echo "$s0"
    [ "$(field too_big "$s0")" = 0 ] || fail "too-big answers before the fallback: $s0"
    pings 4 3
    s1=$(stats)
    pings 6 3
    s2=$(stats)
    echo "$s2"
    grep "^ipoib: neighbour 10.77.0.$peer lladdr 00:.* (was 80:" "$log" ||
        fail "the IPv4 entry did not change to the datagram-mode address"
    tb4=$(field too_big "$s1") tb6=$(($(field too_big "$s2") - $(field too_big "$s1")))
    echo "ipoib: packets too big for a datagram answered: $tb4 IPv4, $tb6 IPv6"
    if [ "$tb4" -lt 1 ] || [ "$tb6" -lt 1 ]; then fail "no too-big answer for each family: $tb4 and $tb6"; fi
    tell "$RDMA_B_IPV4" 7795 || fail "host b never listened"
    listen 7796 || fail "host b did not report its fallback pings done"
    mark "fallback pings done"
else
    lla=$(sed -nE "s/^ipoib: neighbour 10.77.0.$peer lladdr ([0-9a-f:]+)$/\1/p" "$log" | tail -1)
    "$BIN/ipoib-cm-inject" --to "$lla" || fail "ipoib-cm-inject to $lla"
    mark "bad input sent"
    tell "$RDMA_A_IPV4" 7793 || fail "host a never listened"
    listen 7797 || fail "host a did not report the bad input counted"
    kill -TERM "$pid"
    wait "$pid" || fail "ipoib exited $? after SIGTERM (restart)"
    echo "--- ipoib output before the restart:"
    cat "$log"
    [ "$(objects)" = "$objects0" ] || fail "kernel objects left after the restart: $(objects)"
    up datagram 4092
    mark "restarted in datagram mode"
    tell "$RDMA_A_IPV4" 7794 || fail "host a never listened (restart)"
    listen 7795 || fail "host a did not report its fallback pings"
    pings 4 3
    pings 6 3
    tell "$RDMA_A_IPV4" 7796 || fail "host a never listened (fallback pings)"
    mark "fallback pings done"
fi

stop_clean
