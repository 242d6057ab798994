#!/usr/bin/env bash
# ci/demo.sh [CMD ARGS...]: the README's demo. Runs ci/setup.sh, builds the examples
# `devices` and `async_echo` (package rdma-examples), boots the VM with rxe0 and siw0
# set up, lists the devices and their ports, and runs an echo exchange on rxe0.
# With arguments, runs CMD ARGS in
# the VM instead of the example (nothing is built), e.g. `ci/demo.sh ibv_devinfo`.
# Knobs: RDMA_CI_SKIP_SETUP=1, RDMA_VM_TIMEOUT (default 900 s).
set -Eeuo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

ci_setup
ensure_target_dir

if [ "$#" -gt 0 ]; then
    CMD=("$@")
else
    step "cargo build -p rdma-examples (devices, async_echo)"
    JSON="$CI_WORK/demo-build.json"
    cargo_cmd build -p rdma-examples --bin devices --bin async_echo --message-format=json >"$JSON"
    DEVICES=$(cargo_executable devices bin <"$JSON")
    ECHO=$(cargo_executable async_echo bin <"$JSON")
    for b in "$DEVICES" "$ECHO"; do
        [ -n "$b" ] && [ -x "$b" ] || die "an example is missing from cargo's JSON output ($JSON)"
    done
    # In the VM: list the devices, then a real exchange on soft-RoCE: the
    # tokio echo server and 4 concurrent clients, each message verified.
    DEMO="$CI_WORK/demo-guest.sh"
    cat >"$DEMO" <<EOS
set -e
echo '== the soft-RDMA devices'
'$DEVICES'
echo '== async_echo on rxe0 (192.0.2.1): a tokio server and 4 concurrent clients'
'$ECHO' server -a 192.0.2.1 -p 7175 --connections 4 &
server=\$!
sleep 3
'$ECHO' client -a 192.0.2.1 -p 7175 --clients 4 --messages 1000
wait \$server
echo '== demo done'
EOS
    CMD=(bash "$DEMO")
fi

step "run in the VM: ${CMD[*]}"
RDMA_CI_SKIP_SETUP=1 exec bash "$CI_DIR/vm.sh" -- "${CMD[@]}"
