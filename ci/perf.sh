#!/usr/bin/env bash
# ci/perf.sh [--short | --count]: our perftest-like benchmarks against perftest, side by side.
#
# Builds send_lat, write_lat, send_bw and write_bw (package rdma-examples,
# release) and ci/post_poll.c, boots the VM once and runs, on rxe0 (own TCP
# exchange / perftest's) and on siw0 (-R, rdma_cm), each test with the same
# sizes and flags as ours and as Debian's perftest, alternating which goes
# first. Prints one row per test and size: the client's t_typical (median
# half round trip, us; lower is better) or MsgRate (Mpps; higher is better)
# of each, and the best case (t_min; BW peak as a message rate), as the
# median over the rounds, and ours/perftest. Without
# --short it also counts instructions per post + poll on rxe with callgrind
# for our path (write_lat --post-poll-loop: through the safe API, with a
# list prepared once, and through the ibverbs-sys ports under it) and for C
# (ci/post_poll.c), and per 64-byte round trip of a byte stream's client
# (our rstream and rsockets', see count_stream). Both ways it also times connection set-up through the CM: our
# cmtime (async API, release) against rdma-core's, client and server of
# the same kind; the CM steps' total, median of the per-round ratios.
# And byte streams: our rstream (examples/src/bin/rstream.rs, over
# rdma::stream in a task spawned on a current-thread tokio runtime) against rdma-core's
# rstream over rsockets and over TCP (its -T s) to the same address, on rxe
# and on siw, rotating which goes first: 64-byte ping-pong latency
# (usec/xfer, half a round trip; lower is better) with spinning waits
# (rstream's default; ours busy-polls without sleeping) and with blocking
# ones (-T b: rsockets polls briefly, then sleeps; ours uses the stream's
# default busy poll), and 64 KiB transfers,
# a batch each way (Gb/s; higher is better); medians over the rounds and
# ours/rsockets, ours/TCP. On rxe, the transport operation under the
# stream's small messages: a 64-byte ping-pong of SENDs (what rdma::stream
# sends) against one of RDMA WRITEs with immediate (what rsockets sends),
# both ours (see transport_rounds).
#
# Absolute figures under TCG mean little; the ratio is what counts. A
# missed ratio target is reported, never a failure: the script fails only
# when a run of ours fails (or the VM does); a failed perftest run is
# reported and left out.
#
# `ci/perf.sh --report DIR` prints the table of an earlier run's DIR again;
# `ci/perf.sh --count` runs only the instruction counts.
#
# Knobs: PERF_* (rounds, iterations, providers, counts) and those of ci/vm.sh
# (RDMA_CI_SKIP_SETUP, RDMA_VM_TIMEOUT, ...): see the table in ci/README.md.
set -Eeuo pipefail

TESTS_SHORT=("send_lat 2" "write_lat 64" "send_bw 64" "write_bw 64")
TESTS_FULL=("send_lat 2" "send_lat 64" "write_lat 64" "write_lat 4096" "send_bw 64" "write_bw 64" "send_bw 65536" "write_bw 65536")

