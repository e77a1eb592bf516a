#!/usr/bin/env python3
"""The `scale` test of scripts/bench (see that script for usage).

For each runtime, one after another (rounds interleave them: A B C, A B C, ...):

  1. N `create`s of a container running `sleep` are spawned at once and waited for,
     then N `start`s at once: time to all-running is the wall time from the first
     create's spawn to the last start's exit (every container then shows `running` in
     one `list`);
  2. while that burst runs, a sampler process (this script with --sample) walks the
     driver's process tree as fast as it can (at most every 10 ms) and sums, over the
     runtime's own processes (every process but the containers' `sleep`s), their RSS
     (/proc/PID/statm) and their PSS (/proc/PID/smaps_rollup); the peak of each sum is
     reported, with the number of samples;
  3. all N idle (after a 1 s settle), the host memory of every process in the tree —
     the containers' `sleep`s and whatever the runtime leaves running for them (moat's
     DNS forwarders, gVisor's sandboxes and gofers) — as PSS summed from smaps_rollup,
     per container (divided by N), broken down by process name; also the memory charged
     to the containers' own memory cgroups (memory.usage_in_bytes: user and kernel
     memory, page tables and the like; a forwarder is not in its container's cgroup);
  4. N `delete --force` at once; then nothing may be left: `list` empty, no process
     in the tree, every cgroup the containers' processes were in removed.

The driver is a child subreaper (like conmon and the containerd shim), so every process
a runtime leaves behind — container inits, forwarders, sandboxes — is re-parented to it
and is found by walking its descendants. Runtime calls are waited for with one
waitpid(-1) loop that also reaps those orphans as they exit (runsc's delete waits for its
gofer to be reaped, as a shim would).
"""

import csv
import json
import os
import signal
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import Failure, Runtime, note  # noqa: E402

PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024
CONTAINER_COMM = "sleep"
V1_CONTROLLERS = {"cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "net_cls", "blkio",
                  "perf_event", "net_prio", "hugetlb", "pids", "rdma", "misc"}
PHASE_TIMEOUT = 600


# --- the process tree ------------------------------------------------------------
def children(pid):
    out = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for t in tasks:
        try:
            with open(f"/proc/{pid}/task/{t}/children") as f:
                out += [int(x) for x in f.read().split()]
        except OSError:
            pass
    return out


def descendants(root, exclude=()):
    seen, todo = [], children(root)
    while todo:
        p = todo.pop()
        if p in exclude:
            continue
        seen.append(p)
        todo += children(p)
    return seen


def comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return None


def label(pid):
    """A process's name for the breakdown: argv[0]'s basename (runsc's processes all
    run /proc/self/exe, comm `exe`, but name themselves runsc-sandbox, runsc-gofer), or
    [comm] when it has no command line (gVisor's ptrace stubs)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv0 = f.read().split(b"\0", 1)[0].decode(errors="replace")
    except OSError:
        return None
    if argv0:
        return os.path.basename(argv0)
    c = comm(pid)
    return f"[{c}]" if c else None


def rss_kb(pid):
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * PAGE_KB
    except (OSError, IndexError, ValueError):
        return 0


def rollup(pid):
    """{field: KB} from /proc/PID/smaps_rollup (empty for a zombie or a gone pid)."""
    out = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                parts = line.split()
                if len(parts) == 3 and parts[2] == "kB":
                    out[parts[0].rstrip(":")] = int(parts[1])
    except OSError:
        pass
    return out


def cgroups(pid):
    """[(controllers, path)] from /proc/PID/cgroup."""
    out = []
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            for line in f:
                _, ctrl, path = line.rstrip("\n").split(":", 2)
                out.append((ctrl, path))
    except OSError:
        pass
    return out


def cgroup_mounts():
    """controllers field of /proc/PID/cgroup ("memory", "name=systemd", "" for v2) ->
    the hierarchy's mount point."""
    out = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, right = line.split(" - ", 1)
            mnt = left.split()[4]
            fstype, _, opts = right.split()[:3]
            if fstype == "cgroup2":
                out.setdefault("", mnt)
            elif fstype == "cgroup":
                ctrls = [o for o in opts.split(",") if o in V1_CONTROLLERS or o.startswith("name=")]
                if ctrls:
                    out.setdefault(",".join(ctrls), mnt)
    return out


