#!/usr/bin/env bash
# ci/matrix.sh NAME: build and test the workspace against one Debian release's
# rdma-core and kernel. NAME: bookworm (the host's own rdma-core and kernel),
# trixie (Debian 13: rdma-core 56, kernel 6.12) or sid (unstable).
#
# For trixie and sid, everything comes from that release's packages, fetched
# with apt and a sources list of our own (the host's apt config is untouched)
# and extracted with dpkg -x under target/matrix/NAME/ (cached: a second run
# downloads nothing; RDMA_MATRIX_REFRESH=1 fetches the newest versions again):
#   root/    libibverbs, librdmacm, libibumad (+ -dev), the providers, ibverbs-utils,
#            rdmacm-utils, perftest, libnl, glibc
#   kernel/  linux-image (boot/vmlinuz-VER, lib/modules/VER)
#   hdr/     linux-headers, linux-kbuild; siw-VER/siw.ko is built from linux-source
# Steps: build the workspace with RDMA_CORE_INCLUDE_DIR/RDMA_CORE_LIB_DIR at root/
# (CARGO_TARGET_DIR=target/matrix/NAME/cargo), run the host tests with that
# release's dynamic loader and libraries (a cargo runner), build the device test
# binary and the examples, and run them in ONE VM boot of that release's kernel,
# with root/'s libraries, providers and tools mounted over the guest's
# (RDMA_GUEST_ROOT in ci/guest-setup.sh), on rxe and siw at the same time. Checks in the guest
# that the loaded libibverbs, librdmacm, libibumad, providers and glibc are the
# release's. Prints `rxe: N passed, N failed, N skipped`, `siw: ...` and
# `matrix NAME: ...` (also into target/ci/matrix-NAME.summary); exits non-zero
# on any failure.
#
# Knobs (RDMA_MATRIX_*, RDMA_DEBIAN_MIRROR, and RDMA_TEST_FILTER, RDMA_TEST_PROVIDERS,
# RDMA_TEST_PARALLEL, RDMA_PROVIDER_TIMEOUT, RDMA_VM_TIMEOUT as in ci/test.sh): see the
# table in ci/README.md.
set -Eeuo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

NAME=${1:-}
case "$NAME" in
bookworm | trixie | sid) ;;
*)
    sed -n '2,/^set -E/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"
    exit 2
    ;;
esac
CI_SCRIPT="matrix.sh $NAME"

T_START=$(now)
TIMINGS=()
timed() { # timed NAME CMD...: run and record the duration
    local name=$1 t0
    shift
    t0=$(now)
    "$@"
    TIMINGS+=("$name $(elapsed "$t0")s")
}
read_providers

ensure_target_dir
rm -f "$CI_WORK/matrix-$NAME.summary"
M="$REPO_ROOT/target/matrix/$NAME"
mkdir -p "$M"
MA=x86_64-linux-gnu

# The host's glibc version (2.36 on Debian 12).
HOST_GLIBC=$(getconf GNU_LIBC_VERSION | awk '{print $2}')

# ---------------------------------------------------------------------------
# Fetching a release's packages (trixie, sid).

debian_mirror() {
    local m
    if [ -n "${RDMA_DEBIAN_MIRROR:-}" ]; then
        echo "$RDMA_DEBIAN_MIRROR"
        return
    fi
    # The first URI of the host's sources that serves Debian's main archive.
    m=$({ grep -hE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}'
        grep -hE '^deb ' /etc/apt/sources.list 2>/dev/null | awk '{ for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) { print $i; break } }'; } |
        grep -v -- '-security' | grep -E '/debian/?$' | head -n 1 || true)
    echo "${m:-http://deb.debian.org/debian}"
}

# apt_r CMD ARGS: apt-get (or apt-cache, with APT=apt-cache) with the release's
# own sources list, lists and cache under $M/apt, and an empty dpkg status (so
# nothing counts as installed), leaving the host's apt state alone.
apt_r() {
    local tool=$1
    shift
    "$tool" -q -o Dir::Etc::SourceList="$M/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null \
        -o Dir::State::Lists="$M/apt/lists" -o Dir::Cache="$M/apt/cache" \
        -o Dir::State::status=/dev/null -o Debug::NoLocking=1 -o APT::Sandbox::User=root \
        -o Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false \
        -o Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false \
        -o Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false \
        -o Acquire::IndexTargets::deb::DEP-11-icons-hidpi::DefaultEnabled=false \
        -o Acquire::IndexTargets::deb::Contents-deb::DefaultEnabled=false \
        "$@"
}

