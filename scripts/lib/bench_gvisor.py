#!/usr/bin/env python3
"""The gVisor hand-off's cost, per runsc and platform: driver of `scripts/bench --tests
gvisor-run` (see that script for usage).

For each runsc of the job and each platform it lists (`runsc help platforms`) that works
here, one cell. In a cell, the same foreground `run` of the job's /bin/true bundle three ways:

  moat    `moat run` with the gVisor runtime selected by a config file of the cell's own
          ([gvisor] runtime = "gvisor", runsc_path = that runsc, platform = that platform)
  runsc   plain runsc, the issue's reference: that runsc called directly on the engine's
          bundle with the global flags moat passed it (read from the record of one moat
          create of the bundle: --platform, --network, --oci-seccomp, --systemd-cgroup; a
          --root of its own on the same file system), the seccomp profile moat applied
          (the bundle's own, or moat's RESTRICTED profile as written where it has none),
          and a cgroupsPath as every engine gives (the bundle's, else
          moat's path per container); nothing else of moat's (no policy, no trampoline)
  spec    that runsc, the same flags, on the spec moat wrote for it (its config.json: the
          policy applied, the profile as moat rewrote it for runsc's conversion or the
          seccomp trampoline in front of the process; cgroupsPath per container): splits moat's cost into its spec's (spec − runsc: the work it asks of
          gVisor) and its own process's (moat − spec)

A platform is one cell when that moat create succeeds (kvm without /dev/kvm fails there:
skipped with a note naming runsc's error). Every round runs every (cell, way) once, in an
order shuffled per round (seeded, so a run repeats); a warm-up round first is not counted.
The figure is the ratio of the medians, moat/runsc, per cell, with the paired per-round
difference (the issue asks for at least 30 rounds: fewer is said under the table); and per
way, the ratio of platforms' medians (systrap/ptrace) for a runsc that has both. With tracefs, each call's time outside the `runsc run` process inside it (exec
to exit, sched_process_* tracepoints, recorded only during the calls): for moat, its
start-up, work, spawn, wait and the clean-up after runsc exits; for runsc, the driver's own
spawn and wait.

After each call nothing of the container may be left: no state directory in moat's root,
no state or lock file in runsc's root (checked each round; a leftover fails the run).
"""

import csv
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import (  # noqa: E402
    CALL_TIMEOUT,
    PR_SET_CHILD_SUBREAPER,
    Failure,
    RunscTracer,
    libc,
    note,
    quantile,
    read_pid,
    reap_orphans,
    reap_runsc,
    wait_exit,
    wait_or_kill,
)

WAYS = ("runsc", "spec", "moat")


