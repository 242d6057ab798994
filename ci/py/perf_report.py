"""perf_report.py OUT: the table of a ci/perf.sh run whose files are in OUT: ours against
perftest (median over the rounds), cmtime, the byte streams, the transport operation
and the instruction counts."""
import glob, os, re, statistics, sys
out = sys.argv[1]


def perftest_cols(path, size):
    """The columns of perftest's result row for `size` in the output file
    `path` (ours print the same row), or None."""
    for line in open(path, errors="replace"):
        cols = line.split()
        if len(cols) >= 5 and cols[0] == str(size) and cols[1].isdigit():
            return cols
    return None


def ran_well(run):
    """Whether both sides of the run exited with 0 (its .rc file)."""
    rc = run + ".rc"
    return os.path.exists(rc) and open(rc).read().split() == ["0", "0"]


vals = {}
for f in sorted(glob.glob(os.path.join(out, "*.client"))):
    prov, test, size, prog, rnd = os.path.basename(f)[: -len(".client")].split(".")
    cols = perftest_cols(f, size)
    if cols is None:
        continue
    try:
        if test.endswith("_lat"):
            pairs = [("t_typical[us]", float(cols[4])), ("t_min[us]", float(cols[2]))]
        else:
            # BW peak (MB/s of 2^20 bytes) as a message rate.
            peak = float(cols[2]) * 1048576 / int(size) / 1e6
            pairs = [("MsgRate[Mpps]", float(cols[4])), ("peak[Mpps]", peak)]
    except ValueError:
        continue
    for metric, v in pairs:
        if not 0 < v < float("inf"):  # perftest now and then prints 0 or inf: no sample
            continue
        vals.setdefault((prov, test, int(size), metric), {}).setdefault(prog, []).append(v)
print(f"{'test':<10} {'provider':<8} {'size':>6} {'metric':<14} {'ours':>10} {'perftest':>10} {'ratio':>7}  target")
order = {"t_typical[us]": 0, "MsgRate[Mpps]": 0, "t_min[us]": 1, "peak[Mpps]": 1}
for (prov, test, size, metric), by in sorted(
        vals.items(), key=lambda kv: (kv[0][0] != "rxe", kv[0][1], kv[0][2], order[kv[0][3]])):
    lat = test.endswith("_lat")
    o = statistics.median(by["ours"]) if by.get("ours") else None
    p = statistics.median(by["perftest"]) if by.get("perftest") else None
    ratio = o / p if o and p else None
    def fmt(v):
        if v is None:
            return f"{'n/a':>10}"
        return f"{v:10.2f}" if lat else f"{v:10.6f}"
    if ratio is None:
        rs, target = f"{'n/a':>7}", ""
    elif lat:
        rs, target = f"{ratio:7.3f}", "<=1.00 " + ("met" if ratio <= 1.0 else "missed")
    else:
        rs, target = f"{ratio:7.3f}", ">=1.00 " + ("met" if ratio >= 1.0 else "missed")
    print(f"{test:<10} {prov:<8} {size:>6} {metric:<14} {fmt(o)} {fmt(p)} {rs}  {target}")
# cmtime: per round, the total of the CM steps of each; the median over the
# rounds of each step, and of the per-round ratio ours / rdma-core.
steps = ["resolve addr", "resolve route", "connect", "disconnect"]
cm = {}
for f in sorted(glob.glob(os.path.join(out, "*.cmtime.*.cm"))):
    prov, _, n, prog, rnd = os.path.basename(f)[: -len(".cm")].split(".")
    cm.setdefault((prov, int(n)), {})
    text = open(f, errors="replace").read()
    # A run counts when both sides exited well and no connection failed
    # (rdma-core's cmtime reports a failed one and still exits with 0).
    if not ran_well(f[: -len(".cm")]) or re.search(r"fail|error", text, re.I):
        continue
    row = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name.strip() in steps and rest.split():
            try:
                row[name.strip()] = float(rest.split()[0])
            except ValueError:
                pass
    if len(row) == len(steps):
        cm.setdefault((prov, int(n)), {}).setdefault(int(rnd), {})[prog] = row
