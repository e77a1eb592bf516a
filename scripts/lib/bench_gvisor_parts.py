#!/usr/bin/env python3
"""What each part of moat's spec for runsc costs: runsc called directly (no moat) on the
job's /bin/true bundle, plain and with one part of moat's spec at a time.

Usage: scripts/lib/bench_gvisor_parts.py MOAT ROUNDS RUNSC...

For each runsc and platform (the cells of scripts/lib/bench_gvisor.py, captured the same
way: one `moat create` of the bundle gives the flags moat passes runsc and the spec it
wrote), these ways, each a foreground `runsc run` with those flags:

  plain       plain runsc (bench_gvisor.py's reference: the engine's spec, moat's seccomp
              profile, a cgroupsPath)
  +mount      plain + the trampoline's read-only bind mount at /dev/.moat-seccomp-exec
  +tramp0     + the process through the trampoline with an allow-all filter
  +tramp      + the process through the trampoline with moat's filter (moat's trampoline,
              whole)
  spec        the spec moat wrote
  spec-X      that spec without part X (the trampoline; or one group of the fields in
              which moat's spec differs from plain's, listed at the start of the run)
  plain-scmp, spec-scmp   plain's and moat's spec without linux.seccomp: what runsc's own
              conversion of the profile costs (--oci-seccomp is still passed)

BENCH_PARTS_WAYS=w1,w2 keeps only those ways (and plain and spec).

Every round runs every (cell, way) once, in an order shuffled per round (seeded); one
warm-up round first. Per cell: each way's median, and the paired per-round difference
against its reference (plain for the + ways, spec for the spec- ways): median (p10–p90).
Nothing of a container may be left after its run (bench_gvisor.py's check).

Needs root, moat's release build with moat-seccomp-exec next to it, and scripts/mkbundle's
rootfs cache.
"""

import copy
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import PR_SET_CHILD_SUBREAPER, Failure, libc, note, quantile  # noqa: E402
from bench_gvisor import GvisorRun, fmt  # noqa: E402

TRAMP_DEST = "/dev/.moat-seccomp-exec"
# The trampoline's filter argument for SECCOMP_RET_ALLOW alone: flags 0, one BPF_RET|BPF_K.
ALLOW_ALL = "00000000" + "0600" + "00" + "00" + "0000ff7f"


def tramp_parts(spec):
    """The trampoline's mount and argv prefix in moat's spec."""
    args = spec["process"]["args"]
    if args[:2] != [TRAMP_DEST, "--moat-gvisor-seccomp-exec"]:
        raise Failure("moat's spec has no seccomp trampoline (its process runs under runsc's conversion of the profile, src/gvisor/seccomp_runsc.rs: nothing of it to take apart)")
    mount = next(m for m in spec["mounts"] if m["destination"] == TRAMP_DEST)
    return mount, args[:4]


def with_tramp(spec, mount, prefix, filt=None):
    s = copy.deepcopy(spec)
    s.setdefault("mounts", []).append(copy.deepcopy(mount))
    if prefix is not None:
        p = list(prefix)
        if filt is not None:
            p[3] = filt
        s["process"]["args"] = p + s["process"]["args"]
    return s


def without_tramp(spec):
    s = copy.deepcopy(spec)
    s["mounts"] = [m for m in s["mounts"] if m["destination"] != TRAMP_DEST]
    s["process"]["args"] = s["process"]["args"][4:]
    return s


def groups(plain, spec):
    """The fields in which moat's spec (less the trampoline) differs from plain's, as
    (name, [json paths]) groups: each path is a tuple of keys."""
    diffs = []

    def walk(a, b, path):
        if isinstance(a, dict) and isinstance(b, dict):
            for k in sorted(set(a) | set(b)):
                walk(a.get(k), b.get(k), path + (k,))
        elif a != b:
            diffs.append(path)

    walk(plain, without_tramp(spec), ())
    out = {}
    for p in diffs:
        if p[:1] == ("mounts",):
            key = "mounts"
        elif p[:2] == ("process", "capabilities"):
            key = "caps"
        elif p[:3] == ("linux", "resources", "pids"):
            key = "pids"
        elif p[:2] in (("linux", "maskedPaths"), ("linux", "readonlyPaths")):
            key = "masked+readonly"
        elif p in (("linux", "resources", "unified"), ("process", "terminal")) and not \
                get(spec, p)[0]:
            # Empty or false in moat's spec, absent in plain's: the same to runsc.
            key = "empty"
        else:
            key = ".".join(p[:2])
        out.setdefault(key, []).append(p)
    return out


