#!/usr/bin/env bash
# ci/memcheck.sh: the device tests under valgrind memcheck, in one VM boot, on
# rxe and siw (part of ci/test.sh; `RDMA_CI_SKIP_MEMCHECK=1` skips it there).
#
# The device binary runs once per provider under memcheck (the providers at the
# same time by default), with the subset
# SUBSET below (the binary's filter: substrings separated by commas, `!`
# excludes). Freed blocks are filled with 0xa5 (valgrind's --free-fill; its
# malloc replaces glibc's), and the programs the tests start, which run
# natively (--trace-children=no), get glibc's free-poisoning with the
# per-thread cache off, so that a stale pointer reads poison there too.
# Suppressions: ci/valgrind.supp (findings inside rdma-core only, each with why).
#
# Prints per provider `memcheck rxe: N passed, N failed, N skipped, E valgrind errors`,
# the test time per group, and for each error the test that was running when it
# was first seen. Fails when a test fails, valgrind reports any error (invalid
# read or write, use of an uninitialised value, bad free, bad syscall argument),
# a summary is missing, or a provider run or the VM times out.
#
# Knobs (RDMA_MEMCHECK_*, RDMA_TEST_DEVICE_BIN, RDMA_TEST_PROVIDERS, RDMA_VM_TIMEOUT,
# RDMA_CI_SKIP_SETUP): see the table in ci/README.md.
set -Eeuo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

# The groups memcheck covers by default, and the tests of them it leaves out
# (each as "NAME reason"). RDMA_MEMCHECK_ALL=1 runs every device test instead.
# All of them fit today (~9.5 min of VM time); the first to leave out are
# process_killed::server_process_killed_* and process_killed::client_process_killed_*
# (40-80 s together per provider; their peers run natively anyway). Of the
# byte and message streams, the tests that take a few seconds (80 s per
# provider together under memcheck): the others move tens of MiB, run
# for more than their 60 s limit under memcheck, or measure CPU time.
GROUPS_DEFAULT=(context:: cq:: qp:: mr:: srq:: mw:: ud:: process_killed:: cm:: cm_options:: cm_ep:: bad_input:: umad::receive::
    stream::echo_of_every_size stream::half_close_then_reply stream::reads_and_writes_after_shutdown
    stream::flush_succeeds stream::a_peer_of_another_wire_format stream_msg::boundaries
    stream_msg::a_held_message stream_msg::one_sided_on_a_stream stream_msg::bad_one_sided
    stream_msg::a_cancelled_accept)
EXCLUDE=(
    "context::pkey_table_and_port_attributes not in the default subset"
    "context::create_destroy_loop_leaves_no_resources not in the default subset"
    "context::fork_init_reports_the_kernel not in the default subset"
    "cq::cq_resize_keeps_completions_and_bad_sizes_are_refused not in the default subset"
    "qp::qp_query_reports_what_was_set not in the default subset"
    "srq::srq_query_limit_event_and_resize not in the default subset"
    "ud::ud_qp_query_reports_its_qkey not in the default subset"
)
# Group labels for the time per group in the report.
TIME_GROUPS=(cm:: cm_options:: cm_ep:: context:: cq:: qp:: mr:: srq:: mw:: ud:: process_killed:: bad_input:: umad::receive:: stream:: stream_msg::)

VG_ERROR_EXIT=99
VALGRIND=${RDMA_VALGRIND:-/usr/bin/valgrind}

T_START=$(now)
read_providers
if [ -n "${RDMA_MEMCHECK_FILTER:-}" ]; then
    FILTER=$RDMA_MEMCHECK_FILTER
elif [ "${RDMA_MEMCHECK_ALL:-0}" = 1 ]; then
    FILTER=
else
    FILTER=$(IFS=,; echo "${GROUPS_DEFAULT[*]}")
    for e in "${EXCLUDE[@]}"; do FILTER+=",!${e%% *}"; done
