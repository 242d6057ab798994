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
# SIGUSR1 prints), waits for the other host to be done (b connects to a over
# the netdev when its pings are over), then stops ipoib with SIGTERM and
# checks it exited 0 and the interface is gone.
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
modprobe tun || fail "modprobe tun"
[ -c /dev/net/tun ] || fail "no /dev/net/tun"
ip link set "$RDMA_NETDEV" mtu 4500 || fail "netdev MTU"
trap 'ip link set "$RDMA_NETDEV" mtu 1500' EXIT
sleep 1
"$BIN/ipoib" -d rxe0 --ip "10.77.0.$me/24" --ip6 "fd77::$me/64" --name "$ifname" >"$log" 2>&1 &
pid=$!
for _ in $(seq 1 60); do
    grep -q "^ipoib: $ifname up, lladdr " "$log" && break
    kill -0 "$pid" 2>/dev/null || fail "ipoib exited before it was up"
    sleep 0.5
done
grep "^ipoib: $ifname up, lladdr " "$log" || fail "no up line in 30 s"
ip addr show "$ifname"

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

# Both hosts' pings are over before either stops.
if [ "$role" = a ]; then
    python3 -c 'import socket; s = socket.create_server(("", 7790)); s.settimeout(120); s.accept()' ||
        fail "host b did not report its pings done"
else
    ok=
    for _ in $(seq 1 120); do
        if python3 -c "import socket; socket.create_connection(('$RDMA_A_IPV4', 7790), timeout=2)" 2>/dev/null; then
            ok=1
            break
        fi
        sleep 1
    done
    [ -n "$ok" ] || fail "host a never listened"
fi

kill -TERM "$pid"
wait "$pid"
rc=$?
pid=
[ "$rc" = 0 ] || fail "ipoib exited $rc after SIGTERM"
if ip link show "$ifname" >/dev/null 2>&1; then fail "$ifname left behind"; fi
echo "--- ipoib output:"
cat "$log"
echo "ipoib pair ($role): ok"