def get(d, path):
    for k in path:
        if not isinstance(d, dict) or k not in d:
            return None, False
        d = d[k]
    return d, True


def put(d, path, value, present):
    for k in path[:-1]:
        d = d.setdefault(k, {})
    if present:
        d[path[-1]] = copy.deepcopy(value)
    else:
        d.pop(path[-1], None)


class Parts(GvisorRun):
    def variants(self, cell):
        plain, spec = cell.plain, cell.spec
        mount, prefix = tramp_parts(spec)
        v = {
            "plain": plain,
            "mount": with_tramp(plain, mount, None),
            "tramp0": with_tramp(plain, mount, prefix, ALLOW_ALL),
            "tramp": with_tramp(plain, mount, prefix),
            "spec": spec,
            "spec-tramp": without_tramp(spec),
        }
        for name, paths in groups(plain, spec).items():
            s = copy.deepcopy(spec)
            for p in paths:
                val, present = get(plain, p)
                if p == ("mounts",):
                    # Keep the trampoline's mount: only the other mounts go back to plain's.
                    val = list(val or []) + [mount]
                    present = True
                put(s, p, val, present)
            v["spec-" + name.replace(".", "_").replace("+", "_")] = s
            if cell.idx == 0 and name == "mounts":
                pm = plain.get("mounts", [])
                self.say("moat's spec differs (way spec-mounts): its mounts not in plain's, the "
                         "trampoline's aside: " + json.dumps(
                    [m for m in without_tramp(spec)["mounts"] if m not in pm]))
            elif cell.idx == 0:
                self.say(f"moat's spec differs (way spec-{name}): " + "; ".join(
                    f"{'.'.join(map(str, p))}: {json.dumps(get(plain, p)[0])[:120]} → "
                    f"{json.dumps(get(without_tramp(spec), p)[0])[:160]}" for p in paths))
        # runsc's own conversion of the profile (--oci-seccomp), as the part it is of plain
        # runsc and of moat's spec.
        v["plain-scmp"] = copy.deepcopy(plain)
        v["plain-scmp"].get("linux", {}).pop("seccomp", None)
        v["spec-scmp"] = copy.deepcopy(spec)
        v["spec-scmp"]["linux"].pop("seccomp", None)
        want = [w for w in os.environ.get("BENCH_PARTS_WAYS", "").split(",") if w]
        if want:
            v = {k: s for k, s in v.items() if k in want or k in ("plain", "spec")}
        cell.variants = v
        return list(v)

    def measure(self, cell, way, it):
        """bench_gvisor.py's measure, and the CPU time (user + system) of every process
        of the run: `runsc run`, and the sandbox, gofer and stubs reaped after it (this
        driver is their subreaper). Much less moved by other load than wall time."""
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        n = len(self.samples)
        super().measure(cell, way, it)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        if len(self.samples) > n:
            cpu = (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) * 1e3
            self.cpu.append((cell, way, it, cpu))

    def cpu_series(self, cell, way):
        return [c for ce, w, _, c in self.cpu if ce is cell and w == way]

    def cpu_paired(self, cell, a, b):
        by = {}
        for ce, w, it, c in self.cpu:
            if ce is cell:
                by.setdefault(it, {})[w] = c
        return [d[a] - d[b] for d in by.values() if a in d and b in d]

    def bundle_for(self, cell, way, cid):
        d = os.path.join(cell.bundles, cid)
        os.makedirs(d)
        spec = copy.deepcopy(cell.variants[way])
        cg = spec.get("linux", {}).get("cgroupsPath")
        if cg:
            spec["linux"]["cgroupsPath"] = cg.rsplit("/", 1)[0] + "/" + cid
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(spec, f)
        return d

    def argv(self, cell, way, cid):
        bundle = self.bundle_for(cell, way, cid)
        return [cell.runsc, f"--root={cell.runsc_root}", *cell.flags, "run", "--bundle", bundle, cid], \
            None, bundle

    def main(self):
        self.cpu = []
        self.discover()
        if not self.cells:
            self.say("no runsc and platform that run here: nothing measured")
            return 1
        order = [(c, w) for c in self.cells for w in self.variants(c)]
        iters, warm = self.job["iterations"], self.job["warmup"]
        rng = random.Random(self.job.get("seed", 1))
        t0, failed = time.monotonic(), 0
        for it in range(-warm, iters):
            rng.shuffle(order)
            for cell, way in order:
                try:
                    self.measure(cell, way, it)
                except Failure as e:
                    failed += 1
                    note(f"FAILED gvisor-parts iteration {it}: {e}")
            if it >= 0 and (it + 1) % 5 == 0:
                note(f"gvisor-parts: {it + 1}/{iters} rounds, {time.monotonic() - t0:.0f}s, "
                     f"load {os.getloadavg()[0]:.1f}")
        self.report()
        return 1 if failed else 0

    def report(self):
        lines = ["", "runsc run of /bin/true, ms: per way, the median of the call's wall time and of "
                 "its processes' CPU time (user + system, runsc and everything it started), and the "
                 "paired per-round difference to the way's reference (plain for +mount, +tramp0, "
                 "+tramp, spec and plain-scmp; spec for the other spec-… ways): median (p10–p90)", ""]
        lines.append("| runsc | platform | way | wall median | Δ wall, paired: median (p10–p90) "
                     "| CPU median | Δ CPU, paired: median (p10–p90) |")
        lines.append("|---|---|---|---:|---:|---:|---:|")
        for cell in self.cells:
            for way in cell.variants:
                s = self.series(cell, way)
                if not s:
                    continue
                ref = "plain" if way in ("mount", "tramp0", "tramp", "spec", "plain-scmp") else "spec"
                d = self.paired(cell, way, ref) if way not in ("plain",) else []
                dtxt = (f"{fmt(statistics.median(d))} ({fmt(quantile(d, 0.1))}–{fmt(quantile(d, 0.9))})"
                        if d else "—")
                label = "+" + way if way in ("mount", "tramp0", "tramp") else way
                c = self.cpu_series(cell, way)
                dc = self.cpu_paired(cell, way, ref) if way != "plain" else []
                ctxt = (f"{fmt(statistics.median(dc))} ({fmt(quantile(dc, 0.1))}–{fmt(quantile(dc, 0.9))})"
                        if dc else "—")
                lines.append(f"| {cell.version} | {cell.platform} | {label} | {fmt(statistics.median(s))} "
                             f"| {dtxt} | {fmt(statistics.median(c)) if c else '—'} | {ctxt} |")
        n = len({s[2] for s in self.samples})
        lines.append("")
        lines.append(f"{n} rounds (+{self.job['warmup']} warm-up), every (runsc, platform, way) once per "
                     f"round in a shuffled order; load at the end {os.getloadavg()}.")
        for msg in self.notes:
            lines.append(f"\n> NOTE: {msg}")
        print("\n".join(lines) + "\n", flush=True)


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__.split("\n\n")[1])
    moat, rounds, runscs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    scripts = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    work = tempfile.mkdtemp(prefix="moat-gvparts.")
    os.makedirs(os.path.join(work, "roots"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0700,size=256m", "moat-gvparts-roots",
                    os.path.join(work, "roots")], check=True)
    bench = None
    try:
        subprocess.run([os.path.join(scripts, "mkbundle"), os.path.join(work, "bundle"), "/bin/true"],
                       check=True, stdout=subprocess.DEVNULL)
        if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            note("warning: could not become a child subreaper")
        job = {"workdir": work, "bundle": os.path.join(work, "bundle"), "moat": moat,
               "iterations": rounds, "warmup": 1, "runscs": runscs,
               "platforms": [p for p in os.environ.get("BENCH_GVISOR_PLATFORMS", "").split(",") if p]}
        bench = Parts(job)
        return bench.main()
    finally:
        if bench:
            if bench.tracer:
                bench.tracer.close()
            if bench.tracefs_mounted:
                subprocess.run(["umount", "/sys/kernel/tracing"])
            bench.cleanup()
        subprocess.run(["umount", os.path.join(work, "roots")])
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