# ---------------------------------------------------------------------------
# Inside the VM: perf.sh --guest OUTDIR BINDIR POST_POLL SHORT
guest() {
    local out=$1 bin=$2 post_poll=$3 short=$4 rounds lat_iters bw_iters
    local -a tests
    # run_pair's commands; the CPUs that the stream and transport runs pin
    # their servers and clients to, where there are two (see
    # rstream_rounds).
    SRV=() CLI=() PIN_SRV=() PIN_CLI=()
    if [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null; then
        PIN_SRV=(taskset -c 0) PIN_CLI=(taskset -c 1)
    fi
    # The providers every loop runs on, and whether rxe is one of them
    # (the rxe-only runs).
    PROVIDERS=${PERF_PROVIDERS:-rxe siw} ON_RXE=0
    if [[ " $PROVIDERS " == *" rxe "* ]]; then ON_RXE=1; fi
    if [ "$short" = count ]; then
        count "$out" "$bin" "$post_poll"
        echo 0 >"$out/guest-done"
        return
    fi
    if [ "$short" = 1 ]; then
        tests=("${TESTS_SHORT[@]}")
        rounds=${PERF_ROUNDS:-1} lat_iters=${PERF_LAT_ITERS:-500} bw_iters=${PERF_BW_ITERS:-2000}
    else
        tests=("${TESTS_FULL[@]}")
        rounds=${PERF_ROUNDS:-3} lat_iters=${PERF_LAT_ITERS:-1000} bw_iters=${PERF_BW_ITERS:-5000}
    fi
    local port=20000 p dev addr cm gidx t name size iters r order prog run flags
    for p in $PROVIDERS; do
        if [ "$p" = rxe ]; then
            dev=$RDMA_RXE_DEVICE addr=$RDMA_RXE_IPV4 cm=() gidx=$(ipv4_gid_index "$dev")
            gidx=(-x "$gidx")
        else
            dev=$RDMA_SIW_DEVICE addr=$RDMA_SIW_IPV4 cm=(-R) gidx=()
        fi
        for r in $(seq 1 "$rounds"); do
            for t in "${tests[@]}"; do
                read -r name size <<<"$t"
                case $name in
                    *_lat) iters=$lat_iters flags=() ;;
                    *) iters=$bw_iters flags=(-t 128 -Q 100) ;;
                esac
                # Alternate who goes first: ours in odd rounds, perftest in even ones.
                if [ $((r % 2)) = 1 ]; then order="ours perftest"; else order="perftest ours"; fi
                for prog in $order; do
                    port=$((port + 1))
                    run="$out/$p.$name.$size.$prog.$r"
                    if [ "$prog" = ours ]; then cmd=("$bin/$name"); else cmd=("ib_$name"); fi
                    cmd+=(-d "$dev" -F -s "$size" -n "$iters" -p "$port" "${gidx[@]}" "${cm[@]}" "${flags[@]}")
                    echo "== $p round $r: ${cmd[*]}"
                    SRV=("${cmd[@]}") CLI=("${cmd[@]}" "$addr")
                    run_pair 120 "${#cm[@]}" "$port" "$run" server client
                    grep -E '^ *[0-9]+ +[0-9]+ ' "$run.client" || tail -n 5 "$run.client"
                done
            done
        done
    done
    rstream_rounds "$out" "$bin" "$short"
    if [ "$ON_RXE" = 1 ]; then
        transport_rounds "$out" "$bin" "$short"
    fi
    cmtime_rounds "$out" "$bin" "$short"
    if [ "$short" != 1 ] && [ "$ON_RXE" = 1 ]; then
        count "$out" "$bin" "$post_poll"
    fi
    echo 0 >"$out/guest-done"
}

# Connection set-up through the CM: our cmtime (the async API) and
# rdma-core's, client and server of the same kind, alternating who goes
# first. rxe with 100 connections; siw with 40 (siw in this VM refuses CQs
# and QPs now and then beyond about 50 connections per process, rdma-core's
# cmtime included).
cmtime_rounds() {
    local out=$1 bin=$2 short=$3 rounds p addr n r order prog port=21000 cmd run spid crc died
    rounds=${PERF_CMTIME_ROUNDS:-$([ "$short" = 1 ] && echo 5 || echo 15)}
    for p in $PROVIDERS; do
        if [ "$p" = rxe ]; then
            addr=$RDMA_RXE_IPV4 n=${PERF_CMTIME_RXE:-100}
        else
            addr=$RDMA_SIW_IPV4 n=${PERF_CMTIME_SIW:-40}
        fi
        for r in $(seq 1 "$rounds"); do
            if [ $((r % 2)) = 1 ]; then order="ours rdmacore"; else order="rdmacore ours"; fi
            for prog in $order; do
                port=$((port + 1))
                run="$out/$p.cmtime.$n.$prog.$r"
                if [ "$prog" = ours ]; then cmd=("$bin/cmtime"); else cmd=(cmtime); fi
                echo "== $p round $r: ${cmd[*]} -s $addr -p $port -c $n"
                # The server runs until it is killed.
                "${cmd[@]}" -b "$addr" -p "$port" >"$run.server" 2>&1 &
                spid=$!
                wait_listen "$port" 1
                crc=0
                timeout -k 5 120 "${cmd[@]}" -s "$addr" -p "$port" -c "$n" >"$run.cm" 2>&1 || crc=$?
                # A server that died on its own failed (exit 1 here).
                died=0
                kill -0 "$spid" 2>/dev/null || died=1
                kill "$spid" 2>/dev/null || true
                wait "$spid" 2>/dev/null || true
                echo "$crc $died" >"$run.rc"
                grep -E '^(resolve addr|resolve route|connect|disconnect) *:' "$run.cm" || tail -n 5 "$run.cm"
            done
        done
    done
}

