#!/usr/bin/env bash
# ci/test.sh: the project's test command (CI: `bash ci/test.sh`; developer: `sudo ci/test.sh`).
#
# Steps: ci/setup.sh; ci/knobs-check.sh; cargo build; then the fabric tests (ci/fabric.sh
# --suite: rdma::umad, the SM and the diagnostics on a simulated InfiniBand fabric, ibsim and
# OpenSM on the host) in the background beside the host steps: host tests, clippy -D warnings,
# rustdoc -D warnings, ...; waited for before the device steps: build the device test binary
# (package rdma-tests, test `device`); one VM boot that sets up rxe0 and siw0 and runs the
# device binary once per provider (rxe and siw at the same time);
# the cross-host suite (ci/twohost.sh --suite: two VMs over one link); ci/perf.sh --short;
# ci/memcheck.sh (device tests under valgrind memcheck, own VM boot); the version matrix
# (ci/matrix.sh trixie: the workspace built against Debian 13's rdma-core 56 and its device
# tests run on Debian 13's kernel 6.12 with that userspace). The host steps also check the
# shipped bindings (ci/bindings.sh), the docs as docs.rs builds them (ci/docsrs.sh), the
# packaged crates (ci/package.sh) and the MSRV (ci/msrv.sh).
# Prints each provider's summary line and `device: N passed, N failed, N skipped`.
# Exits non-zero when any step fails, a provider has failures, a summary line is
# missing, or the VM timed out.
#
# Knobs (RDMA_CI_SKIP_*, RDMA_CI_MATRIX, RDMA_TEST_*, RDMA_PROVIDER_TIMEOUT, RDMA_VM_*, ...):
# see the table in ci/README.md.
set -Eeuo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

T_START=$(now)
read_providers
TIMINGS=()
# Free space on target/'s file system: at the start and the least seen after a stage.
DISK_START=$(disk_free_gib)
DISK_LEAST=$DISK_START DISK_LEAST_AFTER=start
echo "disk: ${DISK_START:-?} GiB free for target/ at the start"
disk_note() { # disk_note STAGE: remember the least free space seen
    local f
    f=$(disk_free_gib)
    if [ -n "$f" ] && [ -n "$DISK_LEAST" ] && [ "$f" -lt "$DISK_LEAST" ]; then
        DISK_LEAST=$f DISK_LEAST_AFTER=$1
    fi
}
# Failures and summary lines of every stage, printed at the end.
FAIL=()
SUMMARIES=()
timed() { # timed NAME CMD...: run and record the duration
    local name=$1 t0
    shift
    t0=$(now)
    "$@"
    TIMINGS+=("$name $(elapsed "$t0")s")
    disk_note "$name"
}

# Timed only when it runs (no `setup` timing with RDMA_CI_SKIP_SETUP=1).
[ "${RDMA_CI_SKIP_SETUP:-0}" = 1 ] || timed setup ci_setup
ensure_target_dir

if [ "${RDMA_CI_SKIP_HOST:-0}" != 1 ]; then
    step "every RDMA_*/PERF_* variable of ci/ in ci/README.md (ci/knobs-check.sh)"
    timed knobs bash "$CI_DIR/knobs-check.sh"

    step "cargo build --workspace --all-targets"
    timed build cargo_cmd build --workspace --all-targets
fi

