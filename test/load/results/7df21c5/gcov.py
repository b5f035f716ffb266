#!/usr/bin/env python3
# gcov.py RUNDIR [phase]: each change's last-proxy time, and whether a GC overlapped its fan-out
import sys, json, re, datetime
d = sys.argv[1]; phase = sys.argv[2] if len(sys.argv) > 2 else "endpoint"
r = json.load(open(d + "/report.json"))
st = r["serverStarted"]
t0 = datetime.datetime.fromisoformat(st[:26].rstrip("Z")).replace(tzinfo=datetime.timezone.utc).timestamp()
gcs = []
for line in open(d + "/server.log", errors="replace"):
    m = re.match(r"gc \d+ @([\d.]+)s \d+%: ([\d.]+)\+([\d.]+)\+([\d.]+) ms clock", line)
    if m:
        s = float(m.group(1)); w = (float(m.group(2)) + float(m.group(3)) + float(m.group(4))) / 1000
        gcs.append((s, s + w))
out = []
for p in r["phases"]:
    if p["name"] != phase: continue
    for c in p.get("perChange", []):
        a = c["at"] / 1000 - t0; e = a + c["lastMs"] / 1000
        ov = [g for g in gcs if g[0] < e and g[1] > a]
        out.append((c["lastMs"], a, bool(ov)))
for last, a, ov in out:
    print("%7.1f ms at %6.1f s %s" % (last, a, "GC" if ov else ""))
with_gc = [l for l, a, o in out if o]; without = [l for l, a, o in out if not o]
print("with GC: n=%d mean %.0f; without: n=%d mean %.0f max %.0f" % (len(with_gc), sum(with_gc)/max(1,len(with_gc)), len(without), sum(without)/max(1,len(without)), max(without) if without else 0))