# Byte streams: our rstream over rdma::stream ("ours"), rdma-core's rstream
# over rsockets ("rsocket") and over TCP ("tcp", its -T s), and with
# PERF_RSTREAM_TOKIO_TCP=1 ours over tokio's TCP ("tokiotcp"), to the
# provider's address: 64-byte ping-pong (-S 64 -C 1 -I N), the same with
# blocking waits (-T b; ours and rsockets only) and 64 KiB batches
# (-S 65536 -C N -I 1). The short run: one round (16 runs, about 80 s
# under TCG, most of it process start and connection set-up). Every
# program's server runs on CPU 0 and its client on CPU 1 (taskset), where
# there are two: two spinning processes that the scheduler puts on one of
# the VM's two CPUs take turns by the scheduler's tick, and a ping-pong
# then takes milliseconds (seen for rsockets: 1.5 to 3.4 ms per round trip
# in a run where it took 29 us before and after). The ping-pongs run 2000
# round trips (5000 in the full run): the first few timed round trips
# cost far more than the rest under TCG (ours: the first 0.5 to 3.4 ms,
# rsockets about 0.4 ms; part of ours is code translated at its first
# run), which over the 300 round trips used before added several us to
# each transfer's mean.
rstream_rounds() {
    local out=$1 bin=$2 short=$3 rounds lat_iters bw_count p pi=0 addr r i ti kind flags prog cm
    local port=22000 run
    local -a progs kprogs order cmd
    if [ "$short" = 1 ]; then
        rounds=${PERF_RSTREAM_ROUNDS:-1} lat_iters=${PERF_RSTREAM_LAT_ITERS:-2000}
        bw_count=${PERF_RSTREAM_BW_COUNT:-200}
    else
        rounds=${PERF_RSTREAM_ROUNDS:-5} lat_iters=${PERF_RSTREAM_LAT_ITERS:-5000}
        bw_count=${PERF_RSTREAM_BW_COUNT:-1000}
    fi
    local t_all=$EPOCHREALTIME t_run n=0
    progs=(ours rsocket tcp)
    if [ "${PERF_RSTREAM_TOKIO_TCP:-$([ "$short" = 1 ] && echo 0 || echo 1)}" = 1 ]; then
        progs+=(tokiotcp)
    fi
    for p in $PROVIDERS; do
        if [ "$p" = rxe ]; then addr=$RDMA_RXE_IPV4; else addr=$RDMA_SIW_IPV4; fi
        pi=$((pi + 1))
        for r in $(seq 1 "$rounds"); do
            ti=0
            for kind in lat blat bw; do
                ti=$((ti + 1))
                kprogs=("${progs[@]}")
                case $kind in
                    lat) flags=(-S 64 -C 1 -I "$lat_iters") ;;
                    # Blocking waits (rstream -T b): rsockets polls briefly,
                    # then sleeps; ours uses the stream's default busy poll.
                    blat) flags=(-S 64 -C 1 -I "$lat_iters" -T b) kprogs=(ours rsocket) ;;
                    bw) flags=(-S 65536 -C "$bw_count" -I 1) ;;
                esac
                # Who goes first moves on by one each round, test and
                # provider: even a single round has each program first
                # somewhere.
                order=()
                for i in "${!kprogs[@]}"; do
                    order+=("${kprogs[$(((i + r + ti + pi - 3) % ${#kprogs[@]}))]}")
                done
                for prog in "${order[@]}"; do
                    port=$((port + 1))
                    run="$out/$p.rstream.$kind.$prog.$r"
                    case $prog in
                        ours) cmd=("$bin/rstream" --runtime "${PERF_RSTREAM_RUNTIME:-current}") cm=1 ;;
                        tokiotcp) cmd=("$bin/rstream" --runtime "${PERF_RSTREAM_RUNTIME:-current}" -T s) cm=0 ;;
                        rsocket) cmd=(rstream) cm=1 ;;
                        tcp) cmd=(rstream -T s) cm=0 ;;
                    esac
                    cmd+=(-p "$port" "${flags[@]}")
                    echo "== $p round $r: ${cmd[*]} (server -b $addr, client -s $addr)"
                    t_run=$EPOCHREALTIME n=$((n + 1))
                    SRV=("${PIN_SRV[@]}" "${cmd[@]}" -b "$addr") CLI=("${PIN_CLI[@]}" "${cmd[@]}" -s "$addr")
                    run_pair 60 "$cm" "$port" "$run" server stream
                    grep -E '^custom ' "$run.stream" || tail -n 5 "$run.stream"
                    echo "   (run $(elapsed_since "$t_run") s, start to end of both sides)"
                done
            done
        done
    done
    echo "== rstream: $n runs in $(elapsed_since "$t_all") s"
}