# The fabric tests on a simulated InfiniBand fabric (ibsim and OpenSM under umad2sim, on the
# host): rdma::umad's SMPs, SA and PerfMgt queries, umad_info against ibstat, on the CI
# topologies; then fat700 brought up once by each SM. The stage waits on the simulator's
# round trips (about half a core), so it runs in the background beside the host stages
# (bindings to MSRV), with binaries built here first: it runs no cargo of its own, which
# would wait for the build directory's lock. Its output goes to
# target/ci/fabric-stage.log, printed when it is waited for (before the device tests).
FABRIC_PID=
if [ "${RDMA_CI_SKIP_FABRIC:-0}" != 1 ] && [ -z "${RDMA_TEST_FILTER:-}" ] && [ -z "${RDMA_TEST_DEVICE_BIN:-}" ]; then
    step "fabric tests: ci/fabric.sh --suite in the background (ibsim + OpenSM, no VM)"
    # The workspace's binaries (built above, or here with RDMA_CI_SKIP_HOST=1), as hard
    # links in a tree of their own: a later build links target/debug's files afresh
    # (unlink, link), and the stage must never find one missing. The test binary goes
    # in deps/, its example programs beside deps/, where it looks for them.
    FABRIC_JSON="$CI_WORK/fabric-build.json"
    cargo_cmd build --workspace --all-targets --message-format=json >"$FABRIC_JSON"
    FABRIC_TEST=$(cargo_executable fabric test <"$FABRIC_JSON")
    [ -n "$FABRIC_TEST" ] || die "no executable for test target 'fabric' in cargo's JSON output ($FABRIC_JSON)"
    FABRIC_BINS="$CI_WORK/fabric-bin"
    rm -rf "$FABRIC_BINS"
    mkdir -p "$FABRIC_BINS/deps"
    cargo_executable '*' bin <"$FABRIC_JSON" | xargs -r ln -f -t "$FABRIC_BINS"
    ln -f "$FABRIC_TEST" "$FABRIC_BINS/deps/"
    for b in sm sa_bench; do [ -x "$FABRIC_BINS/$b" ] || die "no $b among the workspace's binaries"; done
    rm -f "$CI_WORK/fabric.summary" "$CI_WORK/sm-bench.summary" "$CI_WORK"/fabric-stage.*
    (
        t0=$(now)
        rc=0
        RDMA_FABRIC_TEST_BIN=$FABRIC_BINS/deps/$(basename "$FABRIC_TEST") RDMA_FABRIC_SM_BIN=$FABRIC_BINS/sm \
            bash "$CI_DIR/fabric.sh" --suite || rc=$?
        echo "$rc" >"$CI_WORK/fabric-stage.suite-rc"
        # Scale: fat700 (700 nodes) brought up once by each SM, with the debug build
        # above (that it comes up and answers the SA, not how fast: the timed
        # comparison is ci/sm-bench.sh's release build, docs/performance.md).
        rc=0
        RDMA_SM_BENCH_BIN_DIR=$FABRIC_BINS RDMA_SM_BENCH_NETS=fat700 \
            bash "$CI_DIR/sm-bench.sh" 1 || rc=$?
        echo "$rc" >"$CI_WORK/fabric-stage.bench-rc"
        elapsed "$t0" >"$CI_WORK/fabric-stage.seconds"
    ) >"$CI_WORK/fabric-stage.log" 2>&1 &
    FABRIC_PID=$!
    # A step that fails stops the fabric stage too: SIGTERM to every process
    # under it, deepest first (ci/fabric.sh stops ibsim and the SMs on it;
    # ibsim and the SMs get it as well), if the stage is still this
    # shell's job (its PID is not reused by then).
    stop_fabric_stage() {
        [ -n "$FABRIC_PID" ] && jobs -pr | grep -qx "$FABRIC_PID" || return 0
        kill_tree "$FABRIC_PID"
        wait "$FABRIC_PID" 2>/dev/null || true
    }
    kill_tree() {
        local c
        for c in $(pgrep -P "$1"); do kill_tree "$c"; done
        kill -TERM "$1" 2>/dev/null || true
    }
    trap stop_fabric_stage EXIT
    # The host stages beside it at a lower priority (nice 10, inherited by
    # what this shell starts; back to 0 once the stage is waited for): the
    # fabric's SMs, ibsim and tools answer in time, as on a quiet machine
    # (under two cores of builds an SM that took the subnet back from a
    # test's SM was seen to leave the ports naming the old one), and the
    # builds take the CPU the stage leaves.
    renice -n 10 -p $$ >/dev/null 2>&1 || true
fi

if [ "${RDMA_CI_SKIP_HOST:-0}" != 1 ]; then

    step "shipped bindings match bindgen (ci/bindings.sh check)"
    timed bindings bash "$CI_DIR/bindings.sh" check

    step "docs as on docs.rs, rdma-core hidden (ci/docsrs.sh)"
    timed docsrs bash "$CI_DIR/docsrs.sh"
    prune_tree target/docsrs

    step "host tests: cargo test --workspace"
    timed host-tests cargo_cmd test --workspace

    # Bounded fuzzing of the MAD decoder (libFuzzer and ASan, built by ci/fuzz.sh; RDMA_FUZZ_SECONDS, default 60).
    timed fuzz bash "$CI_DIR/fuzz.sh" "${RDMA_FUZZ_SECONDS:-60}"
    prune_tree fuzz/target

    # The pure-Rust tests under Miri (nightly; installed when missing).
    if [ "${RDMA_CI_SKIP_MIRI:-0}" != 1 ]; then
        timed miri bash "$CI_DIR/miri.sh"
        prune_tree target/miri
    fi

    step "cargo clippy --workspace --all-targets -- -D warnings"
    timed clippy cargo_cmd clippy --workspace --all-targets -- -D warnings

    step "cargo doc --workspace --no-deps (RUSTDOCFLAGS=-Dwarnings)"
    RUSTDOCFLAGS="${RUSTDOCFLAGS:+$RUSTDOCFLAGS }-Dwarnings" timed doc cargo_cmd doc --workspace --no-deps

    step "packages: ci/package.sh (cargo package; rdma and its tests built from the .crate files)"
    timed package bash "$CI_DIR/package.sh"
    prune_tree target/package-check

    if [ "${RDMA_CI_SKIP_MSRV:-0}" != 1 ]; then
        step "MSRV: ci/msrv.sh (the workspace with exactly rustc 1.85)"
        timed msrv bash "$CI_DIR/msrv.sh"
        prune_tree target/msrv
    fi