# --- the sampler (a process of its own, so it takes the other core, not our GIL) ----
def sampler_main(root):
    me = os.getpid()
    stop = []
    signal.signal(signal.SIGUSR1, lambda *_: stop.append(1))
    print("ready", flush=True)
    peak_rss = peak_pss = peak_procs = most_procs = samples = 0
    while not stop:
        t0 = time.monotonic()
        rss = pss = procs = 0
        pids = descendants(root, exclude=(me,))
        for p in pids:
            if comm(p) in (CONTAINER_COMM, None):
                continue
            procs += 1
            rss += rss_kb(p)
            pss += rollup(p).get("Pss", 0)
        samples += 1
        if rss > peak_rss:
            peak_rss, peak_procs = rss, procs
        peak_pss = max(peak_pss, pss)
        most_procs = max(most_procs, procs)
        left = 0.010 - (time.monotonic() - t0)
        if left > 0 and not stop:
            time.sleep(left)
    json.dump({"peak_rss_kb": peak_rss, "peak_pss_kb": peak_pss, "procs_at_peak_rss": peak_procs,
               "most_procs": most_procs, "samples": samples}, sys.stdout)
    sys.stdout.flush()
    return 0


class Sampler:
    def __init__(self):
        self.p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--sample", str(os.getpid())],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
        self.result = None
        # Its SIGUSR1 handler is in place: a signal before it would kill it.
        if self.p.stdout.readline() != b"ready\n":
            raise Failure("the memory sampler did not start")

    def stop(self):
        self.p.send_signal(signal.SIGUSR1)
        out, _ = self.p.communicate(timeout=60)
        self.result = json.loads(out)
        return self.result


