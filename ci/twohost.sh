#!/usr/bin/env bash
# ci/twohost.sh: two VMs, two kernels, one RoCE link between them.
#
#   sudo ci/twohost.sh [--] 'CMD_A' 'CMD_B'   run one pair: CMD_A on host a, CMD_B on host b
#   sudo ci/twohost.sh --suite [FILE]         the cross-host suite (default ci/twohost-suite.sh)
#
# Boots two guests (qemu TCG, 1 vCPU and 1 GiB each, Debian's kernel through
# virtme-ng, like ci/vm.sh), wired by qemu's socket network backend over the
# host's loopback. In each guest: virtio_net up with an address, rxe0 on it (and
# siw0 on the same interface), both ports ACTIVE, the peer answering ping. Then
# every pair runs in order: CMD_A starts on host a, after RDMA_PAIR_DELAY
# seconds (default 3) CMD_B starts on host b, each bounded by the pair's
# timeout (RDMA_PAIR_TIMEOUT, default 120 s); both hosts wait for each other
# before the next pair. Prints per pair "ok" or "FAILED" with both exit codes
# (and the tails of both outputs when it failed) and a summary line
# `twohost: N ok, N failed`; exits non-zero when a pair failed, a guest's setup
# failed or a VM timed out.
#
# Commands are bash strings, run as root in the repository root with
# `ulimit -l unlimited` and: RDMA_HOST (a|b), RDMA_A_IPV4/RDMA_B_IPV4
# (203.0.113.1/.2), RDMA_A_IPV6/RDMA_B_IPV6 (fd00:3::1/::2), RDMA_A_GID/RDMA_B_GID
# (the IPv6 GIDs of rxe0, as addresses), RDMA_GID_IDX_V4 and RDMA_GID_IDX_V6
# (this host's GID indices of its IPv4-mapped and IPv6 GIDs on rxe0), RDMA_NETDEV,
# and BIN (the examples' folder, target/debug unless RDMA_BIN says otherwise).
#
# Knobs: RDMA_CI_SKIP_SETUP=1, RDMA_VM_TIMEOUT (whole run, default 900 s),
# RDMA_PAIR_TIMEOUT, RDMA_PAIR_DELAY, RDMA_TWOHOST_FILTER (suite: only the pairs
# whose name contains it), RDMA_BIN.
set -Eeuo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

A_IPV4=203.0.113.1 B_IPV4=203.0.113.2 A_IPV6=fd00:3::1 B_IPV6=fd00:3::2
# siw0 on VLAN 2 of the same link: its own subnet, so that rdma_cm picks siw0 by address.
A_SIW_IPV4=198.51.100.1 B_SIW_IPV4=198.51.100.2

# ---------------------------------------------------------------------------
# Inside a guest: ci/twohost.sh --guest ROLE RUNDIR
guest_fail() {
    echo "!! twohost guest $ROLE: $*" >&2
    touch "$RUN/$ROLE.setup-failed"
    echo 125 >"$RUN/$ROLE.status"
    exit 125
}

# The index of the RoCE v2 GID of rxe0 port 1 whose value is GID (sysfs form).
gid_index() {
    local d=/sys/class/infiniband/rxe0/ports/1 i
    for i in $(seq 0 15); do
        if [ "$(cat "$d/gids/$i" 2>/dev/null)" = "$1" ] &&
            [ "$(cat "$d/gid_attrs/types/$i" 2>/dev/null)" = "RoCE v2" ]; then
            echo "$i"
            return 0
        fi
    done
    return 1
}

# sysfs GID strings: 203.0.113.1 -> 0000:...:ffff:cb00:7101; fd00:3::1 -> fd00:0003:...:0001
gid_v4() {
    local IFS=. a b c d
    read -r a b c d <<<"$1"
    printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' "$a" "$b" "$c" "$d"
}
gid_v6() { python3 "$CI_DIR/py/netaddr.py" ipv6-exploded "$1"; }

