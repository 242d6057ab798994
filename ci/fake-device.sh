#!/bin/bash
# ci/fake-device.sh: a stand-in for the device test binary, to check the VM harness
# without the Rust build:
#   RDMA_CI_SKIP_HOST=1 RDMA_TEST_DEVICE_BIN=ci/fake-device.sh ci/test.sh
# RDMA_TEST_FAKE_FAIL=1 makes siw report a failure; RDMA_TEST_FAKE_NOSUMMARY=1 makes
# rxe end without its summary line (both must make ci/test.sh fail).
set -u
echo "env: in_vm=$RDMA_TEST_IN_VM provider=$RDMA_TEST_PROVIDER device=$RDMA_TEST_DEVICE netdev=$RDMA_TEST_NETDEV" \
    "ipv4=$RDMA_TEST_IPV4 ipv6=$RDMA_TEST_IPV6 filter=${1:-} memlock=$(ulimit -l)"
if ibv_devinfo -d "$RDMA_TEST_DEVICE" | grep -q PORT_ACTIVE; then
    echo "test fake::device_is_active ... ok"
else
    echo "test fake::device_is_active ... FAILED"
    echo "$RDMA_TEST_PROVIDER: 0 passed, 1 failed, 0 skipped"
    exit 1
fi
if [ "$RDMA_TEST_PROVIDER" = siw ]; then
    echo "test fake::ud_send ... SKIPPED (iWARP has no UD)"
    if [ -n "${RDMA_TEST_FAKE_FAIL:-}" ]; then
        echo "test fake::forced ... FAILED"
        echo "siw: 1 passed, 1 failed, 1 skipped"
        exit 1
    fi
    echo "siw: 1 passed, 0 failed, 1 skipped"
else
    echo "test fake::ud_send ... ok"
    [ -n "${RDMA_TEST_FAKE_NOSUMMARY:-}" ] && exit 0
    echo "rxe: 2 passed, 0 failed, 0 skipped"
fi