fi

# The fabric stage started beside the host stages: its output and results.
if [ -n "$FABRIC_PID" ]; then
    step "fabric tests: waiting for the stage started at the build"
    T_WAIT=$(now)
    wait "$FABRIC_PID" || true
    renice -n 0 -p $$ >/dev/null 2>&1 || true
    FABRIC_PID=
    cat "$CI_WORK/fabric-stage.log"
    [ "$(cat "$CI_WORK/fabric-stage.suite-rc" 2>/dev/null)" = 0 ] ||
        FAIL+=("ci/fabric.sh --suite: the fabric tests failed")
    [ "$(cat "$CI_WORK/fabric-stage.bench-rc" 2>/dev/null)" = 0 ] ||
        FAIL+=("ci/sm-bench.sh: fat700 did not come up under both SMs")
    SUMMARIES+=("$(cat "$CI_WORK/sm-bench.summary" 2>/dev/null || echo "sm-bench: no summary")")
    TIMINGS+=("fabric $(cat "$CI_WORK/fabric-stage.seconds" 2>/dev/null || echo ?)s (waited $(elapsed "$T_WAIT")s)")
    disk_note fabric
    mapfile -t FAB < <(cat "$CI_WORK/fabric.summary" 2>/dev/null || echo "fabric: no summary")
    SUMMARIES+=("${FAB[@]}")
fi

step "device test binary"
if [ -n "${RDMA_TEST_DEVICE_BIN:-}" ]; then
    DEVICE_BIN=$(realpath "$RDMA_TEST_DEVICE_BIN")
    echo "using RDMA_TEST_DEVICE_BIN=$DEVICE_BIN"
else
    # The interop tests run the example programs built next to the device binary.
    timed examples-build cargo_cmd build -p rdma-examples
    # The crate docs' programs (rdma/examples), run by cm_examples::doc_*.
    timed crate-examples-build cargo_cmd build -p rdma --examples --features stream
    JSON="$CI_WORK/device-build.json"
    timed device-build cargo_cmd test -p rdma-tests --test device --no-run --message-format=json >"$JSON"
    DEVICE_BIN=$(cargo_executable device test <"$JSON")
    [ -n "$DEVICE_BIN" ] || die "no executable for test target 'device' in cargo's JSON output ($JSON)"
fi
[ -x "$DEVICE_BIN" ] || die "device test binary $DEVICE_BIN is missing or not executable"
echo "device test binary: $DEVICE_BIN"

step "device tests in the VM (${PROVIDERS[*]})"
RUN_DIR=$(new_run_dir test)
ARGS=()
if [ -n "${RDMA_TEST_FILTER:-}" ]; then ARGS=("$RDMA_TEST_FILTER"); fi
PARALLEL=${RDMA_TEST_PARALLEL:-1}
{
    guest_prelude "$RUN_DIR"
    guest_device_setup "$RUN_DIR"
    guest_provider_runs "$RUN_DIR" "device tests" "$PARALLEL" "${RDMA_PROVIDER_TIMEOUT:-900}" "${PROVIDERS[@]}" \
        -- "$DEVICE_BIN" "${ARGS[@]}"
    printf 'echo 0 > %q\n' "$RUN_DIR/status"
} >"$RUN_DIR/guest.sh"
# The providers' limits (at the same time, or one after the other) and the boot.
DEVICE_VM_TIMEOUT=${RDMA_VM_TIMEOUT:-$(vm_limit "$PARALLEL" "${RDMA_PROVIDER_TIMEOUT:-900}" "${#PROVIDERS[@]}" 300)}
RDMA_VM_TIMEOUT=$DEVICE_VM_TIMEOUT vm_boot "$RUN_DIR" "$RUN_DIR/guest.sh"
TIMINGS+=("vm ${VM_SECONDS}s")

step "results"
vm_failures "$DEVICE_VM_TIMEOUT"
tp=0 tf=0 ts=0
provider_results "$RUN_DIR" "${PROVIDERS[@]}"
# The cross-host suite: two VMs, two kernels, rxe (and siw) over one link.
if [ "${RDMA_CI_SKIP_TWOHOST:-0}" != 1 ] && [ -z "${RDMA_TEST_FILTER:-}" ] && [ -z "${RDMA_TEST_DEVICE_BIN:-}" ]; then
    T_TWO=$(now)
    RDMA_CI_SKIP_SETUP=1 bash "$CI_DIR/twohost.sh" --suite || FAIL+=("ci/twohost.sh --suite: the cross-host suite failed")
    TIMINGS+=("twohost $(elapsed "$T_TWO")s")
    TWOHOST=$(cat "$CI_WORK/twohost.summary" 2>/dev/null || true)
    SUMMARIES+=("${TWOHOST:-twohost: no summary}")
