#!/usr/bin/env python3
"""Benchmark driver behind scripts/bench (see that script for usage).

Reads a JSON job description (argv[1]) and measures, interleaved across the
runtimes (A B C A B C ...), on one busybox bundle running /bin/true:

  cycle       create -> start -> wait for exit -> delete (each phase recorded)
  run         foreground `run` of /bin/true
  rss         peak RSS of the `create` process and of an `exec` of /bin/true into
              a running container, via GNU time (see below)
  exec        foreground `exec` of /bin/true into one running container
  concurrent  N containers created concurrently, then started, waited, deleted
  gvisor      create -> start -> wait -> delete through `moat-gvisor` and through
              runsc called directly with the flags moat gives it, as pairs (the
              order alternating per iteration); moat's overhead is the median of
              the per-pair differences of create + start + delete. With tracefs, each
              call's time outside runsc is measured too: the call minus the life of
              the runsc process inside it (exec to exit, from the kernel's
              sched_process_* tracepoints), which takes runsc's own ±30 ms out of the
              difference while runsc still does the real work

Waiting for exit: the driver is a child subreaper (like conmon and the
containerd shim), so the container init is re-parented to it once `create`
returns and is waited for directly; if it is not our child (a runtime that
keeps a monitor), the pid from --pid-file is polled until gone or a zombie.

Peak RSS: ru_maxrss of a process includes the memory of whatever it exec'd
from, so a runtime spawned straight from Python would report Python's size.
GNU time forks from a ~1 MB process; its floor is measured on /bin/true and
reported.

Runtimes with hide_cgroup2 (crun on a hybrid-cgroup host) run every call in a
private mount namespace with /sys/fs/cgroup/unified unmounted, done in the
forked child before exec ("ns" mode) or by scripts/lib/crun-hybrid ("shell").
That wrapper's own cost is measured on /bin/true and subtracted per call.
"""

import csv
import ctypes
import html
import io
import json
import os
import re
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

CLONE_NEWNS = 0x00020000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MNT_DETACH = 2
PR_SET_CHILD_SUBREAPER = 36
CALL_TIMEOUT = 60

libc = ctypes.CDLL(None, use_errno=True)