USER_PKGS=(
    libibverbs1 ibverbs-providers librdmacm1t64 libibumad3
    libibverbs-dev librdmacm-dev libibumad-dev
    ibverbs-utils rdmacm-utils perftest
    libnl-3-200 libnl-route-3-200 libpci3 libc6 libgcc-s1
)

fetch_release() {
    local mirror kpkgs kx
    if [ "${RDMA_MATRIX_REFRESH:-0}" = 1 ]; then
        rm -f "$M/debs/.done" "$M/root/.done" "$M/kernel/.done" "$M/hdr/.done"
    fi
    if [ -f "$M/debs/.done" ]; then
        echo "cached: $(wc -l <"$M/debs/.done") packages in $M/debs (RDMA_MATRIX_REFRESH=1 fetches again)"
        return 0
    fi
    mirror=$(debian_mirror)
    mkdir -p "$M/apt/lists/partial" "$M/apt/cache/archives/partial" "$M/debs"
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $NAME main" >"$M/apt/sources.list"
    echo "apt-get update ($NAME from $mirror)"
    apt_r apt-get update || die "apt-get update of $NAME from $mirror failed"
    # The kernel: what linux-image-amd64 and linux-headers-amd64 pull in that is
    # the kernel itself (image, its split parts, headers, kbuild), not its tools.
    mapfile -t kpkgs < <(apt_r apt-get -s install linux-image-amd64 linux-headers-amd64 2>/dev/null |
        awk '/^Inst linux-(image|binary|modules|base|headers|kbuild)-[0-9]/ { print $2 }')
    [ "${#kpkgs[@]}" -gt 0 ] || die "no kernel packages found for $NAME"
    kx=$(printf '%s\n' "${kpkgs[@]}" | sed -n 's/^linux-image-\([0-9]*\.[0-9]*\)\..*/\1/p' | head -n 1)
    [ -n "$kx" ] || die "no linux-image-X.Y... among ${kpkgs[*]}"
    rm -f "$M"/debs/*.deb
    echo "apt-get download ${USER_PKGS[*]} ${kpkgs[*]} linux-source-$kx"
    (cd "$M/debs" && apt_r apt-get download "${USER_PKGS[@]}" "${kpkgs[@]}" "linux-source-$kx") ||
        die "apt-get download from $NAME failed"
    (cd "$M/debs" && ls -1 -- *.deb) >"$M/debs/.done.tmp"
    mv "$M/debs/.done.tmp" "$M/debs/.done"
}

# wrap_new_glibc DIR: every ELF program under DIR that needs a newer glibc than
# the host's is replaced by a script that runs it with the release's loader and
# libraries (kbuild's objtool and modpost, built in the release).
wrap_new_glibc() {
    local f v
    while IFS= read -r f; do
        head -c 4 "$f" | grep -q 'ELF' || continue
        v=$(objdump -T "$f" 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n 1)
        [ -n "$v" ] || continue
        [ "$(printf '%s\n%s\n' "$v" "$HOST_GLIBC" | sort -V | tail -n 1)" = "$HOST_GLIBC" ] && continue
        mv "$f" "$f.glibc-$v"
        printf '#!/bin/sh\nexec %q --library-path %q %q "$@"\n' \
            "$M/root/usr/lib64/ld-linux-x86-64.so.2" "$M/root/usr/lib/$MA" "$f.glibc-$v" >"$f"
        chmod +x "$f"
        echo "wrapped $(basename "$f") (needs glibc $v)"
    done < <(find "$1" -type f -perm -u+x)
}

extract_release() {
    local d dest
    for dest in root kernel hdr; do
        [ -f "$M/$dest/.done" ] && continue
        rm -rf "$M/$dest"
        mkdir -p "$M/$dest"
        while IFS= read -r d; do
            case "$d" in
            linux-source-*) continue ;;
            linux-image-* | linux-binary-* | linux-modules-* | linux-base-*) [ "$dest" = kernel ] || continue ;;
            linux-headers-* | linux-kbuild-*) [ "$dest" = hdr ] || continue ;;
            *) [ "$dest" = root ] || continue ;;
            esac
            dpkg -x "$M/debs/$d" "$M/$dest" || die "dpkg -x $d failed"
        done <"$M/debs/.done"
        if [ "$dest" = hdr ]; then
            # The headers' Makefile names the headers' dirs by absolute path
            # (include of the common part; sid's also sets KBUILD_OUTPUT).
            sed -i "s|\([= ]\)/usr/src/|\1$M/hdr/usr/src/|g" "$M"/hdr/usr/src/linux-headers-*/Makefile
            wrap_new_glibc "$M/hdr/usr/lib"
        fi
        touch "$M/$dest/.done"
        echo "extracted into $M/$dest"
    done
}

