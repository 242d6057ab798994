# shellcheck shell=bash disable=SC2016
# ci/twohost-suite.sh: the cross-host suite of `ci/twohost.sh --suite` (sourced there).
# `pair NAME CMD_A CMD_B [TIMEOUT]`: CMD_A runs on host a (the server side), CMD_B on
# host b (the client side), both with the environment that ci/twohost.sh describes.
# Single quotes: the variables expand in the guests. "rust" is this repository's
# example, "c" rdma-core's (or perftest's) program of the same name.

# Verbs: RC, UD and SRQ ping-pong, connection data exchanged over TCP, RoCE v2 GIDs.
PP='-d rxe0 -g $RDMA_GID_IDX_V4 -n 20 -s 1024'
pair rc_pingpong/rust-rust "\$BIN/rc_pingpong $PP -c" "\$BIN/rc_pingpong $PP -c \$RDMA_A_IPV4"
pair rc_pingpong/rust-c "\$BIN/rc_pingpong $PP -c" "ibv_rc_pingpong $PP -c \$RDMA_A_IPV4"
pair rc_pingpong/c-rust "ibv_rc_pingpong $PP -c" "\$BIN/rc_pingpong $PP -c \$RDMA_A_IPV4"
UDPP='-d rxe0 -g $RDMA_GID_IDX_V4 -n 20 -s 512'
pair ud_pingpong/rust-c "\$BIN/ud_pingpong $UDPP -c" "ibv_ud_pingpong $UDPP -c \$RDMA_A_IPV4"
pair ud_pingpong/c-rust "ibv_ud_pingpong $UDPP -c" "\$BIN/ud_pingpong $UDPP -c \$RDMA_A_IPV4"

# The connection manager.
RP='-C 10 -S 100 -V'
pair rping/rust-rust "\$BIN/rping -s -a \$RDMA_A_IPV4 $RP" "\$BIN/rping -c -a \$RDMA_A_IPV4 $RP"
pair rping/rust-c "\$BIN/rping -s -a \$RDMA_A_IPV4 $RP" "rping -c -a \$RDMA_A_IPV4 $RP"
pair rping/c-rust "rping -s -a \$RDMA_A_IPV4 $RP" "\$BIN/rping -c -a \$RDMA_A_IPV4 $RP"
pair async_echo/4-clients '$BIN/async_echo server -a $RDMA_A_IPV4 --connections 4' \
    '$BIN/async_echo client -a $RDMA_A_IPV4 --clients 4 --messages 200'
pair udaddy/rust-c '$BIN/udaddy -C 5' 'udaddy -s $RDMA_A_IPV4 -C 5'
pair udaddy/c-rust 'udaddy -C 5' '$BIN/udaddy -s $RDMA_A_IPV4 -C 5'

# uMAD: a vendor-class ping addressed by the peer's GID.
pair madping/ipv6-gid '$BIN/madping -S -d rxe0 -c 5' '$BIN/madping -G $RDMA_A_GID -d rxe0 -c 5'

# Multicast through the CM: the receivers join first, the sender joins after them.
pair mckey/rust-c '$BIN/mckey -m 239.1.2.3 -b $RDMA_A_IPV4 -C 5 --timeout 40' \
    'sleep 6; mckey -m 239.1.2.3 -b $RDMA_B_IPV4 -s -C 5'
pair mckey/c-rust 'mckey -m 239.1.2.4 -b $RDMA_A_IPV4 -C 5' \
    'sleep 6; $BIN/mckey -m 239.1.2.4 -b $RDMA_B_IPV4 -s -C 5'

# Soft-iWARP (siw0, on VLAN 2 of the same link): connections only through the CM.
pair siw/rping/rust-c '$BIN/rping -s -a $RDMA_A_SIW_IPV4 -C 10 -V' 'rping -c -a $RDMA_A_SIW_IPV4 -C 10 -V'
pair siw/rping/c-rust 'rping -s -a $RDMA_A_SIW_IPV4 -C 10 -V' '$BIN/rping -c -a $RDMA_A_SIW_IPV4 -C 10 -V'
pair siw/async_echo/2-clients '$BIN/async_echo server -a $RDMA_A_SIW_IPV4 --connections 2' \
    '$BIN/async_echo client -a $RDMA_A_SIW_IPV4 --clients 2 --messages 100'

# The IPoIB-style datagram service: the hosts find each other through a multicast
# group, resolve each other by IP through the CM and exchange unicast datagrams.
pair datagram/discovery '$BIN/datagram -a $RDMA_A_IPV4 -g 239.255.7.3 -n 1 -C 5 --name alpha --timeout 60' \
    '$BIN/datagram -a $RDMA_B_IPV4 -g 239.255.7.3 -n 1 -C 5 --name beta --timeout 60'

# IP over InfiniBand in user space (the package rdma-ipoib, datagram mode): a TUN
# interface on each host over rxe0, pinged both ways over IPv4 and IPv6, the
# neighbours learnt, two IP multicast groups joined, sent to and left, iperf3
# each way through it and over the link, 100 MiB checked by hash, both
# stopped cleanly (ipoib/ci/twohost-pair.sh).
pair ipoib/datagram-ping 'bash ipoib/ci/twohost-pair.sh a' 'bash ipoib/ci/twohost-pair.sh b' 600
# Connected mode (RFC 4755) on rxe0: 8,000-byte pings both ways on RC connections,
# then b in datagram mode and a in connected mode (fallback, "too big" answers);
# not on siw0, which has no UD for ARP (ipoib/ci/twohost-cm-pair.sh).
pair ipoib/connected-ping 'bash ipoib/ci/twohost-cm-pair.sh a' 'bash ipoib/ci/twohost-cm-pair.sh b' 180
if grep -q '^ipoib/' "$PAIRS"; then
    step "build ipoib (cargo build -p rdma-ipoib)"
    cargo_cmd build -p rdma-ipoib
fi