fi
PARALLEL=${RDMA_MEMCHECK_PARALLEL:-1}
# The VM's two CPUs share the host's cores with QEMU's own threads: two valgrind
# runs at once gain only the time their tests wait (measured: both providers in
# 402 s at once, rxe's run 363 s; one after the other, 446 s in an earlier run),
# and each takes longer than alone, hence the longer limit.
if [ "${RDMA_MEMCHECK_ALL:-0}" = 1 ]; then
    PROVIDER_TIMEOUT=${RDMA_MEMCHECK_TIMEOUT:-2400}
elif [ "$PARALLEL" = 1 ]; then
    PROVIDER_TIMEOUT=${RDMA_MEMCHECK_TIMEOUT:-900}
else
    PROVIDER_TIMEOUT=${RDMA_MEMCHECK_TIMEOUT:-600}
fi
export RDMA_VM_TIMEOUT=${RDMA_VM_TIMEOUT:-$(vm_limit "$PARALLEL" "$PROVIDER_TIMEOUT" "${#PROVIDERS[@]}" 120)}

ci_setup
ensure_target_dir
[ -x "$VALGRIND" ] || die "$VALGRIND missing (ci/setup.sh installs valgrind)"

step "device test binary"
if [ -n "${RDMA_TEST_DEVICE_BIN:-}" ]; then
    DEVICE_BIN=$(realpath "$RDMA_TEST_DEVICE_BIN")
else
    cargo_cmd build -p rdma-examples
    JSON="$CI_WORK/memcheck-build.json"
    cargo_cmd test -p rdma-tests --test device --no-run --message-format=json >"$JSON"
    DEVICE_BIN=$(cargo_executable device test <"$JSON")
    [ -n "$DEVICE_BIN" ] || die "no executable for test target 'device' in cargo's JSON output ($JSON)"
fi
[ -x "$DEVICE_BIN" ] || die "device test binary $DEVICE_BIN is missing or not executable"
echo "device test binary: $DEVICE_BIN"
echo "filter: ${FILTER:-(every test)}"
for e in "${EXCLUDE[@]}"; do echo "left out: $e"; done

VG_OPTS=(
    --tool=memcheck --error-exitcode="$VG_ERROR_EXIT"
    --leak-check=no --errors-for-leak-kinds=none
    --trace-children=no --child-silent-after-fork=yes
    --free-fill=0xa5 --num-callers=40
    # Inline info costs ~1 s of startup natively, ~30 s under TCG; a debug build inlines little.
    --read-inline-info=no
    # Valgrind runs one thread at a time; its default lock lets a spinning thread
    # starve the others (a poller would miss its deadline), the ticket lock does not.
    --fair-sched=yes
    --suppressions="$CI_DIR/valgrind.supp" --gen-suppressions=all
)
if [ "${RDMA_MEMCHECK_ORIGINS:-0}" = 1 ]; then VG_OPTS+=(--track-origins=yes); fi

step "device tests under memcheck in the VM (${PROVIDERS[*]})"
RUN_DIR=$(new_run_dir memcheck)
{
    guest_prelude "$RUN_DIR"
    guest_device_setup "$RUN_DIR"
    # For the natively run children: glibc poisons what it frees, with no per-thread cache.
    echo 'export MALLOC_PERTURB_=165 GLIBC_TUNABLES=glibc.malloc.tcache_count=0'
    # A panic's backtrace takes ~40 s to symbolise under valgrind in the VM (one test panics on purpose).
    echo 'export RUST_BACKTRACE=0'
    # valgrind's messages go to stderr, into the same pipe as the test lines, so
    # that each error lands after the `test NAME ...` that was running.
    CMD=("$VALGRIND" "${VG_OPTS[@]}" "$DEVICE_BIN")
    [ -z "$FILTER" ] || CMD+=("$FILTER")
    guest_provider_runs "$RUN_DIR" memcheck "$PARALLEL" "$PROVIDER_TIMEOUT" "${PROVIDERS[@]}" -- "${CMD[@]}"
    printf 'echo 0 > %q\n' "$RUN_DIR/status"
} >"$RUN_DIR/guest.sh"
vm_boot "$RUN_DIR" "$RUN_DIR/guest.sh"

