"""IP multicast through the ipoib interfaces, for ipoib/ci/twohost-pair.sh.

  mcast-check.py recv IFNAME ADDR4 GROUP4 GROUP6 PORT  # host b
  mcast-check.py send IFNAME ADDR4 GROUP4 GROUP6 PORT  # host a

recv joins GROUP4 (on the interface of ADDR4) and GROUP6 (on IFNAME),
prints "joined", and waits (30 s at most) for 3 distinct datagrams of each
group; exit 0 when they came, 1 otherwise. Closing its sockets leaves both
groups. send sends 20 numbered datagrams to each group through the
interface, one every 0.25 s.
"""
import select
import socket
import struct
import sys
import time


def main():
    mode, ifname, addr4, group4, group6, port = sys.argv[1:7]
    port = int(port)
    ifindex = socket.if_nametoindex(ifname)
    if mode == "send":
        s4 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s4.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(addr4))
        s6 = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        s6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_IF, ifindex)
        for i in range(20):
            s4.sendto(b"v4 %d" % i, (group4, port))
            s6.sendto(b"v6 %d" % i, (group6, port, 0, ifindex))
            time.sleep(0.25)
        return 0
    s4 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s4.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s4.bind(("", port))
    mreq = socket.inet_aton(group4) + socket.inet_aton(addr4)
    s4.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreq)
    s6 = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    s6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    s6.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s6.bind(("::", port))
    mreq6 = socket.inet_pton(socket.AF_INET6, group6) + struct.pack("@I", ifindex)
    s6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_JOIN_GROUP, mreq6)
    print("joined", flush=True)
    got = {s4: set(), s6: set()}
    end = time.monotonic() + 30
    while min(len(v) for v in got.values()) < 3 and time.monotonic() < end:
        ready, _, _ = select.select([s4, s6], [], [], 1)
        for s in ready:
            data, src = s.recvfrom(100)
            got[s].add(data)
            print("received %r from %s" % (data, src[0]), flush=True)
    ok = all(len(v) >= 3 for v in got.values())
    print("IPv4 group: %d datagrams, IPv6 group: %d" % (len(got[s4]), len(got[s6])))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
