# shellcheck shell=bash
# shellcheck disable=SC2154 # $pair, $role, $log, $objects0: set by the sourcing script
# ipoib/ci/pair-lib.sh: what the two ipoib pair scripts (twohost-pair.sh,
# twohost-cm-pair.sh) share, sourced by each after it has set $pair (its
# name in messages: "ipoib pair", "ipoib connected pair"), $role, $ifname
# and $log (the program's output), and $pid while the program runs.

fail() {
    echo "!! $pair ($role): $*"
    echo "--- ipoib output:"
    cat "$log" 2>/dev/null
    [ -z "${pid:-}" ] || kill -TERM "$pid" 2>/dev/null
    exit 1
}
# listen PORT [SECONDS]: wait (120 s unless told) for the other host to
# connect; tell HOST PORT: connect to it (retrying for 120 s). The hosts'
# steps in order.
listen() {
    python3 -c "import socket; s = socket.create_server(('', $1)); s.settimeout(${2:-120}); s.accept()"
}
tell() {
    local _
    for _ in $(seq 1 120); do
        python3 -c "import socket; socket.create_connection(('$1', $2), timeout=2)" 2>/dev/null && return 0
        sleep 1
    done
    return 1
}
# mark WHAT: the time since the script started, for the pair's length.
mark() { echo "$pair ($role): $* at ${SECONDS} s"; }
# The kernel objects of rxe0 (PDs, CQs, QPs, CM ids, MRs, contexts).
objects() { rdma res show | grep -E '^[0-9]+: rxe0:'; }

# stop_clean: the last step of either side: SIGTERM to the program, which
# must exit 0, leave no interface and leave rxe0's kernel objects as
# $objects0 had them.
stop_clean() {
    kill -TERM "$pid"
    wait "$pid"
    local rc=$?
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
    mark "stopped"
    echo "$pair ($role): ok"
}
