# shellcheck shell=bash
# shellcheck disable=SC2034 # globals (VM_*, CI_*) are read by the sourcing scripts
# Shared helpers for the ci/ scripts. Sourced, never executed.
#
# Provides: CI_DIR, REPO_ROOT, CI_WORK (= $REPO_ROOT/target/ci), step(), die(),
# the ERR trap that names the failing step, detect_kver(), and a few utilities.

CI_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$CI_DIR/.." && pwd)
CI_WORK="$REPO_ROOT/target/ci"
CI_SCRIPT=$(basename "${BASH_SOURCE[1]:-$0}")
CURRENT_STEP="start"

export DEBIAN_FRONTEND=noninteractive
# No incremental caches in the ci/ builds: each holds gigabytes per target tree (a full
# run builds six trees) and a run that builds everything once gains nothing from them.
# Every ci/ script sets it, so their builds share fingerprints; CARGO_INCREMENTAL=1 overrides.
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}

# step "description": print a header and remember the step for error messages.
step() {
    CURRENT_STEP="$*"
    printf '\n== %s: %s\n' "$CI_SCRIPT" "$*"
}

# die "why": fail the current step with a message.
die() {
    printf '!! %s: step "%s" failed: %s\n' "$CI_SCRIPT" "$CURRENT_STEP" "$*" >&2
    exit 1
}

_ci_on_err() {
    local rc=$? line=$1 cmd=$2
    printf '!! %s: step "%s" failed: command `%s` exited with status %d (line %s)\n' \
        "$CI_SCRIPT" "$CURRENT_STEP" "$cmd" "$rc" "$line" >&2
}
trap '_ci_on_err "$LINENO" "$BASH_COMMAND"' ERR

# ci_setup: run ci/setup.sh unless RDMA_CI_SKIP_SETUP=1.
ci_setup() {
    if [ "${RDMA_CI_SKIP_SETUP:-0}" != 1 ]; then
        step "setup (ci/setup.sh)"
        bash "$CI_DIR/setup.sh"
    fi
}

# read_providers: PROVIDERS (an array) from RDMA_TEST_PROVIDERS (default "rxe siw"),
# each checked.
read_providers() {
    local p
    read -ra PROVIDERS <<<"${RDMA_TEST_PROVIDERS:-rxe siw}"
    for p in "${PROVIDERS[@]}"; do
        case "$p" in rxe | siw) ;; *) die "unknown provider '$p' in RDMA_TEST_PROVIDERS (rxe|siw)" ;; esac
    done
}