step "results"
FAIL=()
SUMMARIES=()
vm_failures "$RDMA_VM_TIMEOUT"
for p in "${PROVIDERS[@]}"; do
    log=$RUN_DIR/$p.log
    if [ ! -f "$log" ]; then
        SUMMARIES+=("memcheck $p: did not run")
        FAIL+=("memcheck $p: did not run")
        continue
    fi
    st=$(status_of "$RUN_DIR/$p.status")
    secs=$(cat "$RUN_DIR/$p.seconds" 2>/dev/null || echo '?')
    line=$(summary_line "$log" "$p")
    errs=$(tr -d '\r' <"$log" | sed -nE 's/^==[0-9]+== ERROR SUMMARY: ([0-9]+) errors? from.*/\1/p' | tail -n 1)
    # Per test (a `test NAME ... ` line, then its `ok (N ms)` possibly after
    # valgrind's lines): the time per group, and the test that was running when
    # each error context was first printed (gen-suppressions marks each one).
    tr -d '\r' <"$log" | awk -v groups="${TIME_GROUPS[*]}" -v p="$p" '
        BEGIN { n = split(groups, g, " ") }
        function group(name,   i) { for (i = 1; i <= n; i++) if (index(name, g[i])) return g[i]; return "other" }
        /^test [^ ]+ \.\.\. / { cur = $2 }
        /<insert_a_suppression_name_here>/ { getline kind; gsub(/^ +/, "", kind); errs[cur] = errs[cur] " " kind }
        !/^==[0-9]+==/ && match($0, /(ok|FAILED) \([0-9]+ ms\)/) {
            ms = substr($0, RSTART, RLENGTH); gsub(/[^0-9]/, "", ms)
            t[group(cur)] += ms
        }
        END {
            s = ""
            for (i = 1; i <= n; i++) if (g[i] in t) s = s sprintf(" %s %.1fs", g[i], t[g[i]] / 1000)
            if ("other" in t) s = s sprintf(" other %.1fs", t["other"] / 1000)
            print "memcheck " p " time per group:" (s == "" ? " none" : s)
            for (k in errs) print "memcheck " p " valgrind errors first seen in " (k == "" ? "(before the first test)" : k) ":" errs[k]
        }'
    echo "memcheck $p: run ${secs}s (exit status ${st:-none})"
    if [ -z "$line" ]; then
        SUMMARIES+=("memcheck $p: no summary line (exit status ${st:-none}), ${errs:-?} valgrind errors")
        FAIL+=("memcheck $p: summary line missing")
    else
        SUMMARIES+=("memcheck $line, ${errs:-?} valgrind errors")
        read -r _ n_f _ < <(summary_counts "$line")
        [ "$n_f" = 0 ] || FAIL+=("memcheck $p: $n_f test(s) failed")
        while IFS= read -r f; do FAIL+=("memcheck $f"); done < <(failed_lines "$log" "$p")
    fi
    if [ -z "$errs" ]; then
        FAIL+=("memcheck $p: no valgrind ERROR SUMMARY (valgrind did not finish)")
    elif [ "$errs" != 0 ]; then
        FAIL+=("memcheck $p: valgrind reported $errs error(s) (see $log)")
    fi
    if timed_out "$st"; then
        FAIL+=("memcheck $p: timed out after $PROVIDER_TIMEOUT s (RDMA_MEMCHECK_TIMEOUT)")
    elif [ -n "$line" ] && [ "$st" != 0 ] && [ "$st" != 1 ] && [ "$st" != "$VG_ERROR_EXIT" ]; then
        FAIL+=("memcheck $p: exited with status ${st:-none}")
    fi
done
printf '%s\n' "${SUMMARIES[@]}" >"$CI_WORK/memcheck.summary"
chown_to_invoker "$CI_WORK"
echo "memcheck: VM ${VM_SECONDS}s, total $(elapsed "$T_START")s; logs: $RUN_DIR"
echo
printf '%s\n' "${SUMMARIES[@]}"
if [ "${#FAIL[@]}" -gt 0 ]; then
    printf '!! memcheck.sh: %s\n' "${FAIL[@]}" >&2
    exit 1
fi
