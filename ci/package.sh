#!/usr/bin/env bash
# What a user gets from a registry must build: packages every publishable
# crate of the workspace with `cargo package`, then builds `rdma` and the
# tests of all five from those .crate files alone.
#
# 1. `cargo package --no-verify` of rdma-sys-build, ibverbs-sys, rdmacm-sys,
#    umad-sys and rdma (with --workspace semantics, so the unpublished
#    crates resolve against each other). Step 3 is the verification, done
#    once for all five instead of once per crate.
# 2. Each .crate is unpacked into a scratch workspace, target/package-check/ws
#    (its own [workspace], so cargo never reaches the repository's
#    Cargo.toml; no path leads from it into the sources). Its
#    [patch.crates-io] points every one of the five names at its unpacked
#    package: `rdma` and `ibverbs-sys` exist on crates.io as other projects,
#    so the script fails unless the lockfile resolves all five to those paths
#    (no registry source) and cargo uses every patch.
# 3. In the scratch workspace, with a fresh lockfile (as a user resolves,
#    MSRV-aware): `cargo build -p rdma --all-features`, `cargo test --no-run`
#    of every target of the five, and the host tests that need no device:
#    those of the -sys crates (C shims against their Rust twins, layouts) and
#    rdma's unit tests and send_sync (the compile-fail tests are built, not
#    run: trybuild would build the crate once more).
#    Then the docs of the five with DOCS_RS=1, as docs.rs builds them (from
#    the bindings each -sys package ships; ci/docsrs.sh checks the same with
#    rdma-core hidden, from the source tree).
#    Fails if a build script writes into its package's sources.
#
# Needs crates.io for the third-party dependencies. Builds into the
# repository's own target/ (PACKAGE_TARGET_DIR to change it): the third-party
# dependencies the fresh lockfile resolves to the same versions are built
# once for the repository and the packages; the packaged crates, at other
# paths, build anew.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

crates=(rdma-sys-build ibverbs-sys rdmacm-sys umad-sys rdma)
work=$root/target/package-check
export CARGO_TARGET_DIR=${PACKAGE_TARGET_DIR:-$root/target}
ws=$work/ws
t0=$SECONDS

step() { echo "== package: $*"; }

version=$(cargo metadata --format-version 1 --no-deps |
    python3 "$root/ci/py/cargo_metadata.py" version rdma)

# 1. Package. --allow-dirty: what is packaged is the working tree as it is
# (CI's checkout is clean; a developer's may not be).
step "cargo package (${crates[*]})"
pkgs=()
for c in "${crates[@]}"; do pkgs+=(-p "$c"); done
rm -f "$CARGO_TARGET_DIR"/package/*.crate
cargo package --locked --no-verify --allow-dirty "${pkgs[@]}" 2>&1 |
    grep -v -e 'manifest has no documentation, homepage or repository' \
        -e 'see https://doc.rust-lang.org/cargo/reference/manifest.html#package-metadata' \
        -e '^  |$' -e '^  = note:'

# 2. Unpack into the scratch workspace.
step "unpack into $ws"
rm -rf "$ws"
mkdir -p "$ws/crates"
members=""
patch=""
for c in "${crates[@]}"; do
    f=$CARGO_TARGET_DIR/package/$c-$version.crate
    [ -f "$f" ] || { echo "package: $f missing" >&2; exit 1; }
    tar -xzf "$f" -C "$ws/crates"
    # Each package carries its own Cargo.lock; a dependent never uses it, so
    # neither does this build.
    rm -f "$ws/crates/$c-$version/Cargo.lock"
    echo "   $c: $(tar -tzf "$f" | grep -vc '/$') files"
    members+="    \"crates/$c-$version\",
"
    patch+="$c = { path = \"crates/$c-$version\" }
"
done
cat >"$ws/Cargo.toml" <<EOF
# Made by ci/package.sh: the packaged crates, unpacked, as a registry would
# give them; each registry name patched to its package.
[workspace]
resolver = "3"
members = [
$members]

[patch.crates-io]
$patch
EOF
# The packages as unpacked, to check that no build script writes into them.
sums() { (cd "$ws/crates" && find . -type f -print0 | sort -z | xargs -0 sha256sum); }
sums >"$work/sources.sha256"

# 3. Build from the packages.
cd "$ws"
log=$work/build.log
: >"$log"
run() {
    echo "   $*"
    if ! "$@" >>"$log" 2>&1; then
        tail -40 "$log" >&2
        echo "package: failed: $* (log: $log)" >&2
        exit 1
    fi
}
step "resolve (fresh lockfile)"
run cargo generate-lockfile
# Every workspace crate must come from its package: a path package has no
# `source` line in the lockfile, a crates.io one does.
python3 "$root/ci/py/lockfile_from_packages.py" "${crates[@]}"
step "cargo build -p rdma --all-features"
run cargo build -p rdma --all-features
step "cargo test --no-run (every target of the five packages)"
run cargo test --no-run --workspace --all-targets --all-features
step "host tests of the packages"
# Every test target but trybuild's compile-fail ones, with the feature set of
# the step before (so nothing is built again).
tests=()
while read -r t; do tests+=(--test "$t"); done < <(
    cargo metadata --format-version 1 --no-deps | python3 "$root/ci/py/cargo_metadata.py" tests)
run cargo test --workspace --all-features --lib "${tests[@]}"
step "docs as docs.rs builds them (DOCS_RS=1: the bindings shipped in the packages)"
# A target dir of its own: the build scripts rerun when DOCS_RS changes.
CARGO_TARGET_DIR=$work/target-docsrs DOCS_RS=1 RUSTDOCFLAGS="-Dwarnings --cfg docsrs" \
    run cargo doc --no-deps --all-features -p rdma-sys-build -p ibverbs-sys -p rdmacm-sys -p umad-sys -p rdma
if grep -n 'was not used in the crate graph' "$log"; then
    echo "package: a [patch] entry was not used" >&2
    exit 1
fi
if ! diff <(sums) "$work/sources.sha256" >"$work/sources.diff"; then
    cat "$work/sources.diff" >&2
    echo "package: the build changed the packaged sources" >&2
    exit 1
fi
grep -E '^test result:' "$log" | sed 's/^/   /'
echo "package: ${#crates[@]} crates packaged and built from their packages, $((SECONDS - t0)) s"