# --- the test --------------------------------------------------------------------
class Scale:
    def __init__(self, job):
        self.job = job
        self.work = job["workdir"]
        self.runtimes = [Runtime(200 + i, s, job) for i, s in enumerate(job["runtimes"])]
        self.n = {r.name: s.get("scale", job["scale"]) for r, s in zip(self.runtimes, job["runtimes"])}
        self.samples = []  # (metric, runtime, round, value)
        self.breakdown = {}  # runtime -> {comm: [count, pss_kb]} (last round)
        self.mounts = cgroup_mounts()
        self.own_cgroups = set(cgroups(os.getpid()))
        self.reaped = {}  # pid -> wait status, of processes not spawned by a phase
        self.failures = 0
        self.sampler_pid = None

    def record(self, rnd, metric, rt, value):
        self.samples.append((metric, rt.name, rnd, value))

    def reap(self, pending, deadline):
        """Waits until every pid in `pending` (dict pid -> anything) has exited, reaping
        every other child (orphans re-parented to us) on the way. Returns {pid: rc}."""
        rcs = {}
        while len(rcs) < len(pending):
            try:
                pid, st = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                raise Failure(f"no child left but {len(pending) - len(rcs)} calls unaccounted for")
            if pid == 0:
                if time.monotonic() > deadline:
                    left = [p for p in pending if p not in rcs]
                    for p in left:
                        os.kill(p, signal.SIGKILL)
                    raise Failure(f"{len(left)} calls still running after {PHASE_TIMEOUT}s, killed")
                time.sleep(0.0005)
                continue
            if pid in pending:
                rcs[pid] = os.waitstatus_to_exitcode(st)
            elif pid != self.sampler_pid:
                self.reaped[pid] = st
        return rcs

    def reap_orphans(self):
        while True:
            try:
                pid, st = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.reaped[pid] = st

    def phase(self, rt, argvs, what):
        """Spawns every argv at once and waits for all; returns the wall time in ns."""
        errdir = os.path.join(self.work, f"scale-err-{rt.idx}")
        os.makedirs(errdir, exist_ok=True)
        procs = {}
        t0 = time.perf_counter_ns()
        for i, a in enumerate(argvs):
            # stderr to a file, not a pipe: a created container's init inherits create's
            # stdio and would hold a pipe open. Closed here at once: fds stay few at N=1000.
            with open(os.path.join(errdir, str(i)), "wb") as ef:
                p = rt.spawn(a, stderr=ef)
            procs[p.pid] = (i, p)
        rcs = self.reap(procs, time.monotonic() + PHASE_TIMEOUT)
        dt = time.perf_counter_ns() - t0
        errs = []
        for pid, (i, p) in procs.items():
            p.returncode = rcs[pid]  # waited for above: keep Popen from waiting again
            if rcs[pid] != 0:
                with open(os.path.join(errdir, str(i)), "rb") as f:
                    errs.append(f"{' '.join(argvs[i][3:])}: exit {rcs[pid]}: "
                                f"{f.read().decode(errors='replace').strip()[-300:]}")
        if errs:
            raise Failure(f"{rt.name} {what}: {len(errs)} of {len(argvs)} failed, first: {errs[0]}")
        return dt

    def wrapper_ns(self, rt, n):
        """The wrapping's own cost for n spawns at once (crun with cgroup2 hidden: a fork
        with a mount namespace made before exec): wrapped minus plain /bin/true."""
        def burst(spawn):
            t0 = time.perf_counter_ns()
            ps = [spawn() for _ in range(n)]
            for p in ps:
                p.wait()
            return time.perf_counter_ns() - t0
        plain = burst(lambda: subprocess.Popen(["/bin/true"], stdin=subprocess.DEVNULL))
        wrapped = burst(lambda: rt.spawn(["/bin/true"]))
        return max(0, wrapped - plain)

    def list_ids(self, rt):
        p = rt.spawn(rt.cmd("list", "--format", "json"), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = p.communicate(timeout=120)
        if p.returncode != 0:
            raise Failure(f"{rt.name} list: exit {p.returncode}: {err.decode(errors='replace')[-300:]}")
        return json.loads(out or b"null") or []

    def idle(self, rt, n, rnd):
        """Memory of everything in the tree with all n containers idle."""
        time.sleep(1.0)  # forwarders finish setting up, exits settle
        pids = descendants(os.getpid(), exclude=(self.sampler_pid,))
        total = {"Pss": 0, "Rss": 0, "Private": 0}
        by = {}
        cgs = set()
        for p in pids:
            c = label(p)
            if c is None:
                continue
            r = rollup(p)
            total["Pss"] += r.get("Pss", 0)
            total["Rss"] += r.get("Rss", 0)
            total["Private"] += r.get("Private_Clean", 0) + r.get("Private_Dirty", 0)
            e = by.setdefault(c, [0, 0])
            e[0] += 1
            e[1] += r.get("Pss", 0)
            for cg in cgroups(p):
                if cg not in self.own_cgroups and cg[1] != "/":
                    cgs.add(cg)
        memcg = 0
        for ctrl, path in cgs:
            mnt = self.mounts.get(ctrl)
            if not mnt:
                continue
            if ctrl == "memory":
                f = f"{mnt}{path}/memory.usage_in_bytes"
            elif ctrl == "" and "memory" not in self.mounts:
                f = f"{mnt}{path}/memory.current"
            else:
                continue
            try:
                with open(f) as fh:
                    memcg += int(fh.read()) // 1024
            except OSError:
                pass
        self.record(rnd, "idle_pss_kb_per_container", rt, total["Pss"] / n)
        self.record(rnd, "idle_private_kb_per_container", rt, total["Private"] / n)
        self.record(rnd, "idle_rss_kb_per_container", rt, total["Rss"] / n)
        self.record(rnd, "idle_memcg_kb_per_container", rt, memcg / n)
        self.record(rnd, "idle_processes_per_container", rt, len(pids) / n)
        self.breakdown[rt.name] = by
        return cgs

    def leftovers(self, rt, cgs):
        """After delete: what is left, as a list of sentences (empty: nothing)."""
        left = []
        deadline = time.monotonic() + 10
        while True:
            self.reap_orphans()
            procs = descendants(os.getpid(), exclude=(self.sampler_pid,))
            gone = [(c, p) for c, p in cgs if c in self.mounts and os.path.isdir(self.mounts[c] + p)]
            if (not procs and not gone) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        if procs:
            left.append(f"{len(procs)} processes: " + ", ".join(f"{p} ({comm(p)})" for p in procs[:10]))
            for p in procs:  # ours: spawned by our runtime calls, re-parented to us
                try:
                    os.kill(p, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.2)
            self.reap_orphans()
        if gone:
            left.append(f"{len(gone)} cgroups: " + ", ".join(f"{c}:{p}" for c, p in gone[:10]))
            for c, p in sorted(gone, key=lambda x: -len(x[1])):
                try:
                    os.rmdir(self.mounts[c] + p)
                except OSError:
                    pass
        try:
            ids = self.list_ids(rt)
        except Failure as e:
            left.append(str(e))
            ids = []
        if ids:
            left.append(f"{len(ids)} containers in `list`")
        # A container's state is a directory named by its id; `@` names (moat's @cache of
        # compiled seccomp filters, runsc's root @runsc) are the root's own.
        for d in (rt.root, os.path.join(rt.root, "@runsc")):
            if os.path.isdir(d):
                ents = [e for e in os.listdir(d) if not e.startswith("@")]
                if ents:
                    left.append(f"{len(ents)} entries in {d}: {' '.join(sorted(ents)[:5])}")
        return left

    def one(self, rt, rnd):
        n = self.n[rt.name]
        # Of one length, so that no id is a prefix of another: runsc takes a unique prefix
        # of an id for the id ("ms-1" would be ambiguous next to "ms-11").
        ids = [f"ms{os.getpid()}-{rt.idx}-{rnd}-{i:05d}" for i in range(n)]
        bundle = rt.sleep_bundle or self.job["sleep_bundle"]
        self.reap_orphans()
        created = False
        try:
            sampler = Sampler()
            self.sampler_pid = sampler.p.pid
            try:
                t0 = time.perf_counter_ns()
                created = True
                t_create = self.phase(rt, [rt.cmd("create", "--bundle", bundle, c) for c in ids], "create")
                t_start = self.phase(rt, [rt.cmd("start", c) for c in ids], "start")
                t_running = time.perf_counter_ns() - t0
            finally:
                peak = sampler.stop()
                self.reap_orphans()
            states = {s["id"]: s["status"] for s in self.list_ids(rt)}
            bad = [c for c in ids if states.get(c) != "running"]
            if bad:
                raise Failure(f"{rt.name}: {len(bad)} of {n} not running after start, e.g. "
                              f"{bad[0]}: {states.get(bad[0], 'absent')}")
            cgs = self.idle(rt, n, rnd)
            sampler = Sampler()
            self.sampler_pid = sampler.p.pid
            try:
                t_delete = self.phase(rt, [rt.cmd("delete", "--force", c) for c in ids], "delete")
                created = False
            finally:
                dpeak = sampler.stop()
        finally:
            if created:
                # Concurrently and reaping as we go (runsc's delete waits for its gofer to
                # be reaped); containers never created fail here, which is fine.
                try:
                    self.phase(rt, [rt.cmd("delete", "--force", c) for c in ids], "cleanup delete")
                except Failure:
                    pass
            self.reap_orphans()
        w = self.wrapper_ns(rt, n) if rt.hide else 0
        self.reap_orphans()
        self.record(rnd, "running_ms", rt, (t_running - 2 * w) / 1e6)
        self.record(rnd, "create_ms", rt, (t_create - w) / 1e6)
        self.record(rnd, "start_ms", rt, (t_start - w) / 1e6)
        self.record(rnd, "delete_ms", rt, (t_delete - w) / 1e6)
        if rt.hide:
            self.record(rnd, "wrapper_ms", rt, w / 1e6)
        self.record(rnd, "burst_peak_rss_mb", rt, peak["peak_rss_kb"] / 1024)
        self.record(rnd, "burst_peak_pss_mb", rt, peak["peak_pss_kb"] / 1024)
        self.record(rnd, "burst_most_processes", rt, peak["most_procs"])
        self.record(rnd, "burst_samples", rt, peak["samples"])
        self.record(rnd, "delete_peak_rss_mb", rt, dpeak["peak_rss_kb"] / 1024)
        left = self.leftovers(rt, cgs)
        if left:
            raise Failure(f"{rt.name}: left after delete: " + "; ".join(left))
        note(f"scale {rt.name} x{n}: all running in {(t_running - 2 * w) / 1e9:.2f}s, "
             f"peak {peak['peak_rss_kb'] / 1024:.0f} MB RSS, nothing left after delete")

    def main(self):
        rounds = self.job["rounds"]
        t_begin = time.monotonic()
        for rnd in range(rounds):
            for rt in self.runtimes:
                t = time.monotonic()
                try:
                    self.one(rt, rnd)
                except Failure as e:
                    rt.failures += 1
                    note(f"FAILED scale round {rnd} {rt.name}: {e}")
                self.record(rnd, "test_s", rt, time.monotonic() - t)
        note(f"scale: {time.monotonic() - t_begin:.0f}s for {rounds} round(s)")
        self.report()
        return 1 if any(r.failures for r in self.runtimes) else 0

    # --- output -------------------------------------------------------------------
    def report(self):
        lines = []

        def out(s=""):
            print(s)
            lines.append(s)

        names = [r.name for r in self.runtimes]
        ref = "moat" if "moat" in names else names[0]
        by = {}
        for m, name, _, v in self.samples:
            by.setdefault(m, {}).setdefault(name, []).append(v)
        order = ["running_ms", "create_ms", "start_ms", "delete_ms", "burst_peak_rss_mb", "burst_peak_pss_mb",
                 "burst_most_processes", "delete_peak_rss_mb", "idle_pss_kb_per_container",
                 "idle_private_kb_per_container", "idle_rss_kb_per_container", "idle_memcg_kb_per_container",
"idle_processes_per_container", "burst_samples",
                 "wrapper_ms", "test_s"]
        # Totals over N are compared only between runtimes at the same N.
        per_container = {m for m in order if m.startswith("idle_")}

        def fmt(x):
            return f"{x:.0f}" if abs(x) >= 100 else f"{x:.2f}" if abs(x) < 10 else f"{x:.1f}"

        stats = {(m, n): (statistics.median(v), min(v), max(v), len(v))
                 for m, d in by.items() for n, v in d.items()}
        others = [n for n in names if n != ref]
        rounds = self.job["rounds"]
        cell = (lambda s: f"{fmt(s[0])} [{fmt(s[1])}–{fmt(s[2])}]") if rounds > 1 else (lambda s: fmt(s[0]))
        head = ["metric"] + [f"{n} (N={self.n[n]})" for n in names] + [f"{n}/{ref}" for n in others]
        out()
        out("| " + " | ".join(head) + " |")
        out("|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|")
        rows = []
        for m in [m for m in order if m in by]:
            cells = [m]
            for n in names:
                s = stats.get((m, n))
                cells.append(cell(s) if s else "—")
            for n in others:
                a, b = stats.get((m, n)), stats.get((m, ref))
                same = m in per_container or self.n[n] == self.n[ref]
                cells.append(f"{a[0] / b[0]:.2f}" if a and b and b[0] > 0 and same and m != "test_s" else "—")
            out("| " + " | ".join(cells) + " |")
            for n in names:
                s = stats.get((m, n))
                if s:
                    b = stats.get((m, ref))
                    ratio = f"{s[0] / b[0]:.4f}" if b and b[0] > 0 else ""
                    rows.append([f"scale_{m}", n, s[3], f"{s[0]:.4f}", f"{s[1]:.4f}", f"{s[2]:.4f}", ratio, ref])
        out()
        out(f"{rounds} round(s){', medians [min–max]' if rounds > 1 else ' (one round: single values)'}, "
            f"runtimes one after another; N containers running `sleep` created at once, then started at "
            f"once. running_ms = first create spawned to last start returned (every one `running`). "
            f"burst_peak_* = the largest sum, over the sampled tree, of the runtime's own processes "
            f"(all but the containers' `sleep`s) from the first create to the last start, RSS from statm "
            f"and PSS from smaps_rollup, sampled at most every 10 ms (burst_samples). idle_*_per_container "
            f"= with all N idle after 1 s, the sum over every process the containers left on the host "
            f"(`sleep`s, forwarders, sandboxes) divided by N: PSS, private (clean + dirty) and RSS from "
            f"smaps_rollup; memcg = memory.usage_in_bytes of the containers' own memory cgroups (user + "
            f"kernel). "
            f"Totals are compared only at the same N (—); per-container figures always.")
        for rt in self.runtimes:
            if rt.hide:
                out(f"{rt.name}: calls run in a private mount namespace with cgroup2 hidden; the "
                    f"wrapper's cost for N spawns at once (wrapper_ms) is subtracted once per phase.")
        out()
        out("Idle memory by process name, PSS KB per container (processes per container):")
        out()
        for n in names:
            b = self.breakdown.get(n)
            if not b:
                continue
            parts = [f"{c} {pss / self.n[n]:.0f} ({cnt / self.n[n]:.2f})"
                     for c, (cnt, pss) in sorted(b.items(), key=lambda kv: -kv[1][1])]
            out(f"- {n}: " + "; ".join(parts))
        for rt in self.runtimes:
            if rt.failures:
                out(f"**{rt.name}: {rt.failures} failed round(s)** (see stderr)")
        if self.job.get("md"):
            with open(self.job["md"], "a") as f:
                if f.tell() == 0:
                    f.write(self.job.get("header", ""))
                f.write("\n".join(lines) + "\n")
        if self.job.get("csv"):
            new = not os.path.exists(self.job["csv"]) or os.path.getsize(self.job["csv"]) == 0
            with open(self.job["csv"], "a", newline="") as f:
                w = csv.writer(f)
                if new:
                    w.writerow(["metric", "runtime", "n", "median", "min", "max", "ratio", "reference"])
                w.writerows(rows)
        if self.job.get("raw"):
            new = not os.path.exists(self.job["raw"]) or os.path.getsize(self.job["raw"]) == 0
            with open(self.job["raw"], "a", newline="") as f:
                w = csv.writer(f)
                if new:
                    w.writerow(["metric", "runtime", "iteration", "value", "adjusted"])
                w.writerows([(f"scale_{m}", n, r, v, v) for m, n, r, v in self.samples])


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--sample":
        return sampler_main(int(sys.argv[2]))
    with open(sys.argv[1]) as f:
        job = json.load(f)
    from bench import libc, PR_SET_CHILD_SUBREAPER
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        note("*** could not become a child subreaper: the scale test needs it ***")
        return 1
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    scale = Scale(job)
    try:
        return scale.main()
    except KeyboardInterrupt:
        return 130
    finally:
        # Whatever is left in the roots (interrupt, failure) goes.
        for rt in scale.runtimes:
            try:
                for s in scale.list_ids(rt):
                    rt.call("delete", "--force", s["id"], check=False)
            except Exception as e:  # noqa: BLE001 - best effort cleanup
                note(f"cleanup of {rt.name}: {e}")
        scale.reap_orphans()


if __name__ == "__main__":
    sys.exit(main())