def kvm_usable():
    """/dev/kvm, and a CPU with hardware virtualisation (a VM without nested KVM may have
    the device node without it)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = set(f.read().split())
    except OSError:
        return False
    return os.path.exists("/dev/kvm") and bool(flags & {"vmx", "svm"})


def fmt(v):
    return f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}"


class Cell:
    """One runsc binary and one platform: its moat config, roots and runsc flags."""

    def __init__(self, idx, runsc, version, platform, work):
        self.idx = idx
        self.runsc = runsc
        self.version = version
        self.platform = platform
        self.name = f"{version} {platform}"
        self.moat_root = os.path.join(work, "roots", f"{400 + idx}-moat-gvisor")
        self.runsc_root = os.path.join(work, "roots", f"{400 + idx}-runsc")
        self.config = os.path.join(work, f"gvrun-{idx}.toml")
        self.bundles = os.path.join(work, f"gvrun-{idx}-bundles")
        self.flags = None
        self.spec = None
        self.plain = None
        for d in (self.moat_root, self.runsc_root, self.bundles):
            os.makedirs(d, exist_ok=True)
        with open(self.config, "w") as f:
            f.write(f'[gvisor]\nruntime = "gvisor"\nrunsc_path = "{runsc}"\nplatform = "{platform}"\n')


class GvisorRun:
    def __init__(self, job):
        self.job = job
        self.work = job["workdir"]
        self.moat = job["moat"]
        self.cells = []
        self.samples = []  # (cell, way, iteration, ms, outside ms or None)
        self.seq = 0
        self.notes = []
        self.errf = tempfile.TemporaryFile(dir=self.work)
        self.tracer = None
        # tracefs mounted at /sys/kernel/tracing for the run when it is not (as the
        # profile does), unmounted at the end.
        self.tracefs_mounted = False
        if not os.path.isdir("/sys/kernel/tracing/instances"):
            self.tracefs_mounted = subprocess.run(
                ["mount", "-t", "tracefs", "nodev", "/sys/kernel/tracing"],
                stderr=subprocess.DEVNULL).returncode == 0
        try:
            self.tracer = RunscTracer()
        except OSError as e:
            note(f"*** NOTE: gvisor-run: time outside runsc not measured: tracefs unusable ({e}) ***")

    def say(self, msg):
        """A note on stderr and in the table's text."""
        note(f"*** NOTE: gvisor-run: {msg} ***")
        self.notes.append(msg)

    def moat_env(self, cell):
        return dict(os.environ, MOAT_CONFIG=cell.config)

    def call(self, argv, env, what):
        """Runs argv; returns (elapsed ns, pid). A non-zero exit fails the call. stderr
        goes to a file: a sandbox that `create` leaves running holds it open."""
        self.errf.seek(0)
        self.errf.truncate()
        t0 = time.perf_counter_ns()
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=self.errf, env=env)
        if not wait_or_kill(p, CALL_TIMEOUT):
            raise Failure(f"{what}: no exit after {CALL_TIMEOUT}s, killed")
        dt = time.perf_counter_ns() - t0
        if p.returncode != 0:
            self.errf.seek(0)
            err = self.errf.read().decode(errors="replace").strip()
            raise Failure(f"{what}: exit {p.returncode}: {err[-500:]}")
        return dt, p.pid

    # --- set-up ------------------------------------------------------------------
    def discover(self):
        idx = 0
        for runsc in self.job["runscs"]:
            out = subprocess.run([runsc, "--version"], capture_output=True, text=True, check=True).stdout
            version = out.split()[2] if out.startswith("runsc version") else out.split("\n")[0]
            version = version.replace("0.0~", "")
            plats = subprocess.run([runsc, "help", "platforms"], capture_output=True, text=True,
                                   check=True).stdout.split()
            want = self.job.get("platforms") or plats
            for platform in plats:
                if platform not in want:
                    continue
                if platform == "kvm" and not kvm_usable():
                    # runsc 20221219 and 20240729 then spin in the sandbox, never failing.
                    self.say(f"runsc {version} --platform=kvm left out: no /dev/kvm with VMX/SVM "
                             f"in /proc/cpuinfo here")
                    continue
                cell = Cell(idx, runsc, version, platform, self.work)
                idx += 1
                try:
                    self.capture(cell)
                except Failure as e:
                    self.say(f"runsc {version} --platform={platform} left out: it does not run "
                             f"here ({e})")
                    continue
                self.cells.append(cell)

    def capture(self, cell):
        """One moat create of the bundle in the cell's config: the flags moat recorded
        for runsc and the spec it wrote, for calling runsc directly with the same."""
        cid = f"gvrun{os.getpid()}-{cell.idx}-capture"
        env = self.moat_env(cell)
        argv = [self.moat, "--root", cell.moat_root]
        pidf = os.path.join(self.work, f"{cid}.pid")
        self.call(argv + ["create", "--bundle", self.job["bundle"], "--pid-file", pidf, cid], env,
                  f"moat create ({cell.name})")
        try:
            with open(os.path.join(cell.moat_root, cid, "state.json")) as f:
                backend = json.load(f)["backend"]
            with open(os.path.join(cell.moat_root, cid, "config.json")) as f:
                cell.spec = json.load(f)
            with open(os.path.join(cell.moat_root, cid, "policy.json")) as f:
                decision = json.load(f)
            with open(os.path.join(self.job["bundle"], "config.json")) as f:
                plain = json.load(f)
            # Run to its end, as runsc's delete waits for a sandbox we, its subreaper,
            # have reaped (a shim's or conmon's part).
            self.call(argv + ["start", cid], env, f"moat start ({cell.name})")
            wait_exit(read_pid(pidf))
            reap_runsc()
        finally:
            self.call(argv + ["delete", "--force", cid], env, f"moat delete ({cell.name})")
            reap_orphans()
        if backend.get("kind") != "gvisor" or backend.get("platform") != cell.platform:
            raise Failure(f"moat recorded {backend}, not gVisor on {cell.platform}")
        flags = [f"--platform={backend['platform']}", f"--network={backend['network']}"]
        if backend.get("oci_seccomp"):
            flags.append("--oci-seccomp")
        if backend.get("systemd_cgroup"):
            flags.append("--systemd-cgroup")
        cell.flags = flags
        # Plain runsc: the engine's spec, its rootfs where it is, and the profile moat
        # applied as a runsc user would give it: the engine's, else moat's RESTRICTED
        # profile as written (moat gives runsc its own rewrite of it, or none when the
        # process runs through the trampoline).
        root = plain.setdefault("root", {})
        root["path"] = os.path.join(os.path.abspath(self.job["bundle"]), root.get("path", "rootfs"))
        linux = plain.setdefault("linux", {})
        applied = [c for c in decision.get("changes", []) if c.get("field") == "linux.seccomp"
                   and c.get("action") == "set"]
        if "seccomp" not in linux and applied:
            with open(os.path.join(REPO, "seccomp-profiles", "restricted.json")) as f:
                linux["seccomp"] = json.load(f)
        # Engines always name the container's cgroup (runsc without one makes none): the
        # bundle's own, else moat's path (per container, as moat's way has it), so both
        # ways pay runsc's cgroup set-up and removal; moat's limits stay moat's.
        cg = cell.spec.get("linux", {}).get("cgroupsPath")
        if cg and not linux.get("cgroupsPath"):
            linux["cgroupsPath"] = cg
        cell.plain = plain

    # --- one measurement ---------------------------------------------------------
    def bundle_for(self, cell, way, cid):
        """The spec of `way` (plain runsc's or moat's) as a bundle of its own (its
        cgroupsPath, if any, per container)."""
        d = os.path.join(cell.bundles, cid)
        os.makedirs(d)
        spec = json.loads(json.dumps(cell.spec if way == "spec" else cell.plain))
        cg = spec.get("linux", {}).get("cgroupsPath")
        if cg:
            spec["linux"]["cgroupsPath"] = cg.rsplit("/", 1)[0] + "/" + cid
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(spec, f)
        return d

    def argv(self, cell, way, cid):
        if way == "moat":
            return [self.moat, "--root", cell.moat_root, "run", "--bundle", self.job["bundle"], cid], \
                self.moat_env(cell), None
        bundle = self.bundle_for(cell, way, cid)
        return [cell.runsc, f"--root={cell.runsc_root}", *cell.flags, "run", "--bundle", bundle, cid], \
            None, bundle

    def leftovers(self, cell, cid):
        """What of container cid is still on disk after its run returned."""
        left = []
        if os.path.exists(os.path.join(cell.moat_root, cid)):
            left.append(os.path.join(cell.moat_root, cid))
        for root in (cell.runsc_root, os.path.join(cell.moat_root, "@runsc")):
            if os.path.isdir(root):
                left += [os.path.join(root, n) for n in os.listdir(root) if n.startswith(f"{cid}_sandbox:")]
        return left

    def measure(self, cell, way, it):
        self.seq += 1
        cid = f"gvrun{os.getpid()}-{cell.idx}-{way}-{self.seq}"
        argv, env, bundle = self.argv(cell, way, cid)
        if self.tracer:
            self.tracer.take()
            self.tracer.on(True)
        try:
            t, pid = self.call(argv, env, f"{way} run ({cell.name})")
        finally:
            if self.tracer:
                self.tracer.on(False)
            # A gofer or sandbox that outlived runsc run is ours to reap, as a shim's.
            reap_runsc()
            if bundle:
                shutil.rmtree(bundle, ignore_errors=True)
        outside = None
        if self.tracer:
            life = self.tracer.runsc_life_ns(pid)
            if life is not None:
                outside = (t - life) / 1e6
        left = self.leftovers(cell, cid)
        if left:
            raise Failure(f"{way} run ({cell.name}) left {left}")
        if it >= 0:
            self.samples.append((cell, way, it, t / 1e6, outside))

    # --- main loop -----------------------------------------------------------------
    def main(self):
        self.discover()
        if not self.cells:
            self.say("no runsc and platform that run here: nothing measured")
            self.report()
            return 0
        iters, warm = self.job["iterations"], self.job["warmup"]
        order = [(c, w) for c in self.cells for w in WAYS]
        rng = random.Random(self.job.get("seed", 1))
        t_begin = time.monotonic()
        failed = 0
        for it in range(-warm, iters):
            rng.shuffle(order)
            for cell, way in order:
                try:
                    self.measure(cell, way, it)
                except Failure as e:
                    failed += 1
                    note(f"FAILED gvisor-run iteration {it}: {e}")
            if it >= 0 and (it + 1) % 10 == 0:
                note(f"gvisor-run: {it + 1}/{iters} rounds, {time.monotonic() - t_begin:.0f}s")
        self.report()
        return 1 if failed else 0

    def series(self, cell, way, outside=False):
        k = 4 if outside else 3
        return [s[k] for s in self.samples if s[0] is cell and s[1] == way and s[k] is not None]

    def life(self, cell, way):
        """The `runsc run` process's exec-to-exit inside each call."""
        return [s[3] - s[4] for s in self.samples if s[0] is cell and s[1] == way and s[4] is not None]

    def paired(self, cell, a="moat", b="runsc"):
        """a − b per round, over the rounds that have both."""
        by = {}
        for c, way, it, ms, _ in self.samples:
            if c is cell:
                by.setdefault(it, {})[way] = ms
        return [d[a] - d[b] for d in by.values() if a in d and b in d]

    def report(self):
        lines = ["", f"gVisor hand-off, foreground `run` of /bin/true (moat {self.job['moat']}), ms:", ""]
        lines.append("| runsc | platform | runsc median [min–max] | moat median [min–max] | moat/runsc "
                     "| moat − runsc, paired: median (p10–p90) | runsc on moat's spec: median, /runsc "
                     "| moat/spec | outside runsc: spec / moat | hand-off / runsc median "
                     "| runsc's own life: moat's/spec's |")
        lines.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        csv_rows, raw_rows, medians = [], [], {}
        for cell in self.cells:
            r, sp, m = self.series(cell, "runsc"), self.series(cell, "spec"), self.series(cell, "moat")
            if not r or not m or not sp:
                lines.append(f"| {cell.version} | {cell.platform} | — | — | — | — | — | — | — | — | — |")
                continue
            mr, ms, mm = statistics.median(r), statistics.median(sp), statistics.median(m)
            medians[(cell.version, cell.platform)] = (mr, mm)
            d = self.paired(cell)
            dtxt = f"{fmt(statistics.median(d))} ({fmt(quantile(d, 0.1))}–{fmt(quantile(d, 0.9))})" if d else "—"
            os_, om = self.series(cell, "spec", True), self.series(cell, "moat", True)
            otxt, share, life = "—", "—", "—"
            if os_ and om:
                otxt = f"{fmt(statistics.median(os_))} / {fmt(statistics.median(om))}"
                share = f"{(statistics.median(om) - statistics.median(os_)) / mr * 100:.1f} %"
                ls, lm = self.life(cell, "spec"), self.life(cell, "moat")
                life = f"{statistics.median(lm) / statistics.median(ls):.3f}"
            lines.append(f"| {cell.version} | {cell.platform} | {fmt(mr)} [{fmt(min(r))}–{fmt(max(r))}] "
                         f"| {fmt(mm)} [{fmt(min(m))}–{fmt(max(m))}] | **{mm / mr:.3f}** | {dtxt} "
                         f"| {fmt(ms)}, {ms / mr:.3f} | {mm / ms:.3f} | {otxt} | {share} | {life} |")
            metric = f"gvisor_run_{cell.version}_{cell.platform}_ms"
            names = {"runsc": "runsc", "spec": "runsc-moat-spec", "moat": "moat-gvisor"}
            for way, s in (("runsc", r), ("spec", sp), ("moat", m)):
                csv_rows.append([metric, names[way], len(s), f"{statistics.median(s):.4f}", f"{min(s):.4f}",
                                 f"{max(s):.4f}", f"{statistics.median(s) / mr:.4f}", "runsc"])
            for c, way, it, ms_, out in self.samples:
                if c is cell:
                    raw_rows.append([metric, names[way], it, f"{ms_:.4f}"])
        plat = [(v, p) for (v, p) in medians if p == "systrap" and (v, "ptrace") in medians]
        if plat:
            lines.append("")
            lines.append("| runsc | systrap/ptrace, runsc | systrap/ptrace, moat |")
            lines.append("|---|---:|---:|")
            for v, _ in plat:
                s, p = medians[(v, "systrap")], medians[(v, "ptrace")]
                lines.append(f"| {v} | {s[0] / p[0]:.3f} | {s[1] / p[1]:.3f} |")
        n = len({s[2] for s in self.samples})
        lines.append("")
        lines.append(f"{n} rounds (+{self.job['warmup']} warm-up), every (runsc, platform, way) once per "
                     f"round in a shuffled order. runsc: plain runsc on the engine's bundle with the "
                     f"flags moat passed it ("
                     + "; ".join(f"{c.version} {c.platform}: `{' '.join(c.flags)}`" for c in self.cells)
                     + ") and the seccomp profile moat applied. moat/runsc is the ratio of the medians, "
                     "the issue's figure. Spec: the same runsc and flags on the spec moat wrote (policy, "
                     "seccomp trampoline): spec/runsc is what moat's spec costs inside gVisor, moat/spec "
                     "what moat's own process costs. Outside runsc: the call minus the `runsc run` "
                     "process's exec-to-exit (tracefs); the hand-off is moat's median of it less spec's, "
                     "against runsc's median run: moat's process without runsc's own variation. "
                     "runsc's own life: the ratio of the medians of that exec-to-exit, moat's way to "
                     "spec's: above 1, runsc itself ran longer when moat started it.")
        if n < 30:
            lines.append(f"\n> NOTE: {n} rounds: the issue's figure needs at least 30.")
        for msg in self.notes:
            lines.append(f"\n> NOTE: {msg}")
        text = "\n".join(lines) + "\n"
        print(text, flush=True)
        if self.job.get("md"):
            with open(self.job["md"], "a") as f:
                if f.tell() == 0:
                    f.write(self.job["header"])
                f.write(text)
        for path, rows, head in ((self.job.get("csv"), csv_rows,
                                  ["metric", "runtime", "n", "median", "min", "max", "ratio", "reference"]),
                                 (self.job.get("raw"), raw_rows, ["metric", "runtime", "iteration", "value"])):
            if path:
                with open(path, "a", newline="") as f:
                    w = csv.writer(f)
                    if f.tell() == 0:
                        w.writerow(head)
                    w.writerows(rows)

    def cleanup(self):
        """Whatever an interrupted or failed run left in the cells' roots."""
        for cell in self.cells:
            for argv, env in (([self.moat, "--root", cell.moat_root], self.moat_env(cell)),
                              ([cell.runsc, f"--root={cell.runsc_root}"], None)):
                try:
                    out = subprocess.run(argv + ["list", "--quiet"], capture_output=True, text=True,
                                         env=env, timeout=60).stdout
                    for cid in out.split():
                        note(f"warning: removing leftover container {cid} ({cell.name})")
                        subprocess.run(argv + ["delete", "--force", cid], capture_output=True, env=env,
                                       timeout=60)
                except (OSError, subprocess.SubprocessError) as e:
                    note(f"cleanup of {cell.name}: {e}")
        reap_orphans()


def main():
    with open(sys.argv[1]) as f:
        job = json.load(f)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        note("warning: could not become a child subreaper")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    bench = GvisorRun(job)
    try:
        return bench.main()
    except KeyboardInterrupt:
        return 130
    finally:
        if bench.tracer:
            bench.tracer.close()
        if bench.tracefs_mounted:
            subprocess.run(["umount", "/sys/kernel/tracing"])
        bench.cleanup()


if __name__ == "__main__":
    sys.exit(main())
