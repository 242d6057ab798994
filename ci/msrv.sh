#!/usr/bin/env bash
# Checks every target of the workspace (the publishable crates rdma-sys-build,
# ibverbs-sys, rdmacm-sys, umad-sys and rdma with their tests and benches, the
# examples, the device tests; `cargo check --all-targets --all-features`) with
# exactly the workspace's minimum supported Rust (`rust-version` in
# Cargo.toml), using the locked dependencies.
#
# The toolchain is Debian 12's rustc-web/cargo-web 1.85.0 (bookworm main;
# bookworm-security carries a newer one), fetched with `apt-get download` at
# that exact version and unpacked with `dpkg -x` into target/msrv/root
# together with the libraries it needs that a bookworm host lacks (libllvm19,
# libpcre3, libhttp-parser2.9). Nothing is installed on the host and nothing
# is put on PATH: the rustup toolchain stays the one of every other build.
# Once unpacked, the script only checks (about 1 s when nothing changed).
#
# Knobs: MSRV_TARGET_DIR (default target/msrv/target).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

msrv_ver=1.85.0
deb_ver=1.85.0+dfsg3-1~deb12u3
llvm_ver=1:19.1.7-3~deb12u1
want=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)
case "$msrv_ver" in
"$want" | "$want".*) ;;
*)
    echo "msrv: Cargo.toml says rust-version $want, this script builds with $msrv_ver" >&2
    exit 1
    ;;
esac

dir=$root/target/msrv
tc=$dir/root
stamp=$tc/.complete-$deb_ver
if [ ! -e "$stamp" ]; then
    echo "msrv: fetching rustc-web/cargo-web $deb_ver into $tc"
    rm -rf "$tc" "$dir/debs"
    mkdir -p "$dir/debs"
    pkgs=("rustc-web=$deb_ver" "cargo-web=$deb_ver"
        "libstd-rust-web-dev=$deb_ver" "libstd-rust-web-1.85=$deb_ver"
        "libllvm19=$llvm_ver" libpcre3 libhttp-parser2.9)
    # apt-get download writes into the current directory (as root it warns
    # that _apt cannot write there, which is harmless). On a machine whose
    # package lists were never fetched, fetch them once and retry.
    fetch() { (cd "$dir/debs" && apt-get download -q "${pkgs[@]}" 2>&1) | { grep -v '^W: Download is performed unsandboxed' || true; }; }
    if ! fetch; then
        echo "msrv: apt-get download failed; apt-get update and once more"
        apt-get update -q
        fetch
    fi
    mkdir -p "$tc"
    for d in "$dir"/debs/*.deb; do dpkg -x "$d" "$tc"; done
    rm -rf "$dir/debs"
    touch "$stamp"
fi

export LD_LIBRARY_PATH=$tc/usr/lib/x86_64-linux-gnu:$tc/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export RUSTC=$tc/usr/bin/rustc RUSTDOC=$tc/usr/bin/rustdoc
export CARGO_TARGET_DIR=${MSRV_TARGET_DIR:-$dir/target}
# Rustup's proxies and wrappers of the caller must not redirect the build.
unset RUSTC_WRAPPER RUSTC_WORKSPACE_WRAPPER RUSTUP_TOOLCHAIN CARGO_BUILD_RUSTC
cargo=$tc/usr/bin/cargo

got=$("$RUSTC" --version)
case "$got" in
"rustc $msrv_ver "*) ;;
*)
    echo "msrv: $RUSTC is '$got', not $msrv_ver" >&2
    exit 1
    ;;
esac
echo "msrv: $got, $("$cargo" --version)"

t0=$SECONDS
# Every target of the workspace type- and borrow-checked (`cargo check`: the
# publishable crates with their tests, benches and compile-fail tests, the
# examples and the device tests); the build scripts are compiled and run
# (bindgen on the system's headers). A build of the libraries would add only
# code generation (a library's build links nothing), and the crates as a
# dependent gets them (features unified among them only) are built by
# ci/package.sh from the packaged .crate files.
"$cargo" check --locked --workspace --all-targets --all-features
echo "msrv: every target checks with rustc $msrv_ver (rust-version $want), $((SECONDS - t0)) s"
