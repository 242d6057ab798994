#!/usr/bin/env bash
# ci/demo.sh [CMD ARGS...]: the README's demo. Runs ci/setup.sh, builds the example
# `devices` (package rdma-examples), boots the VM with rxe0 and siw0 set up and runs
# it there: it lists the devices and their ports. With arguments, runs CMD ARGS in
# the VM instead of the example (nothing is built), e.g. `ci/demo.sh ibv_devinfo`.
# Knobs: RDMA_CI_SKIP_SETUP=1, RDMA_VM_TIMEOUT (default 900 s).
set -Eeuo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

if [ "${RDMA_CI_SKIP_SETUP:-0}" != 1 ]; then
    step "setup (ci/setup.sh)"
    bash "$CI_DIR/setup.sh"
fi
ensure_target_dir

if [ "$#" -gt 0 ]; then
    CMD=("$@")
else
    step "cargo build -p rdma-examples --bin devices"
    JSON="$CI_WORK/demo-build.json"
    cargo_cmd build -p rdma-examples --bin devices --message-format=json >"$JSON"
    BIN=$(cargo_executable devices bin <"$JSON")
    [ -n "$BIN" ] && [ -x "$BIN" ] || die "no executable for bin 'devices' in cargo's JSON output ($JSON)"
    CMD=("$BIN")
fi

step "run in the VM: ${CMD[*]}"
RDMA_CI_SKIP_SETUP=1 exec bash "$CI_DIR/vm.sh" -- "${CMD[@]}"
