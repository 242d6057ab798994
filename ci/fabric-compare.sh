#!/usr/bin/env bash
# ci/fabric-compare.sh: the diagnostic examples against the C tools of infiniband-diags
# on a simulated fabric. Run inside one:
#
#   ci/fabric.sh --net NAME -- bash ci/fabric-compare.sh [--speed] [--only REGEX]
#
# For each comparison the C tool and our example (target/debug/<tool>, or
# RDMA_EXAMPLES_BIN=DIR) run the same query, both under the LD_PRELOAD of umad2sim
# that fabric.sh sets, from a scratch folder (umad2sim writes its fake sysfs into the
# working directory). Their stdout and exit status are compared line by line after
# normalizing only values that change between runs (each comparison names its own):
#   - sminfo's activity count (the SM increments it as it sweeps);
#   - the traffic counters (PortXmitData/RcvData/XmitPkts/RcvPkts and their extended
#     and unicast forms) of ports that the queries themselves cross, which every MAD
#     of both tools increments;
#   - ibnetdiscover's "generated on DATE" header line.
# Prints "compare NAME: ok" or "compare NAME: FAILED" with a unified diff, and at
# the end "compare: N ok, N failed"; exits 1 on any failure.
#
# --speed: the directed-route sweep (ibnetdiscover) by the C tool and by ours, 5
# runs each alternating, and the ratio of the medians (ours / C's), instead of the
# comparisons, and where our time goes (RDMA_IBNETDISCOVER_STATS: SMPs sent, time to
# open the port, time of the sweep itself). --only REGEX: only the comparisons whose
# names match. Our examples: RDMA_EXAMPLES_BIN, else $CARGO_TARGET_DIR/debug or
# target/debug.
#
#   ci/fabric-compare.sh --roundtrip NAME   # NOT inside a fabric: it starts two
#
# --roundtrip: our ibnetdiscover on topology NAME (a fabric of its own), its output
# fed to ibsim as the net file of a second fabric, discovered again by ours and by
# the C tool; the graphs (nodes by GUID with type and port count, links between
# GUID/port pairs) must be the same. NodeDescriptions are not part of the graph:
# ibsim names a node after its id in the net file ("S-<guid>").
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=$(realpath "${RDMA_EXAMPLES_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/debug}")
SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/fabric-compare.XXXXXX")
# RDMA_COMPARE_KEEP=DIR keeps every output (NAME.c, NAME.rust, their .err) there.
keep() {
    if [ -n "${RDMA_COMPARE_KEEP:-}" ]; then
        mkdir -p "$RDMA_COMPARE_KEEP" && cp "$SCRATCH"/*.c "$SCRATCH"/*.rust "$SCRATCH"/*.err "$RDMA_COMPARE_KEEP"/ 2>/dev/null
    fi
    rm -rf "$SCRATCH"
}
trap keep EXIT
MODE=compare ONLY= RT_NET=
while [ $# -gt 0 ]; do
    case "$1" in
    --speed) MODE=speed; shift ;;
    --roundtrip) MODE=roundtrip; RT_NET=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -u/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "fabric-compare.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
GENERATED='s/^# Topology file: generated on .*/# Topology file: generated on DATE/'

# graph FILE: the graph of a topology file, one canonical line per node and link.
graph() {
    python3 "$ROOT/ci/py/net_graph.py" "$1"
}

roundtrip() {
    local fabric="$ROOT/ci/fabric.sh" first="$SCRATCH/first.net" rc=0
    (cd "$SCRATCH" && bash "$fabric" --net "$RT_NET" -- "$BIN/ibnetdiscover") >"$first" 2>"$first.err" || rc=$?
    if [ "$rc" != 0 ] || ! grep -q '^Switch\|^Ca' "$first"; then
        echo "compare roundtrip-$RT_NET: FAILED (the first discovery, exit status $rc)"
        tail -n 5 "$first.err"
        return 1
    fi
    (cd "$SCRATCH" && bash "$fabric" --net "$first" -- bash -c '"$1/ibnetdiscover" >second.rust 2>second.rust.err; ibnetdiscover >second.c 2>second.c.err' _ "$BIN") >"$SCRATCH/second.log" 2>&1 || rc=$?
    graph "$first" >"$SCRATCH/first.graph"
    local ok=0 which
    for which in rust c; do
        graph "$SCRATCH/second.$which" >"$SCRATCH/second.$which.graph"
        if [ -s "$SCRATCH/first.graph" ] && diff -u --label "first discovery (ours) of $RT_NET" --label "second discovery ($which) of that output" "$SCRATCH/first.graph" "$SCRATCH/second.$which.graph" >"$SCRATCH/rt.diff"; then
            echo "compare roundtrip-$RT_NET-$which: ok ($(grep -c '^node' "$SCRATCH/first.graph") nodes, $(grep -c '^link' "$SCRATCH/first.graph") links)"
        else
            echo "compare roundtrip-$RT_NET-$which: FAILED"
            head -n 40 "$SCRATCH/rt.diff"
            tail -n 5 "$SCRATCH/second.log"
            ok=1
        fi
    done
    # On the second fabric, our output and the C tool's, line by line.
    sed -i -E "$GENERATED" "$SCRATCH/second.rust" "$SCRATCH/second.c"
    if diff -u --label "C ibnetdiscover on the round-tripped $RT_NET" --label "ours" "$SCRATCH/second.c" "$SCRATCH/second.rust" >"$SCRATCH/rt.diff"; then
        echo "compare roundtrip-$RT_NET-text: ok"
    else
        echo "compare roundtrip-$RT_NET-text: FAILED"
        head -n 40 "$SCRATCH/rt.diff"
        ok=1
    fi
    return "$ok"
}

if [ "$MODE" = roundtrip ]; then
    roundtrip
    exit $?
fi

[ -n "${RDMA_FABRIC:-}" ] || { echo "fabric-compare.sh: run me inside ci/fabric.sh (RDMA_FABRIC is not set)" >&2; exit 2; }
for t in perfquery smpquery sminfo saquery ibnetdiscover; do
    [ -x "$BIN/$t" ] || echo "fabric-compare.sh: $BIN/$t is missing (cargo build -p rdma-examples): its comparisons fail" >&2
done
NAME=${RDMA_FABRIC_NAME:-fabric}
N_OK=0 N_FAIL=0

# run_tool OUT PROG ARGS...: PROG's stdout into OUT, its exit status as a last line.
run_tool() {
    local out=$1 rc=0
    shift
    (cd "$SCRATCH" && "$@" >"$out" 2>"$out.err") || rc=$?
    echo "exit status $rc" >>"$out"
}

# compare NAME SED TOOL ARGS...: the C TOOL and ours with ARGS; SED (a sed script,
# or @FUNCTION to run FUNCTION FILE on each; may be empty) normalizes both outputs
# before the diff. EXPECT_RC=N: the C tool must also exit with N, for the
# comparisons that need the SM (two tools that both found no SM to answer
# would compare alike and prove nothing) and those of a known error. Without
# it, the comparison of an error path that depends on the topology (a
# directed route through a port with no link) checks only the likeness.
compare() {
    local name=$1 sed_expr=$2 tool=$3 want=${EXPECT_RC:-}
    shift 3
    if [ -n "$ONLY" ] && ! [[ "$name" =~ $ONLY ]]; then return 0; fi
    local c="$SCRATCH/$name.c" r="$SCRATCH/$name.rust"
    run_tool "$c" "$tool" "$@"
    run_tool "$r" "$BIN/$tool" "$@"
    if [ -n "$want" ] && [ "$(tail -n 1 "$c")" != "exit status $want" ]; then
        echo "compare $name: FAILED (the C $tool $*: $(tail -n 1 "$c"), expected $want)"
        sed 's/^/    C stderr: /' "$c.err" | grep -v 'sim_connect: attached' | head -n 5
        N_FAIL=$((N_FAIL + 1))
        return
    fi
    case "$sed_expr" in
    "") ;;
    @*) "${sed_expr#@}" "$c" && "${sed_expr#@}" "$r" ;;
    *) sed -i -E "$sed_expr" "$c" "$r" ;;
    esac
    if diff -u --label "C $tool $*" --label "ours $tool $*" "$c" "$r" >"$SCRATCH/$name.diff"; then
        echo "compare $name: ok"
        N_OK=$((N_OK + 1))
    else
        echo "compare $name: FAILED"
        cat "$SCRATCH/$name.diff"
        sed 's/^/    C stderr: /' "$c.err" | grep -v 'sim_connect: attached' | head -n 5
        sed 's/^/    our stderr: /' "$r.err" | head -n 5
        N_FAIL=$((N_FAIL + 1))
    fi
}