guest_setup() {
    local self4 self6 peer4 siw4 ifc i t0 want4 want6
    t0=$(now)
    ulimit -l unlimited || guest_fail "ulimit -l unlimited failed"
    if [ "$ROLE" = a ]; then
        self4=$A_IPV4 self6=$A_IPV6 peer4=$B_IPV4 siw4=$A_SIW_IPV4
    else
        self4=$B_IPV4 self6=$B_IPV6 peer4=$A_IPV4 siw4=$B_SIW_IPV4
    fi
    modprobe -a virtio_net 8021q ib_uverbs rdma_ucm ib_umad rdma_rxe iw_cm libcrc32c ||
        guest_fail "modprobe failed"
    if [ ! -d /sys/module/siw ]; then
        local ko=${RDMA_SIW_KO:-$REPO_ROOT/target/ci/siw-$(uname -r)/siw.ko}
        insmod "$ko" || guest_fail "insmod $ko failed"
    fi
    ifc=
    for i in $(seq 1 50); do
        ifc=$(ls /sys/class/net | grep -vx lo | head -n 1 || true)
        [ -n "$ifc" ] && break
        sleep 0.2
    done
    [ -n "$ifc" ] || guest_fail "no network interface besides lo"
    ip -batch - <<EOF || guest_fail "configuring $ifc failed"
addr add $self4/24 dev $ifc
addr add $self6/64 dev $ifc nodad
link set $ifc up
link add link $ifc name $ifc.2 type vlan id 2
addr add $siw4/24 dev $ifc.2
link set $ifc.2 up
EOF
    rdma link add rxe0 type rxe netdev "$ifc" || guest_fail "rdma link add rxe0 netdev $ifc failed"
    rdma link add siw0 type siw netdev "$ifc.2" || guest_fail "rdma link add siw0 netdev $ifc.2 failed"
    want4=$(gid_v4 "$self4") want6=$(gid_v6 "$self6")
    for i in $(seq 1 150); do
        if grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state &&
            grep -q ACTIVE /sys/class/infiniband/siw0/ports/1/state &&
            gid_index "$want4" >/dev/null && gid_index "$want6" >/dev/null; then
            break
        fi
        sleep 0.2
    done
    RDMA_GID_IDX_V4=$(gid_index "$want4") || guest_fail "rxe0 has no GID $want4"
    RDMA_GID_IDX_V6=$(gid_index "$want6") || guest_fail "rxe0 has no GID $want6"
    echo "twohost guest $ROLE: $ifc $self4 $self6, rxe0 GID index v4 $RDMA_GID_IDX_V4 v6 $RDMA_GID_IDX_V6 ($(elapsed "$t0") s)"
    # The peer: wait until it answers (its boot may take longer than ours).
    for i in $(seq 1 240); do
        ping -c 1 -W 1 "$peer4" >/dev/null 2>&1 && break
        sleep 0.5
    done
    ping -c 1 -W 2 "$peer4" >/dev/null 2>&1 || guest_fail "the peer $peer4 does not answer ping"
    echo "twohost guest $ROLE: peer $peer4 answers ($(elapsed "$t0") s)"
    export RDMA_HOST=$ROLE RDMA_NETDEV=$ifc RDMA_GID_IDX_V4 RDMA_GID_IDX_V6
    export RDMA_A_IPV4=$A_IPV4 RDMA_B_IPV4=$B_IPV4 RDMA_A_IPV6=$A_IPV6 RDMA_B_IPV6=$B_IPV6
    export RDMA_A_GID=$A_IPV6 RDMA_B_GID=$B_IPV6 RDMA_A_SIW_IPV4=$A_SIW_IPV4 RDMA_B_SIW_IPV4=$B_SIW_IPV4
}

# wait_file PATH SECONDS: 0 once PATH exists, 1 after SECONDS.
wait_file() {
    local i n=$(($2 * 5))
    for ((i = 0; i < n; i++)); do
        [ -e "$1" ] && return 0
        sleep 0.2
    done
    [ -e "$1" ]
}