def note(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def hide_cgroup2():
    """preexec_fn: private mount namespace without the cgroup2 mount."""
    if libc.unshare(CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS)")
    if libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        raise OSError(ctypes.get_errno(), "make / rprivate")
    libc.umount2(b"/sys/fs/cgroup/unified", MNT_DETACH)


class Failure(Exception):
    pass


class Runtime:
    def __init__(self, idx, spec, job):
        self.idx = idx
        self.name = spec["name"]
        self.path = spec["path"]
        self.hide = spec.get("hide_cgroup2", False)
        self.mode = job.get("cgroup2_wrapper", "ns")
        self.root = os.path.join(job["workdir"], "roots", f"{idx}-{self.name}")
        # Global flags after --root (runsc called directly gets moat's choices).
        self.global_args = spec.get("global_args", [])
        # A fresh --root per container, <root>/<id>/runsc, as moat gives runsc.
        self.root_per_container = spec.get("root_per_container", False)
        # runsc called directly with the spec moat gives runsc (the policy applied): a
        # config.json captured from moat; each container gets its own cgroupsPath.
        self.effective_spec = None
        if spec.get("effective_spec"):
            with open(spec["effective_spec"]) as f:
                self.effective_spec = json.load(f)
        # Extra environment (the no-op runsc variant points MOAT_CONFIG at /bin/true).
        self.env = dict(os.environ, **spec["env"]) if spec.get("env") else None
        # A bundle of its own (moat's bounded-root variants: a writable root), else the job's.
        self.bundle = spec.get("bundle")
        self.sleep_bundle = spec.get("sleep_bundle")
        self.cur_root = None
        os.makedirs(self.root, exist_ok=True)
        self.wrapper_shell = job["crun_hybrid"]
        self.errf = tempfile.TemporaryFile(dir=job["workdir"])
        self.failures = 0
        self.last_pid = None

    def cmd(self, *args):
        return [self.path, "--root", self.cur_root or self.root, *self.global_args, *args]

    def spawn(self, argv, **kw):
        """Popen argv with this runtime's wrapping; argv[0] is the program the
        wrapper finally execs (the runtime, GNU time, or /bin/true)."""
        kw.setdefault("stdin", subprocess.DEVNULL)
        kw.setdefault("stdout", subprocess.DEVNULL)
        if self.env is not None:
            kw.setdefault("env", self.env)
        if self.hide and self.mode == "ns":
            kw["preexec_fn"] = hide_cgroup2
        elif self.hide and self.mode == "shell":
            kw["env"] = dict(os.environ, CRUN=argv[0])
            argv = [self.wrapper_shell] + list(argv[1:])
        return subprocess.Popen(argv, **kw)

    def call(self, *args, check=True):
        """Run one runtime command; returns elapsed ns. stderr kept for errors."""
        self.errf.seek(0)
        self.errf.truncate()
        t0 = time.perf_counter_ns()
        p = self.spawn(self.cmd(*args), stderr=self.errf)
        self.last_pid = p.pid
        if not wait_or_kill(p, CALL_TIMEOUT):
            # A runtime that hangs (youki 0.7's foreground run now and then) fails this
            # measurement instead of the whole benchmark.
            raise Failure(f"{self.name} {' '.join(args)}: no exit after {CALL_TIMEOUT}s, killed")
        rc = p.returncode
        dt = time.perf_counter_ns() - t0
        if check and rc != 0:
            self.errf.seek(0)
            err = self.errf.read().decode(errors="replace").strip()
            raise Failure(f"{self.name} {' '.join(args)}: exit {rc}: {err[-500:]}")
        return dt


def wait_or_kill(p, timeout):
    """Waits for Popen p to exit, woken by its pidfd the moment it does; after
    `timeout` seconds kills it and returns False. (Popen.wait(timeout=...) polls with
    sleeps that double up to 50 ms, which rounds every measured call up to the next
    poll: 1.5, 3.5, 7.5, ... 63.5 ms.)"""
    fd = os.pidfd_open(p.pid)
    try:
        ready, _, _ = select.select([fd], [], [], timeout)
    finally:
        os.close(fd)
    if not ready:
        p.kill()
        p.wait()
        return False
    p.wait()
    return True


def wait_exit(pid, timeout=30):
    """Wait for pid to exit: waitpid if it is our child, else poll /proc."""
    try:
        os.waitpid(pid, 0)
        return
    except ChildProcessError:
        pass
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return
        if state in ("Z", "X"):
            return
        time.sleep(0.0005)
    raise Failure(f"pid {pid} still running after {timeout}s")


def reap_orphans():
    """Collect zombies re-parented to us (only called with no Popen in flight)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def reap_runsc(timeout=10):
    """Reap our runsc children (gofer, ptrace stubs) once they exit, as a shim or
    conmon does at once: runsc's delete waits until they are gone, which a zombie
    never is. Other children (the exec test's containers) are left alone."""
    me = os.getpid()
    deadline = time.monotonic() + timeout
    while True:
        reap_orphans()
        try:
            with open(f"/proc/{me}/task/{me}/children") as f:
                kids = f.read().split()
        except OSError:
            return
        left = []
        for k in kids:
            try:
                with open(f"/proc/{k}/stat") as f:
                    zombie = f.read().rsplit(")", 1)[1].split()[0] == "Z"
                with open(f"/proc/{k}/cmdline", "rb") as f:
                    cmdline = f.read()
                # An exiting process's cmdline is empty before it turns zombie: wait for
                # it, then reap it on a later turn.
                if zombie or not cmdline or cmdline.startswith(b"runsc"):
                    left.append(k)
            except OSError:
                pass
        if not left:
            return
        if time.monotonic() > deadline:
            raise Failure(f"runsc processes {left} still running after {timeout}s")
        time.sleep(0.0005)


def read_pid(path):
    with open(path) as f:
        return int(f.read().strip())


def quantile(vals, q):
    """Linear-interpolated quantile of a non-empty list."""
    v = sorted(vals)
    k = (len(v) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


class TraceInstance:
    """A private tracefs instance (so other tracing on the host is untouched) on the
    monotonic clock, recording `events` ("group/name") while on."""

    LINE = re.compile(r"^\s*.+?-(\d+)\s+\[\d+\]\s+\S+\s+([\d.]+): (\w+): (.*)$")

    def __init__(self, base, tag, events, buffer_kb, options=()):
        if base is None:
            raise OSError("no tracefs with instances")
        self.dir = os.path.join(base, "instances", f"{tag}-{os.getpid()}")
        os.mkdir(self.dir)
        try:
            self._write("buffer_size_kb", str(buffer_kb))
            self._write("trace_clock", "mono")
            self._write("tracing_on", "0")
            for opt in options:
                self._write(f"options/{opt}", "1")
            for ev in events:
                self._write(f"events/{ev}/enable", "1")
        except OSError:
            self.close()
            raise

    def _write(self, name, value):
        with open(os.path.join(self.dir, name), "w") as f:
            f.write(value)

    def on(self, enabled):
        """Records only while a measured call runs (tracing costs every event on the
        host something)."""
        self._write("tracing_on", "1" if enabled else "0")

    def take_raw(self):
        """The events since the last take, as (pid, seconds, event, the rest)."""
        with open(os.path.join(self.dir, "trace")) as f:
            text = f.read()
        self._write("trace", "")
        out = []
        for line in text.splitlines():
            m = self.LINE.match(line)
            if m:
                out.append((int(m.group(1)), float(m.group(2)), m.group(3), m.group(4)))
        return out

    def close(self):
        try:
            self._write("tracing_on", "0")
        except OSError:
            pass
        try:
            os.rmdir(self.dir)
        except OSError as e:
            note(f"warning: could not remove tracefs instance {self.dir}: {e}")


class RunscTracer(TraceInstance):
    """How long the runsc process inside a call lived, from exec to exit, read from
    the kernel's sched_process_{fork,exec,exit} tracepoints. A call's time outside runsc
    is its wall time minus that: for moat-gvisor, moat's start-up, work, spawn and
    wait; for runsc called directly, the driver's own spawn and wait."""

    def __init__(self):
        base = next((b for b in ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")
                     if os.path.isdir(os.path.join(b, "instances"))), None)
        events = [f"sched/{ev}" for ev in ("sched_process_fork", "sched_process_exec",
                                           "sched_process_exit")]
        super().__init__(base, "moat-bench", events, 8192)

    def take(self):
        """The events since the last take, as (pid, seconds, event, fields)."""
        return [(pid, ts, ev, dict(re.findall(r"(\w+)=(\S+)", rest)))
                for pid, ts, ev, rest in self.take_raw()]

    def runsc_life_ns(self, root_pid):
        """exec-to-exit of the first process under root_pid (itself included) that
        executed a file named runsc; None when there was none."""
        tree = {root_pid}
        execd = None
        for pid, ts, ev, f in self.take():
            if ev == "sched_process_fork" and int(f.get("pid", -1)) in tree:
                tree.add(int(f.get("child_pid", -1)))
            elif (ev == "sched_process_exec" and execd is None and pid in tree
                  and os.path.basename(f.get("filename", "")) == "runsc"):
                execd = (pid, ts)
            elif ev == "sched_process_exit" and execd and int(f.get("pid", -1)) == execd[0]:
                return round((ts - execd[1]) * 1e9)
        return None


class Bench:
    def __init__(self, job):
        self.job = job
        self.work = job["workdir"]
        self.bundle = job["bundle"]
        self.sleep_bundle = job["sleep_bundle"]
        self.runtimes = [Runtime(i, s, job) for i, s in enumerate(job["runtimes"])]
        self.samples = []  # (metric, runtime, iteration, value)
        self.seq = 0
        self.exec_ids = {}
        self.rss_floor_kb = None
        gv = job.get("gvisor")
        # moat through its moat-gvisor alias, and runsc as moat calls it.
        self.gvisor = [Runtime(100 + i, s, job) for i, s in enumerate(gv)] if gv else []
        noop = job.get("gvisor_noop")
        self.gvisor_noop_rt = Runtime(110, noop, job) if noop else None
        self.tracer = None
        self.tracefs_mounted = False
        if self.gvisor and "gvisor" in job["tests"]:
            # Mounted at /sys/kernel/tracing for the run when it is not (as the profile
            # does), unmounted at the end.
            if not os.path.isdir("/sys/kernel/tracing/instances"):
                self.tracefs_mounted = subprocess.run(
                    ["mount", "-t", "tracefs", "nodev", "/sys/kernel/tracing"],
                    stderr=subprocess.DEVNULL).returncode == 0
            try:
                self.tracer = RunscTracer()
            except OSError as e:
                note(f"*** NOTE: time outside runsc not measured: tracefs unusable ({e}) ***")

    def cid(self, rt, kind):
        self.seq += 1
        return f"mb{os.getpid()}-{rt.idx}-{kind}-{self.seq}"

    def record(self, it, metric, rt, value):
        if it >= 0:
            self.samples.append((metric, rt.name, it, value))

    # --- one measurement each -------------------------------------------------
    def cycle(self, rt, it):
        cid = self.cid(rt, "c")
        pidf = os.path.join(self.work, f"{cid}.pid")
        created = False
        try:
            t_create = rt.call("create", "--bundle", rt.bundle or self.bundle, "--pid-file", pidf, cid)
            created = True
            pid = read_pid(pidf)
            t_start = rt.call("start", cid)
            t0 = time.perf_counter_ns()
            wait_exit(pid)
            t_wait = time.perf_counter_ns() - t0
            t_delete = rt.call("delete", cid)
            created = False
        finally:
            if created:
                rt.call("delete", "--force", cid, check=False)
            if os.path.exists(pidf):
                os.unlink(pidf)
            reap_orphans()
        self.record(it, "create_ms", rt, t_create / 1e6)
        self.record(it, "start_ms", rt, t_start / 1e6)
        self.record(it, "wait_ms", rt, t_wait / 1e6)
        self.record(it, "delete_ms", rt, t_delete / 1e6)
        self.record(it, "cycle_ms", rt, (t_create + t_start + t_wait + t_delete) / 1e6)

    def run(self, rt, it):
        cid = self.cid(rt, "r")
        try:
            t = rt.call("run", "--bundle", rt.bundle or self.bundle, cid)
        finally:
            reap_orphans()
        self.record(it, "run_ms", rt, t / 1e6)

    def timed_maxrss_kb(self, rt, argv):
        """Peak RSS (KB) of argv run under GNU time, inside the runtime's wrapping."""
        out = os.path.join(self.work, "rss.txt")
        rt.errf.seek(0)
        rt.errf.truncate()
        rc = rt.spawn([self.job["gnu_time"], "-f", "%M", "-o", out] + argv, stderr=rt.errf).wait()
        if rc != 0:
            rt.errf.seek(0)
            raise Failure(f"{rt.name} (under time) {' '.join(argv[1:])}: exit {rc}: "
                          f"{rt.errf.read().decode(errors='replace')[-500:]}")
        with open(out) as f:
            return int(f.read().strip().splitlines()[-1])

    def rss(self, rt, it):
        cid = self.cid(rt, "m")
        pidf = os.path.join(self.work, f"{cid}.pid")
        created = False
        try:
            kb = self.timed_maxrss_kb(rt, rt.cmd("create", "--bundle", rt.bundle or self.bundle, "--pid-file", pidf, cid))
            created = True
            pid = read_pid(pidf)
            rt.call("start", cid)
            wait_exit(pid)
            rt.call("delete", cid)
            created = False
        finally:
            if created:
                rt.call("delete", "--force", cid, check=False)
            if os.path.exists(pidf):
                os.unlink(pidf)
            reap_orphans()
        self.record(it, "create_rss_kb", rt, kb)
        cid = self.exec_ids.get(rt.name)
        if cid:
            kb = self.timed_maxrss_kb(rt, rt.cmd("exec", cid, "/bin/true"))
            reap_orphans()
            self.record(it, "exec_rss_kb", rt, kb)

    def exec_setup(self, rt):
        cid = self.cid(rt, "x")
        rt.call("create", "--bundle", rt.sleep_bundle or self.sleep_bundle, cid)
        self.exec_ids[rt.name] = cid
        rt.call("start", cid)

    def exec_(self, rt, it):
        cid = self.exec_ids[rt.name]
        t = rt.call("exec", cid, "/bin/true")
        reap_orphans()
        self.record(it, "exec_ms", rt, t / 1e6)

    def concurrent(self, rt, it):
        n = self.job["concurrency"]
        ids = [self.cid(rt, "p") for _ in range(n)]
        pidfs = [os.path.join(self.work, f"{c}.pid") for c in ids]
        live = []

        def phase(argvs):
            # stderr to files, not pipes: a created container's init inherits
            # create's stdio and would hold a pipe open until it exits.
            errfs = [tempfile.TemporaryFile(dir=self.work) for _ in argvs]
            t0 = time.perf_counter_ns()
            procs = [rt.spawn(a, stderr=ef) for a, ef in zip(argvs, errfs)]
            rcs = [p.wait() for p in procs]
            dt = time.perf_counter_ns() - t0
            errs = []
            for rc, a, ef in zip(rcs, argvs, errfs):
                if rc != 0:
                    ef.seek(0)
                    errs.append(f"{' '.join(a[3:])}: exit {rc}: {ef.read().decode(errors='replace')[-300:]}")
                ef.close()
            if errs:
                raise Failure(f"{rt.name} concurrent: {len(errs)} failed, first: {errs[0]}")
            return dt

        t0 = time.perf_counter_ns()
        try:
            t_create = phase([rt.cmd("create", "--bundle", rt.bundle or self.bundle, "--pid-file", pf, c)
                              for c, pf in zip(ids, pidfs)])
            live = list(ids)
            pids = [read_pid(pf) for pf in pidfs]
            t_start = phase([rt.cmd("start", c) for c in ids])
            tw = time.perf_counter_ns()
            for pid in pids:
                wait_exit(pid)
            t_wait = time.perf_counter_ns() - tw
            t_delete = phase([rt.cmd("delete", c) for c in ids])
            live = []
            total = time.perf_counter_ns() - t0
        finally:
            for c in live:
                rt.call("delete", "--force", c, check=False)
            for pf in pidfs:
                if os.path.exists(pf):
                    os.unlink(pf)
            reap_orphans()
        self.record(it, f"concurrent{n}_total_ms", rt, total / 1e6)
        self.record(it, f"concurrent{n}_create_ms", rt, t_create / 1e6)
        self.record(it, f"concurrent{n}_start_ms", rt, t_start / 1e6)
        self.record(it, f"concurrent{n}_wait_ms", rt, t_wait / 1e6)
        self.record(it, f"concurrent{n}_delete_ms", rt, t_delete / 1e6)

    def gvisor_cycle(self, rt, it):
        """create -> start -> wait -> delete of /bin/true under gVisor; the sandbox
        is re-parented to us (subreaper) once create returns."""
        cid = self.cid(rt, "g")
        pidf = os.path.join(self.work, f"{cid}.pid")
        created = False
        bundle = self.bundle
        if rt.effective_spec is not None:
            bundle = os.path.join(self.work, f"eff-{cid}")
            os.makedirs(bundle)
            spec = json.loads(json.dumps(rt.effective_spec))
            cg = spec.get("linux", {}).get("cgroupsPath")
            if cg:
                spec["linux"]["cgroupsPath"] = cg.rsplit("/", 1)[0] + "/" + cid
            with open(os.path.join(bundle, "config.json"), "w") as f:
                json.dump(spec, f)
        if rt.root_per_container:
            rt.cur_root = os.path.join(rt.root, cid, "runsc")
            os.makedirs(rt.cur_root)
        outside = {}

        def call(phase, *args):
            if not self.tracer:
                return rt.call(*args)
            self.tracer.take()
            self.tracer.on(True)
            try:
                t = rt.call(*args)
            finally:
                self.tracer.on(False)
            life = self.tracer.runsc_life_ns(rt.last_pid)
            if life is not None:
                outside[phase] = t - life
            return t

        try:
            t_create = call("create", "create", "--bundle", bundle, "--pid-file", pidf, cid)
            created = True
            pid = read_pid(pidf)
            t_start = call("start", "start", cid)
            t0 = time.perf_counter_ns()
            wait_exit(pid)
            # The gofer and ptrace stubs are ours too; runsc's delete waits until they
            # are gone, which a zombie never is, so reap them as a shim or conmon does.
            reap_runsc()
            t_wait = time.perf_counter_ns() - t0
            t_delete = call("delete", "delete", cid)
            created = False
        finally:
            if created:
                rt.call("delete", "--force", cid, check=False)
            if os.path.exists(pidf):
                os.unlink(pidf)
            reap_orphans()
            if rt.cur_root:
                shutil.rmtree(os.path.dirname(rt.cur_root), ignore_errors=True)
                rt.cur_root = None
            if bundle != self.bundle:
                shutil.rmtree(bundle, ignore_errors=True)
        for m, v in (("create", t_create), ("start", t_start), ("wait", t_wait),
                     ("delete", t_delete), ("calls", t_create + t_start + t_delete),
                     ("cycle", t_create + t_start + t_wait + t_delete)):
            self.record(it, f"gvisor_{m}_ms", rt, v / 1e6)
        if len(outside) == 3:
            for m, v in outside.items():
                self.record(it, f"gvisor_outside_{m}_ms", rt, v / 1e6)
            self.record(it, "gvisor_outside_calls_ms", rt, sum(outside.values()) / 1e6)

    def gvisor_noop(self, it):
        """moat's own cost per call: moat-gvisor create/start/delete with a no-op
        runsc, each minus a plain /bin/true spawned right before or after it."""
        rt = self.gvisor_noop_rt
        cid = self.cid(rt, "n")

        def true_ns():
            t0 = time.perf_counter_ns()
            subprocess.Popen(["/bin/true"], stdin=subprocess.DEVNULL).wait()
            return time.perf_counter_ns() - t0

        total = 0.0
        try:
            for sub in (("create", "--bundle", self.bundle, cid), ("start", cid), ("delete", cid)):
                if it % 2:
                    d = rt.call(*sub) - true_ns()
                else:
                    b = true_ns()
                    d = rt.call(*sub) - b
                self.record(it, f"gvisor_own_{sub[0]}_ms", rt, d / 1e6)
                total += d
        except Failure as e:
            rt.failures += 1
            note(f"FAILED gvisor no-op iteration {it}: {e}")
            rt.call("delete", "--force", cid, check=False)
            return
        self.record(it, "gvisor_own_calls_ms", rt, total / 1e6)

    def gvisor_pair(self, it):
        """One interleaved round (moat, runsc, ...); the order rotates per iteration."""
        k = it % len(self.gvisor)
        for rt in self.gvisor[k:] + self.gvisor[:k]:
            try:
                self.gvisor_cycle(rt, it)
            except Failure as e:
                rt.failures += 1
                note(f"FAILED gvisor iteration {it}: {e}")

    # --- calibration ------------------------------------------------------------
    def wrapper(self, rt, it):
        """One sample of the wrapper's own cost: wrapped minus plain /bin/true."""
        t0 = time.perf_counter_ns()
        subprocess.Popen(["/bin/true"], stdin=subprocess.DEVNULL).wait()
        plain = time.perf_counter_ns() - t0
        t0 = time.perf_counter_ns()
        rt.spawn(["/bin/true"]).wait()
        wrapped = time.perf_counter_ns() - t0
        self.record(it, "wrapper_ms", rt, (wrapped - plain) / 1e6)
        if "concurrent" in self.job["tests"]:
            # The same for N spawned at once, as in a concurrent phase.
            n = self.job["concurrency"]
            t0 = time.perf_counter_ns()
            for p in [subprocess.Popen(["/bin/true"], stdin=subprocess.DEVNULL) for _ in range(n)]:
                p.wait()
            plain = time.perf_counter_ns() - t0
            t0 = time.perf_counter_ns()
            for p in [rt.spawn(["/bin/true"]) for _ in range(n)]:
                p.wait()
            wrapped = time.perf_counter_ns() - t0
            self.record(it, f"wrapper{n}_ms", rt, (wrapped - plain) / 1e6)

    def rss_floor(self):
        """Peak RSS that GNU time reports for /bin/true: the floor of create_rss_kb."""
        out = os.path.join(self.work, "rss.txt")
        floors = []
        for _ in range(5):
            subprocess.run([self.job["gnu_time"], "-f", "%M", "-o", out, "/bin/true"], check=True)
            with open(out) as f:
                floors.append(int(f.read().strip().splitlines()[-1]))
        self.rss_floor_kb = statistics.median(floors)

    # --- main loop --------------------------------------------------------------
    def main(self):
        tests = self.job["tests"]
        iters, warm = self.job["iterations"], self.job["warmup"]
        self.rss_floor()
        if "exec" in tests or "rss" in tests:
            for rt in self.runtimes:
                try:
                    self.exec_setup(rt)
                except Failure as e:
                    note(f"FAILED exec setup: {e}")
                    rt.failures += 1
        plan = [t for t in ("cycle", "run", "rss", "exec", "concurrent") if t in tests]
        if "gvisor" in tests and self.gvisor:
            plan.append("gvisor")
        if any(r.hide for r in self.runtimes):
            plan.append("wrapper")
        t_begin = time.monotonic()
        for it in range(-warm, iters):
            for test in plan:
                if test == "gvisor":
                    self.gvisor_pair(it)
                    if self.gvisor_noop_rt:
                        self.gvisor_noop(it)
                    continue
                # A B C, B C A, C A B, ...: the order turns each iteration, so that no
                # runtime always follows the same one (whose asynchronous cleanup, such
                # as a network namespace's teardown in a kernel worker, the next call
                # would otherwise always pay).
                k = it % len(self.runtimes)
                for rt in self.runtimes[k:] + self.runtimes[:k]:
                    if test == "exec" and rt.name not in self.exec_ids:
                        continue
                    if test == "wrapper" and not rt.hide:
                        continue
                    try:
                        getattr(self, "exec_" if test == "exec" else test)(rt, it)
                    except Failure as e:
                        rt.failures += 1
                        note(f"FAILED {test} iteration {it}: {e}")
            if it >= 0 and (it + 1) % 10 == 0:
                note(f"{it + 1}/{iters} iterations, {time.monotonic() - t_begin:.0f}s")
        self.teardown()
        self.report()
        return 1 if any(r.failures for r in self.runtimes) else 0

    def teardown(self):
        for rt in self.runtimes:
            cid = self.exec_ids.get(rt.name)
            if cid:
                rt.call("kill", cid, "KILL", check=False)
                rt.call("delete", "--force", cid, check=False)
        reap_orphans()

    # --- output -------------------------------------------------------------------
    def report(self):
        """Prints the tables; with --md also writes them (after the header lines) to a
        file, and with --chart draws the medians as SVG."""
        buf = io.StringIO()
        real = sys.stdout

        class Tee:
            def write(self, s):
                real.write(s)
                buf.write(s)

            def flush(self):
                real.flush()

        sys.stdout = Tee()
        try:
            self._report()
        finally:
            sys.stdout = real
        if self.job.get("md"):
            with open(self.job["md"], "w") as f:
                f.write(self.job.get("header", ""))
                f.write(buf.getvalue())
        if self.job.get("chart"):
            with open(self.job["chart"], "w") as f:
                f.write(self.chart())

    def _report(self):
        # The wrapper's median cost is subtracted once per runtime call the metric spans.
        n = self.job["concurrency"]
        # metric -> (wrapper metric, how many times its cost is in one sample)
        calls = {"cycle_ms": ("wrapper_ms", 3), "create_ms": ("wrapper_ms", 1),
                 "start_ms": ("wrapper_ms", 1), "delete_ms": ("wrapper_ms", 1),
                 "run_ms": ("wrapper_ms", 1), "exec_ms": ("wrapper_ms", 1),
                 f"concurrent{n}_total_ms": (f"wrapper{n}_ms", 3),
                 f"concurrent{n}_create_ms": (f"wrapper{n}_ms", 1),
                 f"concurrent{n}_start_ms": (f"wrapper{n}_ms", 1),
                 f"concurrent{n}_delete_ms": (f"wrapper{n}_ms", 1)}
        wcost = {}
        for metric, name, _, v in self.samples:
            if metric.startswith("wrapper"):
                wcost.setdefault((metric, name), []).append(v)
        wcost = {k: max(0.0, statistics.median(v)) for k, v in wcost.items()}
        self.adjusted = []
        self.medians = {}
        self.names = [r.name for r in self.runtimes]
        by = {}
        for metric, name, it, v in self.samples:
            wm, k = calls.get(metric, ("", 0))
            adj = v - k * wcost.get((wm, name), 0.0)
            self.adjusted.append((metric, name, it, v, adj))
            by.setdefault(metric, {}).setdefault(name, []).append(adj)
        gvisor_by = {m: by.pop(m) for m in [m for m in by if m.startswith("gvisor_")]}
        names = [r.name for r in self.runtimes]
        ref = self.job["reference"] if self.job["reference"] in names else names[0]
        order = ["cycle_ms", "create_ms", "start_ms", "wait_ms", "delete_ms", "run_ms",
                 "exec_ms", "create_rss_kb", "exec_rss_kb", f"concurrent{n}_total_ms", f"concurrent{n}_create_ms",
                 f"concurrent{n}_start_ms", f"concurrent{n}_wait_ms", f"concurrent{n}_delete_ms",
                 "wrapper_ms", f"wrapper{n}_ms"]
        metrics = [m for m in order if m in by] + sorted(m for m in by if m not in order)
        stats = {}
        for m in metrics:
            for n in names:
                vals = by[m].get(n)
                if vals:
                    stats[(m, n)] = (statistics.median(vals), min(vals), max(vals), len(vals))

        def fmt(x):
            return f"{x:.0f}" if abs(x) >= 100 else f"{x:.2f}" if abs(x) < 10 else f"{x:.1f}"

        others = [n for n in names if n != ref]
        head = ["metric"] + [f"{n} median [min–max]" for n in names] + [f"{n}/{ref}" for n in others]
        print()
        if metrics:
            print("| " + " | ".join(head) + " |")
            print("|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|")
        rows = []
        for m in metrics:
            cells = [m]
            for n in names:
                s = stats.get((m, n))
                cells.append(f"{fmt(s[0])} [{fmt(s[1])}–{fmt(s[2])}]" if s else "—")
            for n in others:
                a, b = stats.get((m, n)), stats.get((m, ref))
                cells.append(f"{a[0] / b[0]:.2f}" if a and b and b[0] > 0 else "—")
            print("| " + " | ".join(cells) + " |")
            for n in names:
                s = stats.get((m, n))
                if s:
                    self.medians[(m, n)] = s[0]
                    b = stats.get((m, ref))
                    ratio = s[0] / b[0] if b and b[0] > 0 else ""
                    rows.append([m, n, s[3], f"{s[0]:.4f}", f"{s[1]:.4f}", f"{s[2]:.4f}",
                                 f"{ratio:.4f}" if ratio != "" else "", ref])
        print()
        iters = self.job["iterations"]
        if metrics:
            print(f"{iters} iterations (+{self.job['warmup']} warm-up), interleaved, the order turning each "
                  f"iteration; ms = wall time of the "
                  f"runtime call(s); ratio = median / median of {ref}.")
        if "create_rss_kb" in by:
            print(f"create_rss_kb, exec_rss_kb = peak RSS of `create` and of `exec /bin/true` "
                  f"under GNU time; its floor (time + /bin/true) is {self.rss_floor_kb:.0f} KB.")
        conc = self.job["concurrency"]
        for (wm, name), w in sorted(wcost.items()):
            if wm != "wrapper_ms":
                continue
            print(f"{name}: every call runs in a private mount namespace with cgroup2 hidden "
                  f"({self.job.get('cgroup2_wrapper', 'ns')} wrapper); the wrapper's own cost on /bin/true "
                  f"(wrapper_ms, median {w:.2f} ms) is subtracted once per runtime call (cycle: 3); "
                  f"for concurrent phases, that of {conc} wrappers at once (wrapper{conc}_ms).")
        rows += self.report_gvisor(gvisor_by, fmt)
        for r in self.runtimes + self.gvisor + [r for r in [self.gvisor_noop_rt] if r]:
            if r.failures:
                print(f"**{r.name}: {r.failures} failed measurement(s)** (see stderr)")
        if self.job.get("csv"):
            with open(self.job["csv"], "w", newline="") as f:
                w = csv.writer(f)
                w.writerow(["metric", "runtime", "n", "median", "min", "max", "ratio", "reference"])
                w.writerows(rows)
        if self.job.get("raw"):
            with open(self.job["raw"], "w", newline="") as f:
                w = csv.writer(f)
                w.writerow(["metric", "runtime", "iteration", "value", "adjusted"])
                w.writerows(self.adjusted)

    def chart(self):
        """The medians as an SVG bar chart: one panel per metric, one bar per runtime,
        each panel scaled to its own largest median."""
        n = self.job["concurrency"]
        wanted = ["cycle_ms", "create_ms", "start_ms", "delete_ms", "run_ms", "exec_ms",
                  "create_rss_kb", "exec_rss_kb", f"concurrent{n}_total_ms"]
        metrics = [m for m in wanted if any((m, r) in self.medians for r in self.names)]
        # One colour per runtime (the default run has nine with moat's variants).
        colors = ["#1b6ca8", "#c0392b", "#27ae60", "#8e44ad", "#d35400", "#7f8c8d",
                  "#f1c40f", "#16a085", "#e84393", "#2c3e50", "#a0522d", "#6c5ce7"]
        bar_h, gap, label_w, plot_w, val_w = 16, 4, 170, 360, 80
        panel_h = len(self.names) * (bar_h + gap) + 14
        width = label_w + plot_w + val_w
        # The legend wraps: a row holds as many 150-pixel entries as the width allows.
        per_row = max(1, (width - 8) // 150)
        legend_h = 18 * ((len(self.names) + per_row - 1) // per_row) + 6
        height = 40 + legend_h + len(metrics) * panel_h
        out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
               f'font-family="sans-serif" font-size="12">',
               f'<rect width="{width}" height="{height}" fill="white"/>',
               f'<text x="8" y="20" font-size="14" font-weight="bold">Medians, '
               f'{self.job["iterations"]} interleaved iterations (lower is better)</text>']
        for i, r in enumerate(self.names):
            x, ly = 8 + (i % per_row) * 150, 32 + (i // per_row) * 18
            out.append(f'<rect x="{x}" y="{ly}" width="12" height="12" '
                       f'fill="{colors[i % len(colors)]}"/>')
            out.append(f'<text x="{x + 16}" y="{ly + 11}">{html.escape(r)}</text>')
        y = 40 + legend_h
        for m in metrics:
            vals = [self.medians.get((m, r)) for r in self.names]
            top = max(v for v in vals if v is not None) or 1.0
            unit = "KB" if m.endswith("_kb") else "ms"
            out.append(f'<text x="8" y="{y + 12}" font-weight="bold">{html.escape(m)}</text>')
            for i, v in enumerate(vals):
                by = y + i * (bar_h + gap)
                if v is None:
                    out.append(f'<text x="{label_w}" y="{by + 12}" fill="#999">—</text>')
                    continue
                w = max(1.0, plot_w * v / top)
                out.append(f'<rect x="{label_w}" y="{by}" width="{w:.1f}" height="{bar_h}" '
                           f'fill="{colors[i % len(colors)]}"/>')
                txt = f"{v:.0f} {unit}" if v >= 100 else f"{v:.1f} {unit}"
                out.append(f'<text x="{label_w + w + 4:.1f}" y="{by + 12}">{txt}</text>')
            y += panel_h
        out.append("</svg>")
        return "\n".join(out) + "\n"

    def report_gvisor(self, by, fmt):
        """moat-gvisor vs each way of calling runsc directly: medians per phase and
        moat's overhead as the median of per-round differences."""
        if not by or len(self.gvisor) < 2:
            return []
        moat = self.gvisor[0].name
        refs = [r.name for r in self.gvisor[1:]]
        names = [moat] + refs
        print()
        print("| gVisor metric | " + " | ".join(f"{n} median [min–max]" for n in names) + " | "
              + " | ".join(f"{moat} − {r}, paired: median [min–max] (p10–p90)" for r in refs) + " |")
        print("|---|" + "---:|" * (len(names) + len(refs)))
        rows = []
        rounds = 0
        for m in ("gvisor_cycle_ms", "gvisor_calls_ms", "gvisor_create_ms", "gvisor_start_ms",
                  "gvisor_wait_ms", "gvisor_delete_ms", "gvisor_outside_calls_ms",
                  "gvisor_outside_create_ms", "gvisor_outside_start_ms",
                  "gvisor_outside_delete_ms"):
            vals = {n: by.get(m, {}).get(n) for n in names}
            if not all(vals.values()):
                continue
            per_it = {n: {it: v for (mm, nn, it, _, v) in self.adjusted if mm == m and nn == n}
                      for n in names}
            cells = [f"{fmt(statistics.median(v))} [{fmt(min(v))}–{fmt(max(v))}]" for v in vals.values()]
            for n, v in vals.items():
                rows.append([m, n, len(v), f"{statistics.median(v):.4f}", f"{min(v):.4f}",
                             f"{max(v):.4f}", "", refs[0]])
            for r in refs:
                common = sorted(set(per_it[moat]) & set(per_it[r]))
                diffs = [per_it[moat][i] - per_it[r][i] for i in common]
                rounds = max(rounds, len(diffs))
                cells.append(f"{fmt(statistics.median(diffs))} [{fmt(min(diffs))}–{fmt(max(diffs))}] "
                             f"({fmt(quantile(diffs, 0.1))}–{fmt(quantile(diffs, 0.9))})")
                rows.append([m, f"{moat}-minus-{r}", len(diffs), f"{statistics.median(diffs):.4f}",
                             f"{min(diffs):.4f}", f"{max(diffs):.4f}", "", r])
            print(f"| {m} | " + " | ".join(cells) + " |")
        own = self.gvisor_noop_rt.name if self.gvisor_noop_rt else None
        if own and by.get("gvisor_own_calls_ms", {}).get(own):
            parts = []
            for m in ("gvisor_own_calls_ms", "gvisor_own_create_ms", "gvisor_own_start_ms",
                      "gvisor_own_delete_ms"):
                v = by.get(m, {}).get(own)
                if not v:
                    continue
                parts.append(f"{m[len('gvisor_own_'):-3]} {fmt(statistics.median(v))} "
                             f"[{fmt(quantile(v, 0.1))}–{fmt(quantile(v, 0.9))}]")
                rows.append([m, own, len(v), f"{statistics.median(v):.4f}", f"{quantile(v, 0.1):.4f}",
                             f"{quantile(v, 0.9):.4f}", "", "/bin/true"])
            print()
            print("moat's own cost, measured with a no-op runsc (scripts/lib/noop-runsc.c) (each call minus a plain "
                  "/bin/true), ms median [p10–p90]: " + "; ".join(parts) + ".")
        print()
        flags = " ".join(self.gvisor[1].global_args)
        print(f"{rounds} interleaved rounds (order rotating). gvisor_calls_ms = create + start + delete, "
              f"the calls moat sits in front of; wait is the sandbox's own run time. runsc is called "
              f"with the flags moat passes ({flags}) and one shared --root, as moat uses, on the "
              f"spec moat writes for runsc (the RESTRICTED policy applied), so {moat} − {refs[0]} is "
              f"moat's own overhead; runsc-engine-spec runs the engine's spec unchanged (no policy, "
              f"no --oci-seccomp), so {refs[0]} − runsc-engine-spec is what the policy costs inside "
              f"gVisor. CSV rows for differences hold median, min, max.")
        if by.get("gvisor_outside_calls_ms"):
            print()
            print(f"gvisor_outside_* is each call's time outside the runsc process it ran (the call "
                  f"minus runsc's exec-to-exit, from tracefs), so {moat} − {refs[0]} on it is moat's "
                  f"overhead over calling runsc directly without runsc's own variation: moat's "
                  f"start-up, work, spawn and wait, less the driver's own spawn and wait of runsc.")
        return rows


def main():
    with open(sys.argv[1]) as f:
        job = json.load(f)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        note("warning: could not become a child subreaper; polling pids instead")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    bench = Bench(job)
    try:
        return bench.main()
    except KeyboardInterrupt:
        return 130
    finally:
        if bench.tracer:
            bench.tracer.close()
        if bench.tracefs_mounted:
            subprocess.run(["umount", "/sys/kernel/tracing"])
        # Whatever is left in the runtime roots (interrupt, failure) goes.
        for rt in bench.runtimes + bench.gvisor:
            try:
                p = rt.spawn(rt.cmd("list", "--quiet"), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
                out, _ = p.communicate(timeout=30)
                for cid in out.decode().split():
                    rt.call("delete", "--force", cid, check=False)
            except Exception as e:  # noqa: BLE001 - best effort cleanup
                note(f"cleanup of {rt.name}: {e}")
        reap_orphans()


if __name__ == "__main__":
    sys.exit(main())