# The transport operation under a byte stream's small messages: a 64-byte
# ping-pong on rxe of SENDs into posted receives (what rdma::stream
# sends) and of RDMA WRITEs with immediate data (what rsockets sends),
# each inline and taken from a receive's completion: our send_lat and
# write_lat --write_with_imm, alternating who goes first, pinned as the
# rstream runs are. Debian 12's perftest has no --write_with_imm, so both
# are ours; the ratio says what the operation alone costs.
transport_rounds() {
    local out=$1 bin=$2 short=$3 rounds iters r order kind port=23000 run gidx
    local -a cmd
    rounds=${PERF_TRANSPORT_ROUNDS:-$([ "$short" = 1 ] && echo 3 || echo 10)}
    iters=${PERF_TRANSPORT_ITERS:-5000}
    gidx=$(ipv4_gid_index "$RDMA_RXE_DEVICE")
    for r in $(seq 1 "$rounds"); do
        if [ $((r % 2)) = 1 ]; then order="send wimm"; else order="wimm send"; fi
        for kind in $order; do
            port=$((port + 1))
            run="$out/rxe.transport.$kind.$r"
            if [ "$kind" = send ]; then cmd=("$bin/send_lat"); else cmd=("$bin/write_lat" --write_with_imm); fi
            cmd+=(-d "$RDMA_RXE_DEVICE" -x "$gidx" -F -s 64 -I 64 -n "$iters" -p "$port")
            echo "== rxe transport round $r: ${cmd[*]}"
            # Not `.client`: the perftest table reads those.
            SRV=("${PIN_SRV[@]}" "${cmd[@]}") CLI=("${PIN_CLI[@]}" "${cmd[@]}" "$RDMA_RXE_IPV4")
            run_pair 60 0 "$port" "$run" tserver tclient
            grep -E '^ *64 +[0-9]+ ' "$run.tclient" || tail -n 5 "$run.tclient"
        done
    done
}

# elapsed_since T: seconds since T (an $EPOCHREALTIME), with one decimal.
elapsed_since() {
    awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f\n", b - a }'
}

