#!/usr/bin/env python3
# ranges.py RUNDIR...: one line per run
import sys, re, os, glob
print("%-10s %5s %5s %7s %8s %5s %6s %6s %6s %6s %7s %7s %6s" % ("run","peak","anon","connCPU","connP99","cPeak","ep99","vs99","add99","rm99","maxlive","maxgoal","live20"))
for d in sys.argv[1:]:
    rep = os.path.join(d, "report.txt")
    if not os.path.exists(rep):
        print(d, "no report"); continue
    t = open(rep).read()
    row = {}
    for line in t.splitlines():
        f = line.split()
        if f and f[0] in ("connect","endpoint","virtualservice","service-add","service-remove"):
            row[f[0]] = f
    m = re.search(r"peak RSS (\d+) MiB \(anonymous (\d+) MiB\)", t)
    peak, anon = (m.group(1), m.group(2)) if m else ("?","?")
    c = row.get("connect")
    # columns: phase changes p50 p90 p99 max fp50 all99 missed pushes bytes nacks cpu cores peak tool
    connCPU, connP99, cpeak = (c[12], c[4], c[14]) if c else ("?",)*3
    g = lambda k: row[k][4] if k in row else "?"
    logs = glob.glob(os.path.join(d, "*.log"))
    maxlive = maxgoal = 0; live20 = "?"
    for lf in logs:
        for line in open(lf, errors="replace"):
            m = re.match(r"gc \d+ @([\d.]+)s .*? (\d+)->(\d+)->(\d+) MB, (\d+) MB goal", line)
            if not m: continue
            at, live, goal = float(m.group(1)), int(m.group(4)), int(m.group(5))
            maxlive = max(maxlive, live); maxgoal = max(maxgoal, goal)
            if live20 == "?" and at >= 20: live20 = str(live)
    print("%-10s %5s %5s %7s %8s %5s %6s %6s %6s %6s %7s %7s %6s" % (os.path.basename(d), peak, anon, connCPU, connP99, cpeak, g("endpoint"), g("virtualservice"), g("service-add"), g("service-remove"), maxlive, maxgoal, live20))
