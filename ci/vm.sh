#!/usr/bin/env bash
# ci/vm.sh [--] CMD ARGS...: boot the test VM (qemu TCG, Debian kernel, host root
# fs read-only via virtme-ng), set up rxe0/siw0 (ci/guest-setup.sh), run CMD as
# root with `ulimit -l unlimited` and the RDMA_* env, and exit with CMD's status.
# Runs ci/setup.sh first unless RDMA_CI_SKIP_SETUP=1. Exits 124 when the VM
# timed out (RDMA_VM_TIMEOUT, default 900 s), 125 when device setup in the VM
# failed or the VM gave no status. RDMA_VM_PROVIDER=rxe|siw also exports
# RDMA_TEST_* for that provider.
set -Eeuo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

if [ "${1:-}" = -- ]; then shift; fi
if [ "$#" -eq 0 ] || [ "$1" = -h ] || [ "$1" = --help ]; then
    sed -n '2,9s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
    [ "$#" -eq 0 ] && exit 2
    exit 0
fi

ci_setup

step "VM: $*"
RUN_DIR=$(new_run_dir vm)
{
    guest_prelude "$RUN_DIR"
    guest_device_setup "$RUN_DIR"
    if [ -n "${RDMA_VM_PROVIDER:-}" ]; then
        printf 'rdma_use_provider %q || { touch %q; echo 125 > %q; exit 125; }\n' "$RDMA_VM_PROVIDER" "$RUN_DIR/setup-failed" "$RUN_DIR/status"
    fi
    echo 'echo "== guest: running command"'
    printf '%q ' "$@"
    echo
    echo 'rc=$?'
    printf 'echo "$rc" > %q\n' "$RUN_DIR/status"
    echo 'exit "$rc"'
} >"$RUN_DIR/guest.sh"
vm_boot "$RUN_DIR" "$RUN_DIR/guest.sh"

if [ "$VM_TIMED_OUT" = 1 ]; then
    CURRENT_STEP="VM: $*"
    echo "!! vm.sh: the VM timed out after ${RDMA_VM_TIMEOUT:-900} s (RDMA_VM_TIMEOUT)" >&2
    exit 124
fi
if [ -z "$VM_STATUS" ]; then
    echo "!! vm.sh: the VM gave no exit status (boot failure? see $RUN_DIR/console.log)" >&2
    exit 125
fi
if [ "$VM_STATUS" = 125 ] && [ -f "$RUN_DIR/setup-failed" ]; then
    echo "!! vm.sh: device setup in the VM failed (see the guest-setup messages above)" >&2
elif [ "$VM_STATUS" != 0 ]; then
    echo "vm.sh: command exited with status $VM_STATUS"
fi
exit "$VM_STATUS"