build_siw() {
    local src build hdrdir vermagic ccflags=()
    SIW_KO="$M/siw-$KVER/siw.ko"
    if [ -f "$SIW_KO" ]; then
        echo "cached: $SIW_KO"
        return 0
    fi
    src=$(ls "$M"/debs/linux-source-*.deb | head -n 1)
    hdrdir="$M/hdr/usr/src/linux-headers-$KVER"
    [ -f "$hdrdir/Makefile" ] || die "$hdrdir/Makefile missing"
    build="$M/siw-$KVER.build"
    rm -rf "$build"
    mkdir -p "$build"
    echo "extracting drivers/infiniband/sw/siw from $(basename "$src")"
    dpkg-deb --fsys-tarfile "$src" | tar -xO --wildcards './usr/src/linux-source-*.tar.xz' |
        tar -xJ -C "$build" --strip-components=5 --wildcards '*/drivers/infiniband/sw/siw/*' ||
        die "could not extract siw sources from $src"
    sed -i 's/\$(CONFIG_RDMA_SIW)/m/' "$build/Makefile"
    # The release's kernel is built with a newer gcc than the host's: build with the
    # host's and drop the options that only the newer one knows (kbuild decided
    # them when the kernel was configured), and BTF for the module (no pahole).
    ccflags=(CC=gcc CONFIG_CC_HAS_MIN_FUNCTION_ALIGNMENT= CONFIG_DEBUG_INFO_BTF_MODULES=)
    make -C "$hdrdir" M="$build" -j"$(nproc)" "${ccflags[@]}" modules ||
        die "building siw.ko against $hdrdir failed"
    vermagic=$(modinfo -F vermagic "$build/siw.ko" | awk '{print $1}')
    [ "$vermagic" = "$KVER" ] || die "siw.ko vermagic '$vermagic' does not match kernel $KVER"
    mkdir -p "$(dirname "$SIW_KO")"
    cp "$build/siw.ko" "$SIW_KO.tmp"
    mv "$SIW_KO.tmp" "$SIW_KO"
    rm -rf "$build"
    echo "built: $SIW_KO"
}

# ---------------------------------------------------------------------------

export CARGO_TARGET_DIR="$M/cargo"
if [ "$NAME" = bookworm ]; then
    step "bookworm: the host's rdma-core and kernel (ci/setup.sh)"
    if [ "${RDMA_CI_SKIP_SETUP:-0}" != 1 ]; then
        timed setup bash "$CI_DIR/setup.sh"
    fi
    KVER=$(detect_kver)
    [ -n "$KVER" ] || die "no Debian kernel found (run ci/setup.sh)"
    KIMG=/boot/vmlinuz-$KVER
    SIW_KO="$CI_WORK/siw-$KVER/siw.ko"
    [ -f "$SIW_KO" ] || die "$SIW_KO missing (run ci/setup.sh)"
    GUEST_ROOT=
    RELEASE_RDMA=$(dpkg-query -W -f='${Version}' libibverbs1)
