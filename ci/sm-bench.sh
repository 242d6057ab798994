#!/usr/bin/env bash
# ci/sm-bench.sh: our subnet manager (the package rdma-sm in sm/) against OpenSM on the same
# simulated fabrics, in one run: the time from the SM's start until the fabric is ready
# (the SM has logged SUBNET UP; then sminfo must report it master and ibnetdiscover
# every port with a LID, or the round fails), and the rate of SA PathRecord answers with
# many queries in flight (examples/src/bin/sa_bench: 10000 queries, 32 in flight, from one
# SaClient), and the SM's peak resident memory (VmHWM, read before it is stopped). Each
# fabric is started fresh for every round (ci/fabric.sh --sm none); rounds alternate
# between the SMs. Prints every round, then per topology the medians of ROUNDS and the
# ratios ours / OpenSM (time: lower is better, target at most 0.50; rate: higher is
# better, target at least 1.00; memory: lower is better), also in
# target/ci/sm-bench.summary.
#
#   ci/sm-bench.sh [ROUNDS]     (default 5; RDMA_SM_BENCH_NETS: the topologies,
#                                default "2sw2path4hca fattree ring"; the scale ones are
#                                fat200, fat700 and fat2000, see ci/fabric.sh;
#                                RDMA_SM_BENCH_UP_TIMEOUT: s to SUBNET UP, default 120;
#                                RDMA_SM_BENCH_PROFILE: release, the default, or debug:
#                                the debug build the fabric suite made, as CI runs
#                                fat700 once: that it comes up, not how fast;
#                                RDMA_SM_BENCH_BIN_DIR: a folder holding sm and
#                                sa_bench, run as they are, nothing built: how
#                                ci/test.sh runs its debug build beside other builds)
set -Eeuo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

ROUNDS=${1:-5}
UP_TIMEOUT=${RDMA_SM_BENCH_UP_TIMEOUT:-120}
# Where ci/fabric.sh writes the generated net files (for the node counts).
FABRIC_NETS=$CI_WORK/fabric
read -ra NETS <<<"${RDMA_SM_BENCH_NETS:-2sw2path4hca fattree ring}"
# Release builds: OpenSM is optimised C.
PROFILE=${RDMA_SM_BENCH_PROFILE:-release}
if [ -n "${RDMA_SM_BENCH_BIN_DIR:-}" ]; then
    BIN=$(realpath "$RDMA_SM_BENCH_BIN_DIR")
    PROFILE="$BIN's"
    for b in sm sa_bench; do [ -x "$BIN/$b" ] || die "RDMA_SM_BENCH_BIN_DIR=$BIN has no $b"; done
else
    case $PROFILE in
        release) cargo_cmd build --release -p rdma-sm --bin sm -p rdma-examples --bin sa_bench ;;
        debug) cargo_cmd build -p rdma-sm --bin sm -p rdma-examples --bin sa_bench ;;
        *) die "RDMA_SM_BENCH_PROFILE=$PROFILE: release or debug" ;;
    esac
    BIN=$REPO_ROOT/target/$PROFILE
