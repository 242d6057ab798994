#!/usr/bin/env bash
# ci/fuzz.sh [SECONDS]: fuzz the MAD codec (rdma::mad) for a bounded time.
#
# Builds with libFuzzer (libfuzzer-sys: coverage-guided) and AddressSanitizer,
# the instrumentation cargo-fuzz would add, by hand: cargo-fuzz is a
# wrapper that would have to be compiled on every fresh machine first. The
# targets are fuzz/fuzz_targets/mad_decode.rs (the MAD, its headers and the
# SMA/PerfMgt attributes) and fuzz/fuzz_targets/sa_decode.rs (the SA records,
# the GetTable iterator and the SA status), each seeded with its corpus kept
# in fuzz/corpus/TARGET. SECONDS is split evenly between the targets. New
# inputs go to a scratch directory, so the kept corpora do not grow by
# themselves (merge by hand: see fuzz/README.md; `cargo fuzz` works on the
# same crate). The sanitizer flag is nightly-only (-Zsanitizer); the stable
# toolchain accepts it with RUSTC_BOOTSTRAP=1, set here for the fuzz build
# only.
#
# Prints the executions and the duration of each target; fails on a crash
# (the input is left in fuzz/artifacts/TARGET/), after running the other
# targets.
#
# Knobs: SECONDS (argument) or RDMA_FUZZ_SECONDS (default 60), the total for
# all targets.
set -Eeuo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

SECS=${1:-${RDMA_FUZZ_SECONDS:-60}}
TARGETS=(mad_decode sa_decode)
# Each target's share of the time, at least 1 s.
PER=$(( SECS / ${#TARGETS[@]} ))
[ "$PER" -ge 1 ] || PER=1

# What `cargo fuzz build -O` passes: SanitizerCoverage as libFuzzer reads it
# (8-bit counters, the PC table, compare tracing), --cfg fuzzing, debug
# assertions and overflow checks in a release build, and ASan. With an
# explicit --target, the flags reach only the target's code, not build
# scripts or proc macros.
TRIPLE=x86_64-unknown-linux-gnu
FUZZ_RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4"
FUZZ_RUSTFLAGS+=" -Cllvm-args=-sanitizer-coverage-inline-8bit-counters"
FUZZ_RUSTFLAGS+=" -Cllvm-args=-sanitizer-coverage-pc-table"
FUZZ_RUSTFLAGS+=" -Cllvm-args=-sanitizer-coverage-trace-compares"
FUZZ_RUSTFLAGS+=" --cfg fuzzing -Cdebug-assertions -Coverflow-checks -Zsanitizer=address"

# fuzz_cargo ARGS...: cargo as the invoking user (like cargo_cmd), with
# RUSTC_BOOTSTRAP=1 and the fuzzing flags.
fuzz_cargo() {
    local u home
    u=$(invoking_user)
    if [ -n "$u" ]; then
        home=$(getent passwd "$u" | cut -d: -f6)
        sudo -u "$u" -H -- env "PATH=$home/.cargo/bin:/usr/local/bin:/usr/bin:/bin" \
            RUSTC_BOOTSTRAP=1 RUSTFLAGS="$FUZZ_RUSTFLAGS" CARGO_INCREMENTAL=0 cargo "$@"
    else
        PATH="$HOME/.cargo/bin:$PATH" RUSTC_BOOTSTRAP=1 RUSTFLAGS="$FUZZ_RUSTFLAGS" cargo "$@"
    fi
}

step "fuzz build (${TARGETS[*]})"
fuzz_cargo build --manifest-path fuzz/Cargo.toml --release --target "$TRIPLE" \
    $(printf -- '--bin %s ' "${TARGETS[@]}")
BIN_DIR=fuzz/target/$TRIPLE/release

WORK=$(mktemp -d)
chmod 777 "$WORK"
trap 'rm -rf "$WORK"' EXIT
FAILED=()
SUMMARY=()
for TARGET in "${TARGETS[@]}"; do
    step "fuzz run ($TARGET, ${PER}s)"
    NEW="$WORK/$TARGET"
    mkdir -p "$NEW"
    chmod 777 "$NEW"
    LOG="$WORK/$TARGET.log"
    T0=$(now)
    set +e
    mkdir -p "fuzz/artifacts/$TARGET"
    "$BIN_DIR/$TARGET" -artifact_prefix="fuzz/artifacts/$TARGET/" "$NEW" "fuzz/corpus/$TARGET" \
        -max_total_time="$PER" -max_len=1024 -print_final_stats=1 2>&1 | tee "$LOG" | grep -E '^(#[0-9]+\s+(INITED|DONE|pulse))|^Done|ERROR|panicked|SUMMARY'
    RC=${PIPESTATUS[0]}
    set -e
    DUR=$(elapsed "$T0")
    RUNS=$(sed -nE 's/^Done ([0-9]+) runs in ([0-9]+) second.*/\1/p' "$LOG" | tail -n 1)
    [ -n "$RUNS" ] || RUNS=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+).*/\1/p' "$LOG" | tail -n 1)
    LINE="fuzz: $TARGET: ${RUNS:-?} executions in ${DUR}s (limit ${PER}s), corpus $(ls "fuzz/corpus/$TARGET" | wc -l) seeds + $(ls "$NEW" | wc -l) new"
    echo "$LINE"
    SUMMARY+=("$LINE")
    if [ "$RC" != 0 ]; then
        tail -n 40 "$LOG" >&2
        FAILED+=("$TARGET (exit $RC)")
    fi
done
printf '%s\n' "${SUMMARY[@]}"
if [ "${#FAILED[@]}" != 0 ]; then
    die "fuzzing failed: ${FAILED[*]}; crash inputs in fuzz/artifacts/TARGET/"
fi