# Traffic counters that the queries increment.
TRAFFIC='s/^((Port(Unicast|Multicast)?(Xmit|Rcv)(Data|Pkts)):\.*)[0-9]+$/\1N/'
ACTIVITY='s/activity count [0-9]+/activity count N/'

# The third PathRecord of a GetTable answer that filled the MAD: umad2sim hands
# over 256 bytes of which the last 16 (from byte 240: that record's PacketLifeTime,
# Preference and Reserved) are not what the SA sent but whatever its buffer held
# (different in every run, for the C tool as for ours).
path_tail() {
    awk '/^PathRecord dump:/ { n++ }
        n == 3 && /^\t\t(pkt_life|preference|resv2)\./ { sub(/\.[0-9A-Fa-fx]+$/, ".X") }
        { print }' "$1" >"$1.norm" && mv "$1.norm" "$1"
}

# The same for LinkRecords (8 bytes each): the 24th and 25th of a full MAD lie in
# those last 16 bytes.
link_tail() {
    awk '/^LinkRecord dump:/ { n++ }
        n >= 24 && /^\t\t[A-Za-z]+\./ { sub(/\.[0-9]+$/, ".X") }
        { print }' "$1" >"$1.norm" && mv "$1.norm" "$1"
}

# net_nodes KINDS: the names of the net file's nodes whose kind matches the
# regex KINDS (Switch, Ca, Hca), in file order.
net_nodes() {
    sed -nE "s/^($1)[ \t]+[0-9]+[ \t]+\"([^\"]+)\".*/\2/p" "$RDMA_FABRIC_NET"
}

