"""netaddr.py ipv6-exploded ADDR | free-port: the IPv6 address ADDR written out in full
(fd00:3::1 -> fd00:0003:0000:...:0001, as sysfs writes GIDs); or a TCP port of
127.0.0.1 that is free now."""
import ipaddress
import socket
import sys

if sys.argv[1] == "ipv6-exploded":
    print(ipaddress.IPv6Address(sys.argv[2]).exploded)
elif sys.argv[1] == "free-port":
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    print(s.getsockname()[1])
else:
    sys.exit(f"netaddr.py: unknown command {sys.argv[1]}")