for (prov, n), rounds in sorted(cm.items(), key=lambda kv: kv[0][0] != "rxe"):
    both = [r for r in rounds.values() if "ours" in r and "rdmacore" in r]
    print()
    print(f"cmtime on {prov}, {n} connections, {len(both)} rounds with both "
          f"(total ms, median over the rounds; target ours/C <= 1.00):")
    print(f"  {'step':<14} {'ours':>10} {'C':>10} {'ratio':>7}")
    if not both:
        print("  no round where both completed every connection")
        continue
    for st in steps:
        o = statistics.median(r["ours"][st] for r in both)
        c = statistics.median(r["rdmacore"][st] for r in both)
        print(f"  {st:<14} {o:10.2f} {c:10.2f} {o / c:7.3f}")
    per = [sum(r["ours"].values()) / sum(r["rdmacore"].values()) for r in both]
    o = statistics.median(sum(r["ours"].values()) for r in both)
    c = statistics.median(sum(r["rdmacore"].values()) for r in both)
    med = statistics.median(per)
    print(f"  {'CM steps':<14} {o:10.2f} {c:10.2f} {med:7.3f}  (median of the per-round ratios "
          f"{' '.join(f'{x:.2f}' for x in per)}) " + ("met" if med <= 1.0 else "missed"))
# Byte streams: the client's usec/xfer per run (the last column of
# rstream's row; half a round trip in the latency test), medians over the
# rounds, the bandwidth from it (one transfer's bits over its time), and
# the ratios ours / rsockets and ours / TCP.
st = {}
for f in sorted(glob.glob(os.path.join(out, "*.rstream.*.stream"))):
    prov, _, kind, prog, rnd = os.path.basename(f)[: -len(".stream")].split(".")
    if not ran_well(f[: -len(".stream")]):
        continue
    for line in open(f, errors="replace"):
        cols = line.split()
        if len(cols) == 8 and cols[0] == "custom":
            try:
                usec = float(cols[7])
            except ValueError:
                break
            if 0 < usec < float("inf"):
                st.setdefault((prov, kind), {}).setdefault(prog, {})[int(rnd)] = usec
            break
labels = {"ours": "ours", "rsocket": "rsockets", "tcp": "TCP", "tokiotcp": "tokio TCP"}
for prov in sorted({k[0] for k in st}, key=lambda p: p != "rxe"):
    progs = [p for p in ("ours", "rsocket", "tcp", "tokiotcp")
             if any(p in st.get((prov, k), {}) for k in ("lat", "bw"))]
    print()
    print(f"rstream on {prov}: ours (rdma::stream, tokio) vs rdma-core's rstream over rsockets "
          f"and over TCP; medians over the rounds")
    print(f"  {'test':<14} {'metric':<10} " + " ".join(f"{labels[p]:>9}" for p in progs)
          + f" {'ours/rs':>8} {'ours/TCP':>8}  target")
    for kind, size, metric in (("lat", 64, "usec/xfer"), ("blat", 64, "usec/xfer"),
                               ("bw", 65536, "Gb/s")):
        by = st.get((prov, kind), {})
        if not by:
            continue
        def value(usec):
            return usec if kind != "bw" else size * 8 / 1000 / usec
        med = {p: statistics.median(value(u) for u in by[p].values()) for p in progs if by.get(p)}
        def cell(p):
            return f"{med[p]:9.2f}" if p in med else f"{'n/a':>9}"
        def ratio(p):
            if "ours" in med and p in med:
                return med["ours"] / med[p]
            return None
        rs, rt = ratio("rsocket"), ratio("tcp")
        fr = lambda x: f"{x:8.3f}" if x is not None else f"{'n/a':>8}"
        if rs is None:
            target = ""
        elif kind in ("lat", "blat"):
            target = "<=1.00 vs rsockets " + ("met" if rs <= 1.0 else "missed")
        else:
            target = ">=1.00 vs rsockets " + ("met" if rs >= 1.0 else "missed")
        name = {"lat": "64 B ping-pong", "blat": "64 B, -T b", "bw": "64 KiB batch"}[kind]
        print(f"  {name:<14} {metric:<10} " + " ".join(cell(p) for p in progs)
              + f" {fr(rs)} {fr(rt)}  {target}")
        # The per-round ratios, where both ran in the round.
        per = [value(by["ours"][r]) / value(by["rsocket"][r])
               for r in sorted(by.get("ours", {})) if r in by.get("rsocket", {})]
        if per:
            print(f"  {'':<14} {'':<10} ours/rsockets per round: " + " ".join(f"{x:.2f}" for x in per))