# ca_node N: the name of the Nth CA of the net file (-1: the last).
ca_node() {
    if [ "$1" = -1 ]; then net_nodes 'Ca|Hca' | tail -n 1; else net_nodes 'Ca|Hca' | sed -n "$1p"; fi
}

# first_node: the name of the net file's first node (where fabric.sh runs the SM).
first_node() {
    net_nodes 'Switch|Ca|Hca' | head -n 1
}

# node_lid NODE: the LID of NODE's port, as a tool attached there reads it.
node_lid() {
    [ -n "$1" ] || return 0
    (cd "$SCRATCH" && SIM_HOST=$1 smpquery -D portinfo 0 2>/dev/null) | sed -nE 's/^Lid:\.*([0-9]+)$/\1/p'
}

# Round-trip times of ibping.
PINGTIME='s/time [0-9]+\.[0-9]{3} ms/time T ms/; s/time [0-9]+ ms$/time T ms/; s|^rtt min/avg/max = .*|rtt min/avg/max = T|'

# ibping: under ibsim a request to QP1 reaches only a client that is its node's SM
# (on a node where no SM runs). Our server claims that role (--sm: the issm device,
# as OpenSM opens it, once its agents are registered) at the last CA of the net
# file, and the C client and ours ping it; the C client must get its pongs. (The C
# server cannot be used: made the node's SM with SIM_SET_ISSM=1, umad2sim crashes it
# on the first SMP that OpenSM sends it, for which it has no agent.)
ping_comparisons() {
    local node lid srv
    if [ -n "$ONLY" ] && ! [[ ibping =~ $ONLY ]]; then return 0; fi
    node=$(ca_node -1)
    lid=$(node_lid "$node")
    if [ -z "$node" ] || [ -z "$lid" ]; then
        echo "compare ibping: FAILED (no CA, or no LID of CA '$node', in $RDMA_FABRIC_NET)"
        N_FAIL=$((N_FAIL + 1))
        return
    fi
    (cd "$SCRATCH" && SIM_HOST=$node exec "$BIN/ibping" -S --sm >"$SCRATCH/ibping-server.log" 2>&1) &
    srv=$!
    sleep 0.5
    compare ibping "$PINGTIME" ibping -c 2 "$lid"
    compare ibping-flood "$PINGTIME" ibping -f -c 20 "$lid"
    if ! grep -q '^2 packets transmitted, 2 received' "$SCRATCH/ibping.c"; then
        echo "compare ibping-pongs: FAILED (the C client got no pong from our server at $node, lid $lid)"
        sed 's/^/    /' "$SCRATCH/ibping.c" "$SCRATCH/ibping-server.log" | head -n 10
        N_FAIL=$((N_FAIL + 1))
    else
        echo "compare ibping-pongs: ok"
        N_OK=$((N_OK + 1))
    fi
    kill "$srv" 2>/dev/null
    wait "$srv" 2>/dev/null
}