guest() {
    ROLE=$1 RUN=$2
    local peer n i name cmd_a cmd_b tmo rc pid
    [ "$ROLE" = a ] && peer=b || peer=a
    guest_setup
    export BIN=${RDMA_BIN:-$REPO_ROOT/target/debug}
    cd "$REPO_ROOT"
    n=$(wc -l <"$RUN/pairs.tsv")
    for ((i = 1; i <= n; i++)); do
        IFS=$'\t' read -r name tmo cmd_a cmd_b < <(sed -n "${i}p" "$RUN/pairs.tsv")
        echo "== twohost guest $ROLE: pair $i/$n $name"
        rc=0
        if [ "$ROLE" = a ]; then
            timeout -k 5 "$tmo" bash -c "$cmd_a" >"$RUN/$i.a.log" 2>&1 &
            pid=$!
            sleep "${RDMA_PAIR_DELAY:-3}"
            touch "$RUN/$i.a.started"
            wait "$pid" || rc=$?
        else
            # Host a started its side (or already ended).
            wait_file "$RUN/$i.a.started" 300 || echo "host a never started pair $i" >>"$RUN/$i.b.log"
            timeout -k 5 "$tmo" bash -c "$cmd_b" >>"$RUN/$i.b.log" 2>&1 || rc=$?
        fi
        echo "$rc" >"$RUN/$i.$ROLE.rc"
        echo "   $name on $ROLE: exit $rc"
        # Both hosts finish the pair before either starts the next one.
        wait_file "$RUN/$i.$peer.rc" $((tmo + 300)) || echo "   host $peer did not finish pair $i"
    done
    echo 0 >"$RUN/$ROLE.status"
}

if [ "${1:-}" = --guest ]; then
    guest "$2" "$3"
    exit 0
fi

# ---------------------------------------------------------------------------
# On the host.
if [ "${1:-}" = -- ]; then shift; fi
if [ "$#" -eq 0 ] || [ "$1" = -h ] || [ "$1" = --help ]; then
    sed -n '2,30s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
    [ "$#" -eq 0 ] && exit 2
    exit 0
fi
cd "$REPO_ROOT"
ci_setup
ensure_target_dir
rm -f "$CI_WORK/twohost.summary"
RUN_DIR=$(new_run_dir twohost)
PAIRS="$RUN_DIR/pairs.tsv"
: >"$PAIRS"
# pair NAME CMD_A CMD_B [TIMEOUT]: one line of the pairs table.
pair() {
    if [ -n "${RDMA_TWOHOST_FILTER:-}" ] && [[ "$1" != *"$RDMA_TWOHOST_FILTER"* ]]; then return 0; fi
    printf '%s\t%s\t%s\t%s\n' "$1" "${4:-${RDMA_PAIR_TIMEOUT:-120}}" "$2" "$3" >>"$PAIRS"
}
if [ "$1" = --suite ]; then
    step "build the examples (cargo build -p rdma-examples)"
    cargo_cmd build -p rdma-examples
    source "${2:-$CI_DIR/twohost-suite.sh}"
else
    [ "$#" -eq 2 ] || die "usage: ci/twohost.sh [--] 'CMD_A' 'CMD_B'  |  ci/twohost.sh --suite"
    pair pair "$1" "$2"
fi
[ -s "$PAIRS" ] || die "no pairs to run (RDMA_TWOHOST_FILTER=${RDMA_TWOHOST_FILTER:-})"
NPAIRS=$(wc -l <"$PAIRS")

KVER=$(detect_kver)
[ -n "$KVER" ] || die "no Debian kernel found (run ci/setup.sh)"
VNG=$(find_vng) || die "vng not found (run ci/setup.sh)"
TMO=${RDMA_VM_TIMEOUT:-900}

# A free TCP port on the loopback for the link.
LINK_PORT=$(python3 "$CI_DIR/py/netaddr.py" free-port)