# The transport operation: t_typical of each 64-byte ping-pong of SENDs
# and of WRITEs with immediate (both ours), medians over the rounds and
# the median of the per-round ratios.
op = {}
for f in sorted(glob.glob(os.path.join(out, "rxe.transport.*.tclient"))):
    _, _, kind, rnd = os.path.basename(f)[: -len(".tclient")].split(".")
    cols = perftest_cols(f, 64) if ran_well(f[: -len(".tclient")]) else None
    try:
        v = float(cols[4]) if cols else 0.0
    except ValueError:
        continue
    if 0 < v < float("inf"):
        op.setdefault(kind, {})[int(rnd)] = v
if op:
    print()
    print("the operation under the stream's small messages, on rxe: a 64-byte inline ping-pong "
          "(our send_lat and write_lat --write_with_imm; t_typical, medians over the rounds)")
    for kind, label in (("send", "SEND (rdma::stream)"), ("wimm", "WRITE with imm (rsockets)")):
        v = op.get(kind, {})
        cell = f"{statistics.median(v.values()):8.2f} us" if v else "     n/a"
        print(f"  {label:<28} {cell}  ({len(v)} rounds)")
    per = [op["wimm"][r] / op["send"][r] for r in sorted(op.get("wimm", {})) if r in op.get("send", {})]
    if per:
        print(f"  WRITE with imm / SEND: median of the per-round ratios {statistics.median(per):.3f} "
              f"({' '.join(f'{x:.2f}' for x in per)})")
n_path = os.path.join(out, "count.iters")
if os.path.exists(n_path):
    n = int(open(n_path).read())
    def total(path):
        if not os.path.exists(path):
            return None
        t = None
        for line in open(path, errors="replace"):
            m = re.match(r"(summary|totals):\s+(\d+)", line)
            if m:
                t = int(m.group(2))
        return t
    c = total(os.path.join(out, "callgrind.c"))
    print()
    print(f"instructions per post + poll on rxe (callgrind, {n} iterations; target <= 1.02 x C):")
    for name, label in (("c", "C inline (ci/post_poll.c)"), ("rust", "ours, safe API"),
                        ("prepared", "ours, safe, prepared list"),
                        ("port", "ours, ibverbs-sys ports")):
        t = total(os.path.join(out, "callgrind." + name))
        if t is None:
            print(f"  {label:<28} no callgrind total (see count.{name}.log)")
            continue
        ratio = f"  ratio {t / c:.4f}" if c and name != "c" else ""
        print(f"  {label:<28} {t / n:8.1f}{ratio}")
n_path = os.path.join(out, "count.stream.iters")
if os.path.exists(n_path):
    n, reps = (int(x) for x in open(n_path).read().split())
    per = {}
    for prog in ("ours", "rsocket"):
        got = []
        for rep in range(1, reps + 1):
            a = total(os.path.join(out, f"callgrind.stream.{prog}.{n}.{rep}"))
            b = total(os.path.join(out, f"callgrind.stream.{prog}.{3 * n}.{rep}"))
            if a is not None and b is not None:
                got.append((b - a) / (2 * n))
        per[prog] = got
    print()
    print(f"instructions per 64-byte round trip of an rstream client on rxe (callgrind, "
          f"{3 * n} less {n} round trips, median of {reps}; target <= 1.00 x rsockets):")
    med = {p: statistics.median(v) if v else None for p, v in per.items()}
    for prog, label in (("ours", "ours (rdma::stream, tokio)"), ("rsocket", "rsockets")):
        if med[prog] is None:
            print(f"  {label:<28} no callgrind total (see count.stream.{prog}.*.log)")
            continue
        ratio = (f"  ratio {med[prog] / med['rsocket']:.3f}"
                 if prog == "ours" and med["rsocket"] else "")
        each = " ".join(f"{v:.0f}" for v in per[prog])
        print(f"  {label:<28} {med[prog]:8.1f}{ratio}  (runs: {each})")