# A node name that saquery can look up (for the queries by node name): the
# NodeDescription of the first NodeRecord of the SA's table. Under umad2sim a
# GetTable answer is cut to one MAD, so the tools see only the first records;
# a name beyond them is not found by either (exit status 64).
saquery_name() {
    (cd "$SCRATCH" && saquery NodeRecord 2>/dev/null) | sed -n 's/^[[:space:]]*NodeDescription\.*//p' | head -n 1
}

comparisons() {
    local sm=${RDMA_FABRIC_SM_LID:-1}
    compare perfquery "$TRAFFIC" perfquery
    compare perfquery-lid "$TRAFFIC" perfquery "$sm" 1
    compare perfquery-x "$TRAFFIC" perfquery -x
    compare perfquery-x-lid "$TRAFFIC" perfquery -x "$sm" 1
    compare perfquery-a "$TRAFFIC" perfquery -a "$sm"
    compare perfquery-l "$TRAFFIC" perfquery -l "$sm"
    # -r resets after reading, so the second reader sees what came after the
    # first: both start from counters reset here (errors a test left, such as
    # the discards of a link taken down, would otherwise differ).
    (cd "$SCRATCH" && perfquery -R "$sm" 1 >/dev/null 2>&1) || true
    compare perfquery-r "$TRAFFIC" perfquery -r "$sm" 1
    compare perfquery-R "" perfquery -R "$sm" 1
    compare perfquery-x-a "$TRAFFIC" perfquery -x -a "$sm"
    compare perfquery-x-l "$TRAFFIC" perfquery -x -l "$sm"
    (cd "$SCRATCH" && perfquery -x -R "$sm" 1 >/dev/null 2>&1) || true
    compare perfquery-x-r "$TRAFFIC" perfquery -x -r "$sm" 1
    compare perfquery-ports "$TRAFFIC" perfquery "$sm" 1,2
    compare perfquery-range-a "$TRAFFIC" perfquery -a "$sm" 1-2
    # PortSamplesControl, which ibsim does not simulate: it hands the MAD to a
    # client of the target port that is its node's SM, and umad2sim crashes a
    # process that has no agent of the class (sent to the SM's port, it kills
    # the SM). So it goes to a CA where no SM and no client runs (not the net
    # file's first node, where the SM runs), from a tool attached there and
    # from one at the SM's node: both tools time out alike.
    local ca ca_lid
    ca=$(ca_node 1)
    [ "$ca" != "$(first_node)" ] || ca=$(ca_node 2)
    ca_lid=$(node_lid "$ca")
    if [ -z "$ca" ] || [ -z "$ca_lid" ]; then
        echo "compare perfquery-c: FAILED (no CA, or no LID of CA '$ca', in $RDMA_FABRIC_NET)"
        N_FAIL=$((N_FAIL + 1))
    else
        SIM_HOST=$ca EXPECT_RC=255 compare perfquery-c "" perfquery -c
        EXPECT_RC=255 compare perfquery-c-lid "" perfquery -c "$ca_lid" 1
    fi

    EXPECT_RC=0 compare sminfo "$ACTIVITY" sminfo
    EXPECT_RC=0 compare sminfo-lid "$ACTIVITY" sminfo "$sm"
    EXPECT_RC=0 compare sminfo-dr "$ACTIVITY" sminfo -D 0
    compare sminfo-dr-1 "$ACTIVITY" sminfo -D 0,1

    local lid op
    for lid in 1 2 3; do
        for op in nodeinfo nodedesc portinfo switchinfo pkeys sl2vl vlarb guids GUIDInfo; do
            compare "smpquery-$op-$lid" "" smpquery "$op" "$lid"
        done
        compare "smpquery-portinfo-$lid-1" "" smpquery portinfo "$lid" 1
        compare "smpquery-portinfo-x-$lid-1" "" smpquery -x portinfo "$lid" 1
        compare "smpquery-NI-$lid" "" smpquery NI "$lid"
        compare "smpquery-pkeys-$lid-1" "" smpquery pkeys "$lid" 1
        compare "smpquery-vlarb-$lid-1" "" smpquery vlarb "$lid" 1
    done
    local path
    for path in 0 0,1 0,1,1; do
        for op in nodeinfo nodedesc portinfo switchinfo pkeys sl2vl vlarb; do
            compare "smpquery-$op-dr-$path" "" smpquery -D "$op" "$path"
        done
        compare "smpquery-portinfo-dr-$path-1" "" smpquery -D portinfo "$path" 1
    done

    # The SA's answers: each C query must succeed.
    local EXPECT_RC=0
    compare saquery "" saquery
    compare saquery-NR "" saquery NodeRecord
    for lid in 1 2 3; do
        compare "saquery-lid-$lid" "" saquery "$lid"
        compare "saquery-PIR-$lid" "" saquery PortInfoRecord "$lid"
        compare "saquery-PIR-$lid-1" "" saquery PIR "$lid/1"
        compare "saquery-LR-$lid" @link_tail saquery LinkRecord "$lid"
    done
    compare saquery-PIR "" saquery PortInfoRecord
    compare saquery-p @path_tail saquery -p
    compare saquery-PR @path_tail saquery PR
    compare saquery-src-to-dst "" saquery --src-to-dst "$sm:2"
    compare saquery-src-to-dst-2-3 "" saquery --src-to-dst 2:3
    compare saquery-slid @path_tail saquery -p --slid 2
    compare saquery-g "" saquery -g
    compare saquery-m "" saquery -m
    compare saquery-m-mlid "" saquery -m 0xc000
    compare saquery-MCMR "" saquery MCMemberRecord
    compare saquery-LR @link_tail saquery LinkRecord
    compare saquery-x @link_tail saquery -x
    # Our SM's SA keeps no ServiceRecords: it answers the query with status
    # 0x0C (method/attribute not supported), and saquery exits 5.
    local sr_rc=0
    [ "${RDMA_FABRIC_SM:-opensm}" != ours ] || sr_rc=5
    EXPECT_RC=$sr_rc compare saquery-SR "" saquery SR
    EXPECT_RC=$sr_rc compare saquery-S "" saquery -S
    compare saquery-c "" saquery -c
    compare saquery-CPI "" saquery ClassPortInfo
    local name
    name=$(saquery_name)
    [ -n "$name" ] || echo "fabric-compare.sh: no NodeDescription in the SA's NodeRecords" >&2
    compare saquery-name "" saquery --src-to-dst "$name":2
    compare saquery-N "" saquery -N
    compare saquery-N-name "" saquery -N "$name"
    compare saquery-D "" saquery -D
    compare saquery-s "" saquery -s
    EXPECT_RC=

    ping_comparisons

    compare ibnetdiscover "$GENERATED" ibnetdiscover
    compare ibnetdiscover-l "" ibnetdiscover -l
    compare ibnetdiscover-S "" ibnetdiscover -S
    compare ibnetdiscover-H "" ibnetdiscover -H

    # The SM is still there at the end: every comparison above had it.
    EXPECT_RC=0 compare sminfo-at-the-end "$ACTIVITY" sminfo
}