# boot ROLE NETDEV-OPTS MAC: one guest in the background; its console in ROLE.console.log.
boot() {
    local role=$1 net=$2 mac=$3
    printf 'export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$PATH\n' >"$RUN_DIR/$role.sh"
    while IFS= read -r v; do
        printf 'export %s=%q\n' "$v" "${!v}" >>"$RUN_DIR/$role.sh"
    done < <(compgen -e | grep -E '^(RUST_[A-Z_]+|RDMA_PAIR_DELAY|RDMA_SIW_KO|RDMA_BIN)$' || true)
    printf 'bash %q --guest %s %q\n' "$CI_DIR/twohost.sh" "$role" "$RUN_DIR" >>"$RUN_DIR/$role.sh"
    # timeout runs in its own process group: stopping it stops vng and qemu.
    (
        timeout -k 20 "$TMO" "$VNG" --run "/boot/vmlinuz-$KVER" --disable-kvm --name "rdma-$role" \
            --memory 1G --cpus 1 --user root --rwdir "$RUN_DIR" \
            --qemu-opts="-netdev socket,id=n1,$net -device virtio-net-pci,netdev=n1,mac=$mac" \
            --exec "bash $RUN_DIR/$role.sh" </dev/null 2>&1 &
        echo "$!" >"$RUN_DIR/$role.timeout.pid"
        if wait "$!"; then rc=0; else rc=$?; fi
        echo "$rc" >"$RUN_DIR/$role.vng.rc"
    ) | tee "$RUN_DIR/$role.console.log" | sed -u "s/^/[$role] /" &
}

vm_lock
step "two VMs: $NPAIRS pair(s), link on 127.0.0.1:$LINK_PORT, run dir $RUN_DIR"
T0=$(now)
boot a "listen=127.0.0.1:$LINK_PORT" 52:54:00:00:77:01
PID_A=$!
# Host b's qemu connects to a's listening socket: wait until it listens.
for _ in $(seq 1 300); do
    ss -ltn 2>/dev/null | grep -q "127.0.0.1:$LINK_PORT " && break
    sleep 0.1
done
boot b "connect=127.0.0.1:$LINK_PORT" 52:54:00:00:77:02
PID_B=$!
stop_vms() {
    trap - INT TERM HUP
    echo "!! twohost.sh: interrupted: stopping both VMs" >&2
    local role pid
    for role in a b; do
        pid=$(cat "$RUN_DIR/$role.timeout.pid" 2>/dev/null || true)
        [ -z "$pid" ] || kill -TERM "$pid" 2>/dev/null || true
    done
    wait 2>/dev/null || true
    exit 130
}
trap stop_vms INT TERM HUP
wait "$PID_A" || true
wait "$PID_B" || true
trap - INT TERM HUP
exec 9>&-
SECONDS_VM=$(elapsed "$T0")
chown_to_invoker "$RUN_DIR"

step "results"
FAIL=()
for role in a b; do
    rc=$(status_of "$RUN_DIR/$role.vng.rc")
    st=$(status_of "$RUN_DIR/$role.status")
    if timed_out "$rc"; then FAIL+=("host $role: the VM timed out after $TMO s (RDMA_VM_TIMEOUT)"); fi
    if [ -f "$RUN_DIR/$role.setup-failed" ]; then
        FAIL+=("host $role: guest setup failed (see $RUN_DIR/$role.console.log)")
    elif [ "$st" != 0 ]; then
        FAIL+=("host $role: no status from the guest (vng exit ${rc:-none}; see $RUN_DIR/$role.console.log)")
    fi
done
OK=0 BAD=0
for ((i = 1; i <= NPAIRS; i++)); do
    IFS=$'\t' read -r name _ _ _ < <(sed -n "${i}p" "$PAIRS")
    ra=$(status_of "$RUN_DIR/$i.a.rc")
    rb=$(status_of "$RUN_DIR/$i.b.rc")
    if [ "$ra" = 0 ] && [ "$rb" = 0 ]; then
        OK=$((OK + 1))
        printf 'pair %-40s ok\n' "$name"
    else
        BAD=$((BAD + 1))
        printf 'pair %-40s FAILED (host a exit %s, host b exit %s)\n' "$name" "${ra:-none}" "${rb:-none}"
        for role in a b; do
            echo "  --- host $role, last lines of $RUN_DIR/$i.$role.log:"
            tail -n 15 "$RUN_DIR/$i.$role.log" 2>/dev/null | sed 's/^/  | /' || true
        done
        FAIL+=("pair $name failed")
    fi
done
echo "twohost: two VMs ran for ${SECONDS_VM} s; logs: $RUN_DIR"
echo "twohost: $OK ok, $BAD failed" | tee "$CI_WORK/twohost.summary"
if [ "${#FAIL[@]}" -gt 0 ]; then
    printf '!! twohost.sh: %s\n' "${FAIL[@]}" >&2
    exit 1
fi
