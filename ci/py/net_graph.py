"""net_graph.py FILE: the graph of an ibsim/ibnetdiscover topology file, one canonical
line per node (`node KIND GUID ports N`) and per link (`link GUID/PORT GUID/PORT`,
each link once, its ends in order), sorted: two files of the same fabric give the
same lines."""
import re
import sys

nodes, links, cur = set(), set(), None
for line in open(sys.argv[1]):
    m = re.match(r'^(Switch|Ca|Rt)\s+(\d+)\s+"([SHR])-([0-9a-f]+)"', line)
    if m:
        cur = int(m.group(4), 16)
        nodes.add("node %s %016x ports %s" % (m.group(1), cur, m.group(2)))
        continue
    m = re.match(r'^\[(\d+)\](?:\([0-9a-f]+\))?\s+"[SHR]-([0-9a-f]+)"\[(\d+)\]', line)
    if m and cur is not None:
        a = (cur, int(m.group(1)))
        b = (int(m.group(2), 16), int(m.group(3)))
        links.add("link %016x/%d %016x/%d" % (min(a, b) + max(a, b)))
for l in sorted(nodes) + sorted(links):
    print(l)