fi
# Ours against perftest (its own VM boot): fails only when a benchmark run fails.
if [ "${RDMA_CI_SKIP_PERF:-0}" != 1 ] && [ -z "${RDMA_TEST_FILTER:-}" ] && [ -z "${RDMA_TEST_DEVICE_BIN:-}" ]; then
    T_PERF=$(now)
    RDMA_CI_SKIP_SETUP=1 bash "$CI_DIR/perf.sh" --short || FAIL+=("ci/perf.sh --short: a benchmark run failed")
    TIMINGS+=("perf $(elapsed "$T_PERF")s")
fi
# The device tests under valgrind memcheck (its own VM boot): fails on a failed test or any error.
if [ "${RDMA_CI_SKIP_MEMCHECK:-0}" != 1 ] && [ -z "${RDMA_TEST_FILTER:-}" ] && [ -z "${RDMA_TEST_DEVICE_BIN:-}" ]; then
    T_MC=$(now)
    rm -f "$CI_WORK/memcheck.summary"
    RDMA_CI_SKIP_SETUP=1 RDMA_TEST_DEVICE_BIN=$DEVICE_BIN bash "$CI_DIR/memcheck.sh" ||
        FAIL+=("ci/memcheck.sh: the device tests under memcheck failed")
    TIMINGS+=("memcheck $(elapsed "$T_MC")s")
    mapfile -t MC < <(cat "$CI_WORK/memcheck.summary" 2>/dev/null || echo "memcheck: no summary")
    SUMMARIES+=("${MC[@]}")
fi
# The version matrix (ci/matrix.sh): Debian 13 (trixie: rdma-core 56, kernel 6.12) on
# every run; RDMA_CI_MATRIX=all runs bookworm, trixie and sid; a list ("trixie sid")
# names releases; RDMA_CI_MATRIX=none skips it.
if [ -z "${RDMA_TEST_FILTER:-}" ] && [ -z "${RDMA_TEST_DEVICE_BIN:-}" ]; then
    case "${RDMA_CI_MATRIX:-trixie}" in
    all) MATRIX=(bookworm trixie sid) ;;
    none) MATRIX=() ;;
    *) read -ra MATRIX <<<"${RDMA_CI_MATRIX:-trixie}" ;;
    esac
    # RDMA_CI_MATRIX_EXCLUDE="TEST ..." leaves tests out of the matrix runs, named
    # in the output (none by default).
    MATRIX_EXCLUDE=${RDMA_CI_MATRIX_EXCLUDE-}
    MATRIX_FILTER=
    for t in $MATRIX_EXCLUDE; do MATRIX_FILTER+="${MATRIX_FILTER:+,}!$t"; done
    for rel in "${MATRIX[@]}"; do
        T_MX=$(now)
        rm -f "$CI_WORK/matrix-$rel.summary"
        [ -z "$MATRIX_EXCLUDE" ] || echo "matrix $rel: left out (see ci/test.sh): $MATRIX_EXCLUDE"
        RDMA_TEST_FILTER=$MATRIX_FILTER RDMA_CI_SKIP_SETUP=1 bash "$CI_DIR/matrix.sh" "$rel" || FAIL+=("ci/matrix.sh $rel: failed")
        TIMINGS+=("matrix-$rel $(elapsed "$T_MX")s")
        disk_note "matrix-$rel"
        prune_tree "target/matrix/$rel/cargo"
        mapfile -t MX < <(cat "$CI_WORK/matrix-$rel.summary" 2>/dev/null || echo "matrix $rel: no summary")
        SUMMARIES+=("${MX[@]}")
    done
fi
chown_to_invoker "$CI_WORK"
echo "timings: ${TIMINGS[*]} total $(elapsed "$T_START")s"
echo "disk: ${DISK_START:-?} GiB free at the start, least ${DISK_LEAST:-?} GiB (after $DISK_LEAST_AFTER), $(disk_free_gib) GiB at the end"
echo "logs: $RUN_DIR"
echo
printf '%s\n' "${SUMMARIES[@]}"
echo "device: $tp passed, $tf failed, $ts skipped"
if [ "${#FAIL[@]}" -gt 0 ]; then
    printf '!! test.sh: %s\n' "${FAIL[@]}" >&2
    exit 1
fi
