#!/usr/bin/env bash
# ci/setup.sh: install what the CI needs on Debian 12 and build siw.ko for the VM kernel.
# Idempotent: when everything is present it installs nothing and runs no apt-get.
set -Eeuo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

T0=$(now)

# Debian packages needed on the host (and, through the shared root fs, in the guest).
PKGS=(
    # rdma-core: libraries, headers, providers (rxe, siw), tools
    rdma-core ibverbs-providers libibverbs-dev librdmacm-dev libibumad-dev
    ibverbs-utils rdmacm-utils perftest infiniband-diags
    # InfiniBand management on a simulated fabric (ci/fabric.sh): the simulator,
    # the reference subnet manager, and libibmad's field tables for the codec tests
    ibsim-utils opensm libibmad-dev
    # the VM: qemu (TCG), busybox for virtme-ng's initramfs, Debian's kernel
    qemu-system-x86 ipxe-qemu busybox-static linux-image-amd64
    # bindgen and the C toolchain for the -sys crates and for siw.ko
    libclang-dev clang gcc libc6-dev make pkg-config xz-utils
    # guest networking and modules
    iproute2 kmod iputils-ping iperf3
    # python3 finds the test binary in cargo's JSON output
    python3 ca-certificates
    # ci/memcheck.sh: the device tests under memcheck, in the guest (the host's root fs)
    valgrind
)

is_installed() {
    dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null | grep -q '^ii'
}

APT_UPDATED=
need_root() {
    [ "$(id -u)" = 0 ] || die "must install $* but not running as root (use: sudo ci/setup.sh)"
}
apt_update() {
    [ -z "$APT_UPDATED" ] || return 0
    echo "apt-get update"
    apt-get update -q || die "apt-get update failed (no network to the Debian mirror?)"
    APT_UPDATED=1
}
apt_install() {
    [ "$#" -gt 0 ] || return 0
    need_root "$@"
    apt_update
    echo "apt-get install --no-install-recommends $*"
    apt-get install -y -q --no-install-recommends "$@" ||
        die "apt-get install $* failed"
}

step "Debian packages"
missing=()
for p in "${PKGS[@]}"; do
    is_installed "$p" || missing+=("$p")
done
KVER=$(detect_kver)
if [ -z "$KVER" ]; then
    # No usable kernel yet: install the base set (with linux-image-amd64) first.
    apt_install "${missing[@]}" linux-image-amd64
    missing=()
    KVER=$(detect_kver)
    [ -n "$KVER" ] || die "no Debian amd64 kernel with /boot/vmlinuz-* and /lib/modules/* after installing linux-image-amd64"
fi
is_installed "linux-headers-$KVER" || missing+=("linux-headers-$KVER")
SRC_PIN=
if ! is_installed linux-source-6.1; then
    # Prefer the source of exactly the installed kernel's package version.
    SRC_PIN=$(dpkg-query -W -f='${Version}' "linux-image-$KVER" 2>/dev/null || true)
    missing+=(linux-source-6.1)
fi
if [ "${#missing[@]}" -gt 0 ]; then
    need_root "${missing[@]}"
    apt_update
    if [ -n "$SRC_PIN" ] && apt-cache show "linux-source-6.1=$SRC_PIN" >/dev/null 2>&1; then
        for i in "${!missing[@]}"; do
            if [ "${missing[$i]}" = linux-source-6.1 ]; then missing[i]="linux-source-6.1=$SRC_PIN"; fi
        done
    fi
    apt_install "${missing[@]}"
else
    echo "all ${#PKGS[@]} packages, linux-headers-$KVER and linux-source-6.1 are installed"
fi

step "libclang for bindgen"
libclang=$(ls /usr/lib/llvm-*/lib/libclang.so /usr/lib/llvm-*/lib/libclang-[0-9]*.so \
    /usr/lib/x86_64-linux-gnu/libclang-[0-9]*.so 2>/dev/null | sort -V | tail -n 1 || true)
[ -n "$libclang" ] || die "libclang not found after installing libclang-dev"
echo "libclang: $libclang"

step "virtme-ng (vng)"
if VNG=$(find_vng); then
    echo "vng: $VNG ($("$VNG" --version 2>/dev/null || echo 'version unknown'))"
else
    if ! python3 -m pip --version >/dev/null 2>&1; then
        apt_install python3-pip
    fi
    [ "$(id -u)" = 0 ] || die "vng missing and not running as root (use: sudo ci/setup.sh)"
    pip_args=(install --no-input --disable-pip-version-check virtme-ng==1.42)
    if python3 "$CI_DIR/py/externally_managed.py"; then
        pip_args+=(--break-system-packages)
    fi
    echo "python3 -m pip ${pip_args[*]}"
    python3 -m pip "${pip_args[@]}" || die "pip install virtme-ng==1.42 failed (no network to PyPI?)"
    hash -r
    VNG=$(find_vng) || die "vng not on PATH after pip install virtme-ng"
    echo "vng: $VNG"
fi

step "kernel for the VM"
[ -d "/lib/modules/$KVER/build" ] || die "/lib/modules/$KVER/build missing (linux-headers-$KVER not installed?)"
echo "kernel version: $KVER (/boot/vmlinuz-$KVER)"

step "siw.ko for $KVER"
ensure_target_dir
SIW_DIR="$CI_WORK/siw-$KVER"
if [ -f "$SIW_DIR/siw.ko" ]; then
    echo "cached: $SIW_DIR/siw.ko"
else
    src=$(ls /usr/src/linux-source-6.1.tar.* 2>/dev/null | head -n 1 || true)
    [ -n "$src" ] || die "/usr/src/linux-source-6.1.tar.* missing (linux-source-6.1 not installed?)"
    build="$CI_WORK/siw-$KVER.build"
    rm -rf "$build"
    mkdir -p "$build"
    echo "extracting drivers/infiniband/sw/siw from $src"
    tar -xf "$src" -C "$build" --strip-components=5 --wildcards '*/drivers/infiniband/sw/siw/*' ||
        die "could not extract siw sources from $src"
    [ -f "$build/Makefile" ] || die "siw Makefile not found in $src"
    sed -i 's/\$(CONFIG_RDMA_SIW)/m/' "$build/Makefile"
    make -C "/lib/modules/$KVER/build" M="$build" -j"$(nproc)" modules ||
        die "building siw.ko against /lib/modules/$KVER/build failed"
    vermagic=$(modinfo -F vermagic "$build/siw.ko" | awk '{print $1}')
    [ "$vermagic" = "$KVER" ] || die "siw.ko vermagic '$vermagic' does not match kernel $KVER"
    mkdir -p "$SIW_DIR"
    cp "$build/siw.ko" "$SIW_DIR/siw.ko.tmp"
    mv "$SIW_DIR/siw.ko.tmp" "$SIW_DIR/siw.ko"
    rm -rf "$build"
    echo "built: $SIW_DIR/siw.ko"
fi
chown_to_invoker "$CI_WORK"

step "done"
echo "setup complete in $(elapsed "$T0") s; kernel $KVER; siw.ko $SIW_DIR/siw.ko"