# run_pair LIMIT CM PORT RUN SERVER_OUT CLIENT_OUT: runs the server command
# in the array SRV in the background, waits until it listens on PORT
# (wait_listen PORT CM), then runs the client command in CLI; each under a
# time limit of LIMIT seconds, with its output in RUN.SERVER_OUT or
# RUN.CLIENT_OUT. Waits for the server and writes both exit statuses
# ("client server") to RUN.rc.
run_pair() {
    local limit=$1 cm=$2 port=$3 run=$4 spid crc=0 src=0
    timeout -k 5 "$limit" "${SRV[@]}" >"$run.$5" 2>&1 &
    spid=$!
    wait_listen "$port" "$cm"
    timeout -k 5 "$limit" "${CLI[@]}" >"$run.$6" 2>&1 || crc=$?
    wait "$spid" || src=$?
    echo "$crc $src" >"$run.rc"
}

# wait_listen PORT CM: waits (at most 10 s) until a server listens on PORT:
# a TCP socket, or with CM=1 an rdma_cm id.
wait_listen() {
    local port=$1 cm=$2 i
    for i in $(seq 1 50); do
        if [ "$cm" = 1 ]; then
            rdma res show cm_id 2>/dev/null | grep LISTEN | grep -qE ":$port( |$)" && break
        else
            ss -ltn 2>/dev/null | grep -qE ":$port( |$)" && break
        fi
        sleep 0.2
    done
    sleep 0.2
}

# The index of the first RoCE v2 GID of DEV port 1 that maps an IPv4 address.
ipv4_gid_index() {
    local d=/sys/class/infiniband/$1/ports/1 i
    for i in $(seq 0 15); do
        if [ "$(cat "$d/gid_attrs/types/$i" 2>/dev/null)" = "RoCE v2" ] &&
            [[ "$(cat "$d/gids/$i" 2>/dev/null)" == 0000:0000:0000:0000:0000:ffff:* ]]; then
            echo "$i"
            return
        fi
    done
    echo 0
}

# Instructions per post + poll under callgrind, ours and C, on rxe.
count() {
    local out=$1 bin=$2 post_poll=$3 n=${PERF_COUNT_ITERS:-200} gidx
    if ! command -v valgrind >/dev/null; then
        echo "valgrind is not installed (apt-get install valgrind): no instruction counts"
        return 0
    fi
    gidx=$(ipv4_gid_index "$RDMA_RXE_DEVICE")
    local vg=(valgrind --tool=callgrind --toggle-collect='*post_one*' --toggle-collect='*poll_one*')
    echo "== callgrind: C (ci/post_poll.c), $n iterations"
    "${vg[@]}" --callgrind-out-file="$out/callgrind.c" "$post_poll" "$RDMA_RXE_DEVICE" "$gidx" "$n" \
        >"$out/count.c.log" 2>&1 || echo "callgrind of C failed: $?" >>"$out/count.failed"
    grep post_poll: "$out/count.c.log" || tail -n 5 "$out/count.c.log"
    echo "== callgrind: ours (write_lat --post-poll-loop), $n iterations"
    "${vg[@]}" --callgrind-out-file="$out/callgrind.rust" "$bin/write_lat" -d "$RDMA_RXE_DEVICE" \
        -x "$gidx" --post-poll-loop "$n" >"$out/count.rust.log" 2>&1 ||
        echo "callgrind of ours failed: $?" >>"$out/count.failed"
    grep post_poll: "$out/count.rust.log" || tail -n 5 "$out/count.rust.log"
    echo "== callgrind: ours, a list prepared once (--post-poll-path prepared), $n iterations"
    "${vg[@]}" --callgrind-out-file="$out/callgrind.prepared" "$bin/write_lat" -d "$RDMA_RXE_DEVICE" \
        -x "$gidx" --post-poll-loop "$n" --post-poll-path prepared >"$out/count.prepared.log" 2>&1 ||
        echo "callgrind of the prepared path failed: $?" >>"$out/count.failed"
    grep post_poll: "$out/count.prepared.log" || tail -n 5 "$out/count.prepared.log"
    echo "== callgrind: the ibverbs-sys ports under it (--post-poll-path port), $n iterations"
    "${vg[@]}" --callgrind-out-file="$out/callgrind.port" "$bin/write_lat" -d "$RDMA_RXE_DEVICE" \
        -x "$gidx" --post-poll-loop "$n" --post-poll-path port >"$out/count.port.log" 2>&1 ||
        echo "callgrind of the ports failed: $?" >>"$out/count.failed"
    grep post_poll: "$out/count.port.log" || tail -n 5 "$out/count.port.log"
    echo "$n" >"$out/count.iters"
    count_stream "$out" "$bin"
}