# median of the numbers given
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# time_ms CMD...: CMD's wall time in milliseconds (its output discarded; it must succeed).
time_ms() {
    local t0 t1
    t0=$(date +%s%N)
    (cd "$SCRATCH" && "$@" >/dev/null 2>&1) || { echo "fabric-compare.sh: '$*' failed" >&2; return 1; }
    t1=$(date +%s%N)
    echo $(((t1 - t0) / 1000000))
}

# The directed-route sweep, C's ibnetdiscover against ours, RUNS (5) of each in
# alternation; prints each run, the medians and ours/C's.
speed() {
    local runs=${RDMA_COMPARE_RUNS:-5} i c=() r=() mc mr
    for i in $(seq "$runs"); do
        c+=("$(time_ms ibnetdiscover "$@")") || return 1
        r+=("$(time_ms "$BIN/ibnetdiscover" "$@")") || return 1
    done
    mc=$(median "${c[@]}") mr=$(median "${r[@]}")
    echo "speed $NAME: ibnetdiscover $* C ms: ${c[*]}"
    echo "speed $NAME: ibnetdiscover $* ours ms: ${r[*]}"
    echo "speed $NAME: ours: $(cd "$SCRATCH" && RDMA_IBNETDISCOVER_STATS=1 "$BIN/ibnetdiscover" "$@" 2>&1 >/dev/null | grep '^ibnetdiscover:')"
    echo "speed $NAME: C: $(cd "$SCRATCH" && ibnetdiscover -m "$@" 2>/dev/null | grep 'Total MADs')"
    echo "speed $NAME: ibnetdiscover $* median C ${mc} ms, ours ${mr} ms, ratio ours/C $(awk -v a="$mr" -v b="$mc" 'BEGIN { printf "%.2f", a / b }')"
}

if [ "$MODE" = speed ]; then
    speed
    exit $?
fi
comparisons
echo "compare: $N_OK ok, $N_FAIL failed ($NAME)"
[ "$N_FAIL" = 0 ]