fi
OUT=$CI_WORK/sm-bench
mkdir -p "$OUT"
rm -f "$OUT"/*.txt

# One round inside the fabric: start the SM, wait for SUBNET UP (10 ms polls), check
# the fabric, run sa_bench, read the SM's peak RSS, stop the SM. Prints "ready_ms rate
# rss_kb".
cat >"$OUT/round.sh" <<'EOF'
set -euo pipefail
sm=$1 bin=$2 up_timeout=$3
cd "$RDMA_FABRIC_DIR"
P=$RDMA_FABRIC_UMAD2SIM
t0=$(date +%s%N)
if [ "$sm" = ours ]; then
    LD_PRELOAD=$P OSM_CACHE_DIR=$PWD "$bin/sm" >sm.out 2>&1 &
    log=sm.out
else
    LD_PRELOAD=$P OSM_TMP_DIR=$PWD OSM_CACHE_DIR=$PWD opensm -R minhop -d 2 -f osm.log >opensm.out 2>&1 &
    log=osm.log
fi
pid=$!
trap 'kill -KILL $pid 2>/dev/null || true' EXIT
for _ in $(seq $((up_timeout * 100))); do
    grep -q 'SUBNET UP' "$log" 2>/dev/null && break
    sleep 0.01
done
t1=$(date +%s%N)
grep -q 'SUBNET UP' "$log" || { echo "!! $sm: no SUBNET UP in $up_timeout s" >&2; exit 1; }
LD_PRELOAD=$P sminfo | grep -q SMINFO_MASTER || { echo "!! $sm: sminfo: $(LD_PRELOAD=$P sminfo 2>&1)" >&2; exit 1; }
if LD_PRELOAD=$P ibnetdiscover | grep -q ' lid 0 '; then echo "!! $sm: a port without LID" >&2; exit 1; fi
for _ in $(seq 100); do [ -s guid2lid ] && break; sleep 0.05; done
rate=$(LD_PRELOAD=$P "$bin/sa_bench" --guid2lid guid2lid -n 10000 -k 32 | sed -nE 's/.*: ([0-9]+)\/s .*/\1/p')
[ -n "$rate" ] || { echo "!! $sm: sa_bench gave no rate" >&2; exit 1; }
rss=$(awk '$1 == "VmHWM:" { print $2 }' /proc/$pid/status)
[ -n "$rss" ] || { echo "!! $sm: no VmHWM for pid $pid" >&2; exit 1; }
echo "$(((t1 - t0) / 1000000)) $rate $rss"
EOF

median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

SUMMARY=()
for net in "${NETS[@]}"; do
    for r in $(seq "$ROUNDS"); do
        for sm in opensm ours; do
            line=$(RDMA_FABRIC_TIMEOUT=$((UP_TIMEOUT + 300)) bash "$CI_DIR/fabric.sh" --sm none --no-preload --net "$net" -- bash "$OUT/round.sh" "$sm" "$BIN" "$UP_TIMEOUT" 2>"$OUT/err.txt" | tail -n 1) ||
                { cat "$OUT/err.txt" >&2; die "round $r of $sm on $net failed"; }
            read -r ms rate rss <<<"$line"
            [ -n "${rss:-}" ] || { cat "$OUT/err.txt" >&2; die "round $r of $sm on $net gave '$line'"; }
            echo "sm-bench $net round $r $sm: ready in $ms ms, $rate PathRecords/s, peak RSS $rss kB"
            echo "$ms" >>"$OUT/$net-$sm-ms.txt"
            echo "$rate" >>"$OUT/$net-$sm-rate.txt"
            echo "$rss" >>"$OUT/$net-$sm-rss.txt"
        done
    done
    o_ms=$(median <"$OUT/$net-ours-ms.txt") c_ms=$(median <"$OUT/$net-opensm-ms.txt")
    o_r=$(median <"$OUT/$net-ours-rate.txt") c_r=$(median <"$OUT/$net-opensm-rate.txt")
    o_m=$(median <"$OUT/$net-ours-rss.txt") c_m=$(median <"$OUT/$net-opensm-rss.txt")
    netf=$FABRIC_NETS/$net.net
    [ -f "$netf" ] || netf=/usr/share/doc/ibsim-utils/net-examples/net.$net
    read -r sw hca < <(python3 "$CI_DIR/topology.py" count "$netf" 2>/dev/null || echo "? ?")
    SUMMARY+=("sm-bench $net ($sw switches, $hca HCAs; $PROFILE build, median of $ROUNDS): ready ours $o_ms ms, OpenSM $c_ms ms, ratio $(awk -v a="$o_ms" -v b="$c_ms" 'BEGIN { printf "%.2f", a / b }'); PathRecords/s ours $o_r, OpenSM $c_r, ratio $(awk -v a="$o_r" -v b="$c_r" 'BEGIN { printf "%.2f", a / b }'); peak RSS ours $o_m kB, OpenSM $c_m kB, ratio $(awk -v a="$o_m" -v b="$c_m" 'BEGIN { printf "%.2f", a / b }')")
done
printf '%s\n' "${SUMMARY[@]}" | tee "$CI_WORK/sm-bench.summary"