# Instructions per 64-byte round trip of a byte stream's client on rxe:
# our rstream (spawned test, spinning) and rdma-core's over rsockets, the
# client under callgrind (every instruction of the process, its runtime's
# included) against a server running natively, for PERF_COUNT_STREAM
# round trips (default 200) and three times as many; the difference per
# round trip leaves out set-up and teardown. PERF_COUNT_STREAM_REPS times
# (default 3), and the median is reported. The server answers faster
# than the client under callgrind polls, so little of the count is
# waiting; how often the client's busy poll finds nothing still varies
# from run to run (some hundreds of instructions per round trip).
count_stream() {
    local out=$1 bin=$2 n=${PERF_COUNT_STREAM:-200} reps=${PERF_COUNT_STREAM_REPS:-3} prog it rep port=27000 spid
    local -a cmd
    for rep in $(seq 1 "$reps"); do
        for prog in ours rsocket; do
            for it in "$n" $((3 * n)); do
                port=$((port + 1))
                if [ "$prog" = ours ]; then cmd=("$bin/rstream"); else cmd=(rstream); fi
                cmd+=(-p "$port" -S 64 -C 1 -I "$it")
                echo "== callgrind: rstream client, $prog, $it round trips (repetition $rep)"
                timeout -k 5 300 "${cmd[@]}" -b "$RDMA_RXE_IPV4" >"$out/count.stream.$prog.$it.$rep.server" 2>&1 &
                spid=$!
                wait_listen "$port" 1
                timeout -k 5 300 valgrind --tool=callgrind \
                    --callgrind-out-file="$out/callgrind.stream.$prog.$it.$rep" \
                    "${cmd[@]}" -s "$RDMA_RXE_IPV4" >"$out/count.stream.$prog.$it.$rep.log" 2>&1 ||
                    echo "callgrind of the $prog stream client failed: $?" >>"$out/count.failed"
                wait "$spid" || echo "the $prog stream server failed: $?" >>"$out/count.failed"
                grep -E '^custom' "$out/count.stream.$prog.$it.$rep.log" || tail -n 5 "$out/count.stream.$prog.$it.$rep.log"
            done
        done
    done
    echo "$n $reps" >"$out/count.stream.iters"
}

# report OUT: the side-by-side table (median over rounds) and the instruction counts.
report() {
    python3 "$(dirname "${BASH_SOURCE[0]}")/py/perf_report.py" "$1"
}

if [ "${1:-}" = --report ]; then
    report "$2"
    exit 0
fi
if [ "${1:-}" = --guest ]; then
    shift
    guest "$@"
    exit 0
fi

# ---------------------------------------------------------------------------
# On the host.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"
SHORT=0
case "${1:-}" in
    --short) SHORT=1 ;;
    --count) SHORT=count ;;
    "") ;;
    -h | --help)
        sed -n '2,/^set -E/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"
        exit 0
        ;;
    *) die "usage: ci/perf.sh [--short | --count]" ;;
esac

ci_setup
ensure_target_dir

step "build the benchmarks (release) and ci/post_poll.c"
JSON="$CI_WORK/perf-build.json"
cargo_cmd build --release -p rdma-examples --bin send_lat --bin write_lat --bin send_bw --bin write_bw --bin cmtime --bin rstream \
    --message-format=json >"$JSON"