# Seconds since the epoch, with fractions, for timings.
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# Newest installed Debian amd64 kernel that has /boot/vmlinuz-<ver> and its modules.
# RDMA_CI_KVER overrides. Prints the version, or nothing.
detect_kver() {
    if [ -n "${RDMA_CI_KVER:-}" ]; then
        echo "$RDMA_CI_KVER"
        return 0
    fi
    local pkg ver
    { dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' 'linux-image-*-amd64' 2>/dev/null || true; } |
        awk '$1 == "ii" { print $2 }' |
        while read -r pkg; do
            ver=${pkg#linux-image-}
            [ "$ver" = amd64 ] && continue # the meta package
            if [ -e "/boot/vmlinuz-$ver" ] && [ -d "/lib/modules/$ver/kernel" ]; then
                echo "$ver"
            fi
        done | sort -V | tail -n 1 || true
}

# Under `sudo`, the invoking user (for cargo and for file ownership); empty otherwise.
invoking_user() {
    if [ "$(id -u)" = 0 ] && [ -n "${SUDO_USER:-}" ] && [ "${SUDO_USER}" != root ]; then
        echo "$SUDO_USER"
    fi
}

# Make sure $REPO_ROOT/target exists and, under sudo, belongs to the invoking user,
# so that root-run steps do not leave a target/ that the user's cargo cannot write.
ensure_target_dir() {
    local u
    u=$(invoking_user)
    if [ ! -d "$REPO_ROOT/target" ]; then
        if [ -n "$u" ]; then
            install -d -o "$u" -g "$(id -g "$u")" "$REPO_ROOT/target"
        else
            mkdir -p "$REPO_ROOT/target"
        fi
    fi
    mkdir -p "$CI_WORK"
}

# Free space, in whole GiB, of the file system that holds the checkout (and target/).
disk_free_gib() {
    { df -P -B1G "$REPO_ROOT" 2>/dev/null || true; } | awk 'NR == 2 { print $4 }'
}

# prune_tree DIR...: with RDMA_CI_PRUNE=1 (set by .ci/run), remove build trees that no
# later stage reads, printing what each held, so that a full run on a fresh machine
# needs room for about one tree at a time beside target/debug. Without it, keeps them
# for the next run.
prune_tree() {
    [ "${RDMA_CI_PRUNE:-0}" = 1 ] || return 0
    local d size
    for d in "$@"; do
        [ -e "$d" ] || continue
        size=$(du -sh "$d" 2>/dev/null | cut -f1)
        rm -rf "$d"
        echo "pruned $d ($size)"
    done
}

# Hand files created by root back to the sudo user (no-op otherwise).
chown_to_invoker() {
    local u
    u=$(invoking_user)
    if [ -n "$u" ]; then
        chown -R "$u:$(id -g "$u")" "$@" 2>/dev/null || true
    fi
}

# Find vng even when sudo's secure_path hides ~/.local/bin or pyenv shims.
find_vng() {
    local c
    if c=$(command -v vng 2>/dev/null); then
        echo "$c"
        return 0
    fi
    for c in /usr/local/bin/vng "$HOME/.local/bin/vng" "$HOME/.pyenv/shims/vng"; do
        if [ -x "$c" ]; then
            echo "$c"
            return 0
        fi
    done
    return 1
}

# ---------------------------------------------------------------------------
# Running cargo: under `sudo`, as the invoking user, so that target/ and ~/.cargo
# do not fill up with root-owned files; otherwise directly (adding ~/.cargo/bin
# to PATH when cargo is not on it).
cargo_cmd() {
    local u home
    u=$(invoking_user)
    if [ -n "$u" ]; then
        home=$(getent passwd "$u" | cut -d: -f6)
        sudo -u "$u" -H --preserve-env=RUSTFLAGS,RUSTDOCFLAGS,CARGO_TARGET_DIR,CARGO_INCREMENTAL,CARGO_TERM_COLOR,CI,RUST_BACKTRACE,RDMA_CORE_INCLUDE_DIR,RDMA_CORE_LIB_DIR,CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER \
            -- env "PATH=$home/.cargo/bin:/usr/local/bin:/usr/bin:/bin" cargo "$@"
    elif command -v cargo >/dev/null 2>&1; then
        cargo "$@"
    elif [ -x "$HOME/.cargo/bin/cargo" ]; then
        PATH="$HOME/.cargo/bin:$PATH" cargo "$@"
    else
        die "cargo not found (install a Rust toolchain, e.g. with rustup)"
    fi
}

# cargo_executable NAME KIND < cargo-json: the executable of target NAME of kind
# KIND (test, bin, example) from `cargo ... --message-format=json`; empty if none.
cargo_executable() {
    python3 "$CI_DIR/py/cargo_executable.py" "$1" "$2"
}

# ---------------------------------------------------------------------------
# The VM.

# new_run_dir NAME: a fresh folder under target/ci/runs, shared read-write with
# the guest. Keeps the 10 newest runs.
new_run_dir() {
    local d
    ensure_target_dir
    mkdir -p "$CI_WORK/runs"
    d="$CI_WORK/runs/$(date +%Y%m%d-%H%M%S)-$1-$$"
    mkdir -p "$d"
    # shellcheck disable=SC2012
    ls -1dt "$CI_WORK"/runs/*/ 2>/dev/null | tail -n +11 | xargs -r rm -rf
    echo "$d"
}

# guest_prelude RUNDIR: the start of every guest script (PATH, cwd, forwarded env).
guest_prelude() {
    local rundir=$1 v
    echo '#!/bin/bash'
    echo 'export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$PATH'
    printf 'export RDMA_CI_RUN_DIR=%q\n' "$rundir"
    # Forward the knobs a test may want (RUST_*, RDMA_TEST_*, RDMA_GID_TIMEOUT, RDMA_SIW_KO,
    # RDMA_GUEST_ROOT).
    while IFS= read -r v; do
        printf 'export %s=%q\n' "$v" "${!v}"
    done < <(compgen -e | grep -E '^(RUST_[A-Z_]+|RDMA_TEST_[A-Z0-9_]+|RDMA_GID_TIMEOUT|RDMA_SIW_KO|RDMA_GUEST_ROOT)$' || true)
    printf 'cd %q || exit 1\n' "$PWD"
}

# guest_device_setup RUNDIR: the guest line that sets up the devices (sources
# ci/guest-setup.sh); when that fails, the guest marks RUNDIR/setup-failed, writes
# status 125 and exits (see vm_failures).
guest_device_setup() {
    printf 'if ! source %q; then touch %q; echo 125 > %q; exit 125; fi\n' \
        "$CI_DIR/guest-setup.sh" "$1/setup-failed" "$1/status"
}

# guest_provider_runs RUNDIR LABEL PARALLEL TIMEOUT PROVIDER... -- CMD ARG...: the guest
# lines that run CMD once per provider, after `rdma_use_provider P` (ci/guest-setup.sh),
# under `timeout TIMEOUT`: its output into RUNDIR/P.log (and the console), its exit
# status into RUNDIR/P.status, its seconds into RUNDIR/P.seconds. PARALLEL=1: the
# providers at the same time (each in the background, then `wait`; on the console each
# line starts with `[P]`); else one after the other. Each provider has its own device,
# netdev and addresses, and a test's ports are its own (ephemeral, or one per provider).
guest_provider_runs() {
    local rundir=$1 label=$2 parallel=$3 tmo=$4 p
    shift 4
    local provs=()
    while [ "$#" -gt 0 ] && [ "$1" != -- ]; do
        provs+=("$1")
        shift
    done
    [ "${1:-}" = -- ] || die "guest_provider_runs: no -- before the command"
    shift
    for p in "${provs[@]}"; do
        printf 'echo; echo "== guest: %s on %s"\n' "$label" "$p"
        if [ "$parallel" = 1 ]; then echo '{'; fi
        printf 't0_%s=$(date +%%s.%%N)\n' "$p"
        # A subshell per provider: its RDMA_TEST_* env does not leak into the next one.
        printf '( rdma_use_provider %s && exec timeout -k 10 %q' "$p" "$tmo"
        printf ' %q' "$@"
        if [ "$parallel" = 1 ]; then
            printf ' ) 2>&1 | tee %q | sed -u %q\n' "$rundir/$p.log" "s/^/[$p] /"
        else
            printf ' ) 2>&1 | tee %q\n' "$rundir/$p.log"
        fi
        printf 'echo "${PIPESTATUS[0]}" > %q\n' "$rundir/$p.status"
        printf 'echo "$(date +%%s.%%N) $t0_%s" | awk %q > %q\n' "$p" '{ printf "%.1f\n", $1 - $2 }' "$rundir/$p.seconds"
        if [ "$parallel" = 1 ]; then echo '} &'; fi
    done
    if [ "$parallel" = 1 ]; then echo 'wait'; fi
}

# vm_limit PARALLEL PROVIDER_TIMEOUT NPROVIDERS MARGIN: the default limit of a VM that runs
# NPROVIDERS providers' runs of at most PROVIDER_TIMEOUT s each, at the same time
# (PARALLEL=1) or one after the other, and boots and sets up within MARGIN s.
vm_limit() {
    if [ "$1" = 1 ]; then echo $(($2 + $4)); else echo $(($2 * $3 + $4)); fi
}

_vm_interrupted() {
    local pid
    trap - INT TERM HUP
    echo "!! $CI_SCRIPT: interrupted: stopping the VM" >&2
    pid=$(cat "$VM_RUN_DIR/timeout.pid" 2>/dev/null || true)
    [ -z "$pid" ] || kill -TERM "$pid" 2>/dev/null || true
    wait "$VM_TEE_PID" 2>/dev/null || true
    exit 130
}

# vm_lock: take target/ci/vm.lock on fd 9 (one VM boot at a time), waiting
# for a running one. Released by `exec 9>&-`.
vm_lock() {
    exec 9>"$CI_WORK/vm.lock"
    if ! flock -n 9; then
        echo "another VM is running; waiting for $CI_WORK/vm.lock"
        flock 9
    fi
}

# vm_boot RUNDIR SCRIPT: boot the VM once and run `bash SCRIPT` in it, as root.
# The script reports its result by writing RUNDIR/status. Output goes to the
# terminal and RUNDIR/console.log. Sets VM_RC (vng/timeout exit status),
# VM_TIMED_OUT (0/1), VM_STATUS (content of RUNDIR/status, empty if absent),
# VM_SECONDS. Only one VM at a time (flock on target/ci/vm.lock).
# RDMA_VM_KERNEL=PATH boots that kernel image instead of /boot/vmlinuz-<kver>;
# virtme-ng takes its modules from the lib/modules (or usr/lib/modules) of the
# tree the image lies in (e.g. a linux-image package extracted with dpkg -x).
# RDMA_VM_APPEND adds kernel boot options (one word each, space-separated).
vm_boot() {
    local rundir=$1 script=$2 kver kimg vng t0 tmo a
    local -a append=()
    for a in ${RDMA_VM_APPEND:-}; do append+=(--append "$a"); done
    if [ -n "${RDMA_VM_KERNEL:-}" ]; then
        kimg=$RDMA_VM_KERNEL
        [ -f "$kimg" ] || die "RDMA_VM_KERNEL=$kimg is not a file"
    else
        kver=$(detect_kver)
        [ -n "$kver" ] || die "no Debian kernel found (run ci/setup.sh)"
        kimg=/boot/vmlinuz-$kver
    fi
    vng=$(find_vng) || die "vng not found (run ci/setup.sh)"
    tmo=${RDMA_VM_TIMEOUT:-900}
    vm_lock
    echo "booting $kimg under TCG (timeout ${tmo}s), run dir $rundir"
    t0=$(now)
    rm -f "$rundir/vng.rc" "$rundir/timeout.pid"
    # Pipe the output (never redirect vng straight to a file: lines get lost).
    # No stdin: vng then does not try to use a terminal. `--user root`: the guest
    # command must load modules. timeout runs in its own process group and kills
    # vng and its qemu child together. The pipeline runs in the background so that
    # an interrupt (Ctrl-C, CI cancel) reaches the trap below and stops the VM.
    (
        timeout -k 20 "$tmo" "$vng" --run "$kimg" --disable-kvm \
            --memory "${RDMA_VM_MEMORY:-2G}" --cpus "${RDMA_VM_CPUS:-2}" \
            "${append[@]}" --user root --rwdir "$rundir" --exec "bash $script" </dev/null &
        echo "$!" >"$rundir/timeout.pid"
        if wait "$!"; then rc=0; else rc=$?; fi
        echo "$rc" >"$rundir/vng.rc"
    ) 2>&1 | tee "$rundir/console.log" &
    VM_TEE_PID=$!
    VM_RUN_DIR=$rundir
    trap _vm_interrupted INT TERM HUP
    wait "$VM_TEE_PID" || true
    trap - INT TERM HUP
    VM_RC=$(status_of "$rundir/vng.rc")
    VM_RC=${VM_RC:-255}
    exec 9>&-
    VM_SECONDS=$(elapsed "$t0")
    VM_TIMED_OUT=0
    if timed_out "$VM_RC"; then
        VM_TIMED_OUT=1
    fi
    VM_STATUS=
    if [ -s "$rundir/status" ]; then
        VM_STATUS=$(tr -dc '0-9' <"$rundir/status")
    fi
    chown_to_invoker "$rundir"
    echo "VM finished in ${VM_SECONDS}s (vng exit $VM_RC, guest status ${VM_STATUS:-none})"
}

# vm_failures TIMEOUT [NEED_STATUS]: after vm_boot, append to the caller's FAIL what went
# wrong with the VM itself: it timed out (after TIMEOUT s), device setup in the guest
# failed (guest_device_setup), or, with NEED_STATUS=1 (the default), the guest wrote no
# status. NEED_STATUS=0 for a caller that checks the guest's work another way.
vm_failures() {
    local tmo=$1 need_status=${2:-1}
    [ "$VM_TIMED_OUT" = 0 ] || FAIL+=("the VM timed out after $tmo s (RDMA_VM_TIMEOUT)")
    if [ -f "$VM_RUN_DIR/setup-failed" ]; then
        FAIL+=("device setup in the VM failed (see the guest-setup messages above)")
    elif [ "$need_status" = 1 ] && [ -z "$VM_STATUS" ] && [ "$VM_TIMED_OUT" = 0 ]; then
        FAIL+=("the VM gave no status (vng exit $VM_RC; see $VM_RUN_DIR/console.log)")
    fi
}

# ---------------------------------------------------------------------------
# Results. A test binary (device, fabric) ends with `LABEL: N passed, N failed, N skipped`
# and repeats each failed test as `failed on LABEL: NAME: first line`; a run without
# that summary line failed.

# status_of FILE: the exit status written into FILE (its digits), or nothing.
status_of() {
    tr -dc '0-9' 2>/dev/null <"$1" || true
}

# timed_out STATUS: whether STATUS is that of a run stopped by `timeout` (124, or 137
# after `-k`).
timed_out() {
    [ "$1" = 124 ] || [ "$1" = 137 ]
}

# summary_line LOG LABEL: LOG's last `LABEL: N passed, N failed, N skipped` line
# (carriage returns dropped), or nothing (also when LOG is missing).
summary_line() {
    [ -f "$1" ] || return 0
    tr -d '\r' <"$1" | grep -E "^$2: [0-9]+ passed, [0-9]+ failed, [0-9]+ skipped\$" | tail -n 1 || true
}

# summary_counts LINE: the counts of a summary line, "PASSED FAILED SKIPPED".
summary_counts() {
    sed -E 's/^.*: ([0-9]+) passed, ([0-9]+) failed, ([0-9]+) skipped$/\1 \2 \3/' <<<"$1"
}

# failed_lines LOG LABEL: LOG's `failed on LABEL: ...` lines.
failed_lines() {
    [ -f "$1" ] || return 0
    tr -d '\r' <"$1" | grep -E "^failed on $2: " || true
}

# provider_results RUN_DIR PROVIDER...: read each provider's summary line
# (`<p>: N passed, N failed, N skipped`) and exit status from RUN_DIR/<p>.log and
# RUN_DIR/<p>.status; append to the caller's SUMMARIES and FAIL arrays and add to
# its tp, tf and ts counters.
provider_results() {
    local dir=$1 p line st n_p n_f n_s f
    shift
    for p in "$@"; do
        line=$(summary_line "$dir/$p.log" "$p")
        st=$(status_of "$dir/$p.status")
        if [ -z "$line" ]; then
            SUMMARIES+=("$p: no summary line (exit status ${st:-none})")
            FAIL+=("$p: summary line missing")
            continue
        fi
        SUMMARIES+=("$line")
        read -r n_p n_f n_s < <(summary_counts "$line")
        tp=$((tp + n_p)) tf=$((tf + n_f)) ts=$((ts + n_s))
        [ "$n_f" = 0 ] || FAIL+=("$p: $n_f test(s) failed")
        while IFS= read -r f; do FAIL+=("$f"); done < <(failed_lines "$dir/$p.log" "$p")
        if timed_out "$st"; then
            FAIL+=("$p: timed out after ${RDMA_PROVIDER_TIMEOUT:-900} s (RDMA_PROVIDER_TIMEOUT)")
        elif [ "$st" != 0 ]; then
            FAIL+=("$p: device binary exited with status ${st:-none}")
        fi
    done
}