else
    step "fetch $NAME's packages"
    timed fetch fetch_release
    step "extract $NAME's packages"
    timed extract extract_release
    # boot/vmlinuz-VER (trixie), or usr/lib/modules/VER/vmlinuz (sid's split packages).
    KIMG=$(ls "$M"/kernel/boot/vmlinuz-* "$M"/kernel/usr/lib/modules/*/vmlinuz 2>/dev/null | sort -V | tail -n 1 || true)
    [ -n "$KIMG" ] || die "no boot/vmlinuz-* or usr/lib/modules/*/vmlinuz in $M/kernel"
    case "$KIMG" in
    */vmlinuz) KVER=$(basename "$(dirname "$KIMG")") ;;
    *) KVER=${KIMG##*/vmlinuz-} ;;
    esac
    [ -d "$M/kernel/lib/modules/$KVER" ] || [ -d "$M/kernel/usr/lib/modules/$KVER" ] ||
        die "no lib/modules/$KVER in $M/kernel"
    step "siw.ko for $KVER"
    timed siw build_siw
    GUEST_ROOT="$M/root"
    RELEASE_RDMA=$(sed -n 's/^libibverbs1_\([^_]*\)_.*/\1/p' "$M/debs/.done" | sed 's/%3a/:/')
    export RDMA_CORE_INCLUDE_DIR="$M/root/usr/include"
    export RDMA_CORE_LIB_DIR="$M/root/usr/lib/$MA"
    # The release's libraries need a newer glibc than the host's: the linker may
    # not resolve their own references into the host's libc (they resolve at run
    # time, against the release's); -rpath-link finds their other needs (libnl).
    LINK="-C link-arg=-Wl,--allow-shlib-undefined -C link-arg=-Wl,-rpath-link,$RDMA_CORE_LIB_DIR"
    export RUSTFLAGS="${RUSTFLAGS:+$RUSTFLAGS }$LINK"
    export RUSTDOCFLAGS="${RUSTDOCFLAGS:+$RUSTDOCFLAGS }$LINK"
    # Host tests run with the release's dynamic loader and libraries.
    RUNNER="$M/run-with-$NAME.sh"
    printf '#!/bin/sh\n# Runs a program with %s'"'"'s dynamic loader, glibc and rdma-core.\nexec %q --library-path %q "$@"\n' \
        "$NAME" "$M/root/usr/lib64/ld-linux-x86-64.so.2" "$M/root/usr/lib/$MA" >"$RUNNER"
    chmod +x "$RUNNER"
    export CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER="$RUNNER"
fi
echo "$NAME: rdma-core $RELEASE_RDMA, kernel $KVER ($KIMG), siw $SIW_KO, cargo target $CARGO_TARGET_DIR"
chown_to_invoker "$M"
if [ "${RDMA_MATRIX_PREPARE_ONLY:-0}" = 1 ]; then
    echo "timings ($NAME): ${TIMINGS[*]} total $(elapsed "$T_START")s"
    exit 0
fi

step "cargo build --workspace --all-targets ($NAME)"
timed build cargo_cmd build --workspace --all-targets

FAIL=()
if [ "${RDMA_MATRIX_SKIP_HOST_TESTS:-0}" != 1 ]; then
    # A failure here is reported at the end; the device tests still run.
    # The compile-fail tests (trybuild: borrow and thread rules of the safe API,
    # ~4 min on 2 cores) check Rust's type rules, which no rdma-core version
    # changes, and ci/test.sh runs them; RDMA_MATRIX_TRYBUILD=1 runs them here too.
    SKIP=()
    if [ "${RDMA_MATRIX_TRYBUILD:-0}" != 1 ]; then
        SKIP=(-- --skip borrow_and_thread_rules_are_enforced --skip async_umad_handles_cannot_receive_beside_the_reader)
    fi
    step "host tests: cargo test --workspace --no-fail-fast ${SKIP[*]} ($NAME)"
    t_host=$(now)
    if ! cargo_cmd test --workspace --no-fail-fast "${SKIP[@]}"; then
        FAIL+=("host tests (cargo test --workspace) failed")
    fi
    TIMINGS+=("host-tests $(elapsed "$t_host")s")
fi

step "device test binary ($NAME)"
# The build above made the examples and every test binary; this only names the
# device binary (nothing is compiled again).
JSON="$M/device-build.json"
timed device-build cargo_cmd test --workspace --no-run --message-format=json >"$JSON"
DEVICE_BIN=$(cargo_executable device test <"$JSON")
[ -n "$DEVICE_BIN" ] || die "no executable for test target 'device' in cargo's JSON output ($JSON)"
echo "device test binary: $DEVICE_BIN"

step "device tests in the VM: kernel $KVER, rdma-core $RELEASE_RDMA (${PROVIDERS[*]})"
RUN_DIR=$(new_run_dir "matrix-$NAME")
ARGS=()
if [ -n "${RDMA_TEST_FILTER:-}" ]; then ARGS=("$RDMA_TEST_FILTER"); fi
# rxe and siw at the same time (RDMA_TEST_PARALLEL=0: one after the other), as in ci/test.sh.
PARALLEL=${RDMA_TEST_PARALLEL:-1}
export RDMA_SIW_KO="$SIW_KO"
if [ -n "$GUEST_ROOT" ]; then export RDMA_GUEST_ROOT="$GUEST_ROOT"; else unset RDMA_GUEST_ROOT; fi
{
    guest_prelude "$RUN_DIR"
    guest_device_setup "$RUN_DIR"
    # Which userspace the tests get: the libraries a process that opened rxe0 has
    # mapped (a release program, ibv_rc_pingpong's server waiting for its peer),
    # those the device binary resolves, and whether each is the release's file.
    printf 'echo; echo "== guest: userspace (kernel $(uname -r))"\n'
    printf 'RELEASE_ROOT=%q DEVICE_BIN=%q OUT=%q\n' "$GUEST_ROOT" "$DEVICE_BIN" "$RUN_DIR/userspace.txt"
    cat <<'EOF'
{
    ibv_rc_pingpong -d rxe0 -g 1 -p 18515 >/dev/null 2>&1 &
    pp=$!
    for _ in $(seq 50); do grep -q 'rdmav' /proc/$pp/maps 2>/dev/null && break; sleep 0.2; done
    echo "ibv_rc_pingpong ($(readlink -f /proc/$pp/exe)) maps:"
    awk '$6 ~ /\.so/ { print $6 }' /proc/$pp/maps | sort -u | grep -E 'ibverbs|rdmacm|ibumad|rdmav|libc\.so|ld-linux|libnl' | sed 's/^/  /'
    kill $pp 2>/dev/null; wait $pp 2>/dev/null
    echo "device binary resolves:"
    ldd "$DEVICE_BIN" | grep -E 'ibverbs|rdmacm|ibumad|libc\.so|ld-linux|libnl' | sed 's/^/  /'
} | tee "$OUT"
bad=0
if [ -n "$RELEASE_ROOT" ]; then
    for f in $(awk '/\// { for (i = 1; i <= NF; i++) if ($i ~ /^\//) print $i }' "$OUT" | sort -u); do
        [ -e "$f" ] || continue
        rel=$RELEASE_ROOT/usr/lib/x86_64-linux-gnu/${f#/*/x86_64-linux-gnu/}
        case "$f" in */ld-linux-x86-64.so.2) rel=$RELEASE_ROOT/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 ;; esac
        if cmp -s "$f" "$rel"; then
            echo "release file: $f"
        else
            echo "!! NOT the release's file: $f"; bad=1
        fi
    done
    grep -q 'rdmav' "$OUT" || { echo "!! no provider was mapped"; bad=1; }
fi
echo "$bad" > "$(dirname "$OUT")/userspace.status"
EOF
    guest_provider_runs "$RUN_DIR" "device tests" "$PARALLEL" "${RDMA_PROVIDER_TIMEOUT:-900}" "${PROVIDERS[@]}" \
        -- "$DEVICE_BIN" "${ARGS[@]}"
    printf 'echo 0 > %q\n' "$RUN_DIR/status"
} >"$RUN_DIR/guest.sh"
# The providers' limits (at the same time, or one after the other) and the boot.
DEVICE_VM_TIMEOUT=${RDMA_VM_TIMEOUT:-$(vm_limit "$PARALLEL" "${RDMA_PROVIDER_TIMEOUT:-900}" "${#PROVIDERS[@]}" 300)}
RDMA_VM_TIMEOUT=$DEVICE_VM_TIMEOUT RDMA_VM_KERNEL=$KIMG vm_boot "$RUN_DIR" "$RUN_DIR/guest.sh"
TIMINGS+=("vm ${VM_SECONDS}s")

step "results ($NAME)"
vm_failures "$DEVICE_VM_TIMEOUT"
us=$(cat "$RUN_DIR/userspace.status" 2>/dev/null | tr -dc '0-9' || true)
[ "$us" = 0 ] || FAIL+=("the guest's rdma-core userspace is not all $NAME's (see $RUN_DIR/userspace.txt)")
SUMMARIES=()
tp=0 tf=0 ts=0
provider_results "$RUN_DIR" "${PROVIDERS[@]}"
chown_to_invoker "$M" "$CI_WORK"
echo "timings ($NAME): ${TIMINGS[*]} total $(elapsed "$T_START")s"
echo "logs: $RUN_DIR"
echo
printf '%s\n' "${SUMMARIES[@]}"
echo "matrix $NAME (rdma-core $RELEASE_RDMA, kernel $KVER): $tp passed, $tf failed, $ts skipped"
# For ci/test.sh's summary: the provider lines and the total, named by release.
{
    printf "$NAME %s\n" "${SUMMARIES[@]}"
    echo "matrix $NAME (rdma-core $RELEASE_RDMA, kernel $KVER): $tp passed, $tf failed, $ts skipped${FAIL[*]:+ (FAILED)}"
} >"$CI_WORK/matrix-$NAME.summary"
if [ "${#FAIL[@]}" -gt 0 ]; then
    printf "!! matrix.sh $NAME: %s\n" "${FAIL[@]}" >&2
    exit 1
fi