BIN=$(dirname "$(cargo_executable send_lat bin <"$JSON")")
[ -x "$BIN/send_lat" ] || die "no send_lat in cargo's output ($JSON)"
POST_POLL="$CI_WORK/post_poll"
cc -O2 -Wall -o "$POST_POLL" "$CI_DIR/post_poll.c" -libverbs
command -v ib_send_lat >/dev/null || die "perftest is not installed (apt-get install perftest)"
command -v rstream >/dev/null || die "rdma-core's rstream is not installed (apt-get install rdmacm-utils)"

step "perftest side by side in the VM$([ "$SHORT" = 1 ] && echo ' (short)')"
RUN_DIR=$(new_run_dir perf)
OUT="$RUN_DIR/perf"
mkdir -p "$OUT"
{
    guest_prelude "$RUN_DIR"
    while IFS= read -r v; do printf 'export %s=%q\n' "$v" "${!v}"; done < <(compgen -e | grep -E '^PERF_' || true)
    guest_device_setup "$RUN_DIR"
    printf 'bash %q --guest %q %q %q %q 2>&1 | tee %q\n' "$CI_DIR/perf.sh" "$OUT" "$BIN" "$POST_POLL" "$SHORT" "$RUN_DIR/perf.log"
    printf 'echo "${PIPESTATUS[0]}" > %q\n' "$RUN_DIR/status"
} >"$RUN_DIR/guest.sh"
# The full run takes about 15 minutes under TCG.
[ "$SHORT" = 1 ] || export RDMA_VM_TIMEOUT=${RDMA_VM_TIMEOUT:-2400}
vm_boot "$RUN_DIR" "$RUN_DIR/guest.sh"

step "results"
FAIL=()
# The guest's status is that of `perf.sh --guest`; guest-done below says whether it finished.
vm_failures "${RDMA_VM_TIMEOUT:-900}" 0
[ -f "$OUT/guest-done" ] || FAIL+=("the benchmarks did not finish (see $RUN_DIR/console.log)")
# A failed run of ours fails; one of perftest is only reported (it has no sample).
# So is a cmtime run of ours on siw whose only failed connections were
# refused with EADDRINUSE: on iWARP the source port that the RDMA CM picks
# is bound by a kernel TCP socket, which finds it now and then held by
# another socket (one in TIME_WAIT from the runs before); rdma-core's
# cmtime meets the same and only reports it. Either run is left out.
only_addr_in_use() {
    grep -q "Address already in use" "$1" &&
        ! grep -iE "fail|error" "$1" | grep -vE "Address already in use|^cmtime: [0-9]+ of [0-9]+ connections failed$" | grep -q .
}
for rc in "$OUT"/*.rc; do
    [ -e "$rc" ] || continue
    read -r c s <"$rc"
    if [ "$c" != 0 ] || [ "$s" != 0 ]; then
        msg="$(basename "$rc" .rc): client exit $c, server exit $s (see ${rc%.rc}.*)"
        case $rc in
            *.perftest.*.rc | *.rdmacore.*.rc | *.rsocket.*.rc | *.tcp.*.rc) echo "perf.sh: the C reference failed: $msg" ;;
            siw.cmtime.*.ours.*.rc)
                if [ "$c" = 1 ] && [ "$s" = 0 ] && only_addr_in_use "${rc%.rc}.cm"; then
                    echo "perf.sh: left out: $msg: connections refused with EADDRINUSE only (an iWARP source port held by another TCP socket)"
                else
                    FAIL+=("$msg")
                fi
                ;;
            *) FAIL+=("$msg") ;;
        esac
    fi
done
[ ! -f "$OUT/count.failed" ] || FAIL+=("$(cat "$OUT/count.failed")")

report "$OUT"
echo "logs: $OUT"
if [ "${#FAIL[@]}" -gt 0 ]; then
    printf '!! perf.sh: %s\n' "${FAIL[@]}" >&2
    exit 1
fi
