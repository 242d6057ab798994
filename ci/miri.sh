#!/usr/bin/env bash
# ci/miri.sh: run the pure-Rust tests under Miri (undefined-behaviour checks).
#
# Miri interprets the test binaries and reports undefined behaviour: out-of-bounds
# or misaligned accesses, use after free, invalid values, aliasing violations
# (Stacked Borrows), data races, leaks. It cannot call foreign functions
# ("unsupported operation: can't call foreign function"), so it runs only the
# tests that never reach libibverbs, librdmacm, libibumad or the C shims:
#
#   rdma (lib)             every unit test: the MAD codec (rdma::mad), umad
#                          addresses, agents, CA strings and port reads
#                          (rdma::umad), the work-request list linking (rdma::wr),
#                          the error type, GIDs, CM addresses, MTU codes
#   rdma                   tests/send_sync.rs
#   umad-sys (lib)         the kernel-ABI layout tests (not umad_get_mad: C)
#   ibverbs-sys            tests/static_inlines.rs: the unions and the macro-form
#                          bindings (not ibv_inc_rkey: a C shim call)
#   rdmacm-sys             tests/shared_types.rs: the CM id's verbs types (not
#                          the two that call the C shim)
#   rdma-examples (lib)    the pingpong message codec (not perf::report: rdtsc)
#
# All the tests of these targets run except those in SKIP below (by name). A new
# test that calls C fails here with the message above: add it to SKIP, or mark it
# `#[cfg_attr(miri, ignore)]` in its test module, saying why. Each binary in
# EXPECT must run at least one test.
#
# Installs what it needs when missing: the nightly toolchain with miri and
# rust-src (`rustup toolchain install nightly --profile minimal --component
# miri,rust-src --no-self-update`), and Miri's sysroot (`cargo +nightly miri
# setup`, in ~/.cache/miri). Builds into target/miri (cargo miri's default),
# apart from the normal build; the log is target/ci/miri.log. Prints the tests
# run per test binary and in total; fails when Miri reports undefined behaviour
# or an unsupported operation, when a test fails, or when a binary of EXPECT
# runs none.
#
# Knobs: MIRIFLAGS (passed through; none needed by default).
set -Eeuo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

# as_user CMD ARGS...: CMD (rustup, cargo) as the invoking user under sudo (like
# cargo_cmd), else directly; ~/.cargo/bin on PATH. The toolchain is always named
# explicitly (+nightly): CI sets RUSTUP_AUTO_INSTALL=0.
as_user() {
    local u home
    u=$(invoking_user)
    if [ -n "$u" ]; then
        home=$(getent passwd "$u" | cut -d: -f6)
        sudo -u "$u" -H --preserve-env=MIRIFLAGS,CARGO_TARGET_DIR,CARGO_INCREMENTAL,CARGO_TERM_COLOR,CI,RUSTUP_AUTO_INSTALL \
            -- env "PATH=$home/.cargo/bin:/usr/local/bin:/usr/bin:/bin" "$@"
    else
        PATH="$HOME/.cargo/bin:$PATH" "$@"
    fi
}

T0=$(now)
step "nightly toolchain with miri"
as_user rustup --version >/dev/null 2>&1 || die "rustup not found: Miri needs a rustup-managed nightly toolchain"
installed=$(as_user rustup component list --toolchain nightly --installed 2>/dev/null || true)
if grep -q '^miri' <<<"$installed" && grep -q '^rust-src' <<<"$installed"; then
    echo "nightly has miri and rust-src"
else
    echo "installing nightly with miri and rust-src (nightly or a component is missing)"
    # --no-self-update: installing a toolchain must not replace the rustup binary.
    as_user rustup toolchain install nightly --profile minimal --component miri,rust-src --no-self-update
fi
as_user cargo +nightly miri --version

step "miri setup (sysroot)"
as_user cargo +nightly miri setup

ensure_target_dir
LOG="$CI_WORK/miri.log"
# One cargo invocation: one feature resolution, so each crate is built once.
PACKAGES=(-p rdma -p umad-sys -p ibverbs-sys -p rdmacm-sys -p rdma-examples)
TARGETS=(--lib --test send_sync --test static_inlines --test shared_types)
# The tests that call C (rdma-core or the C shims) or an unsupported intrinsic;
# --skip matches substrings of test names.
SKIP=(
    umad_get_mad_skips_exactly_umad_size_bytes    # umad-sys: umad_get_mad, umad_size (libibumad)
    ibv_inc_rkey_bumps_the_low_byte_only          # ibverbs-sys: the C shim of ibv_inc_rkey
    rdma_get_local_and_peer_addr_point_into_the_route # rdmacm-sys: C shim
    rdma_seterrno_sets_errno_and_returns_minus_one    # rdmacm-sys: C shim
    perf::report::tests::                         # rdma-examples: rdtsc (llvm.x86.rdtsc)
    net::tests::                                  # rdma-examples: getaddrinfo (libc)
)
# The test binaries that must run at least one test (the file name without its hash).
EXPECT=(rdma send_sync umad_sys static_inlines shared_types rdma_examples)

step "cargo +nightly miri test ${PACKAGES[*]} ${TARGETS[*]}"
SKIP_ARGS=()
for t in "${SKIP[@]}"; do SKIP_ARGS+=(--skip "$t"); done
T1=$(now)
RC=0
as_user cargo +nightly miri test --no-fail-fast "${PACKAGES[@]}" "${TARGETS[@]}" -- "${SKIP_ARGS[@]}" 2>&1 |
    tee "$LOG" || RC=${PIPESTATUS[0]}
chown_to_invoker "$LOG"
RUN_SECONDS=$(elapsed "$T1")

step "summary"
# Per test binary: "NAME passed ignored" from its Running line and its result line.
RESULTS=$(awk '
    /^ *Running / {
        n = $NF; sub(/\)$/, "", n); sub(/^.*\//, "", n); sub(/-[0-9a-f]+$/, "", n)
        src = $0; sub(/^ *Running /, "", src); sub(/ \(.*$/, "", src)
    }
    /^test result: / { p = $0; sub(/.* ok\. |.* FAILED\. /, "", p); split(p, f, /[ ;]+/)
                       printf "%s %d %d %s\n", n, f[1], f[5], src }
' "$LOG")
TOTAL=0 IGNORED=0
while read -r name passed ignored src; do
    [ -n "$name" ] || continue
    printf '  %-16s %3d passed, %d ignored  (%s)\n' "$name" "$passed" "$ignored" "$src"
    TOTAL=$((TOTAL + passed)) IGNORED=$((IGNORED + ignored))
done <<<"$RESULTS"
if [ "$RC" != 0 ]; then
    grep -E '^error|^test .* (error|FAILED)|Undefined Behavior|unsupported operation' "$LOG" | head -n 30 >&2 || true
    die "cargo miri test exited with status $RC: undefined behaviour, an unsupported operation (a test that calls C: add it to SKIP) or a failed test (log: $LOG)"
fi
for b in "${EXPECT[@]}"; do
    n=$(awk -v b="$b" '$1 == b { s += $2 } END { print s + 0 }' <<<"$RESULTS")
    [ "$n" -gt 0 ] || die "test binary $b ran no test under Miri (see $LOG)"
done
echo "miri: $TOTAL tests passed under Miri, $IGNORED ignored, no undefined behaviour (tests ${RUN_SECONDS}s, total $(elapsed "$T0")s${MIRIFLAGS:+, MIRIFLAGS=$MIRIFLAGS})"
