#!/usr/bin/env python3
"""scripts/bench --profile: where the time of each moat call goes, step by step, against
the floor measured in the same run.

Reads a JSON job (argv[1]): the profiling build of moat (`--features steptrace`,
src/linux/sys/steptrace.rs), the release build, the bundles, the floor program
(scripts/lib/floor.c), iterations. Each moat process of the profiling build appends a
line `<CLOCK_MONOTONIC ns> <pid> <op> <side> <step>` at every point of the documented
sequences (create's `Step`s, exec's rows, start, delete) to the file MOAT_STEPTRACE names.

Two passes, interleaved over the operations:

  timing  the wall time of each step: consecutive points of one process, plus the
          process's own start (spawned, or forked, to its first point) and end (its last
          point to the driver's return). Each call is also made with the release build,
          to show that the trace's writes cost nothing visible.
  counts  the same calls while a private tracefs instance records, for the call's whole
          process tree (set_event_pid + event-fork), every syscall entry, every user page
          fault, every fork and exec, and the trace points themselves (MOAT_STEPTRACE is
          then the instance's trace_marker): each event is charged to the step its process
          was in. Tracing slows every syscall, so no time is taken from this pass.

The floor: `floor new PROG` (new mount, UTS, IPC, pid and network namespaces, then
execve of the bundle's own /bin/true) for create/start/run, and `floor join PID PROG`
(setns into a running container, fork, execve) for exec; `unshare -mpfniu --mount-proc`
as the issue's reference.
"""

import collections
import json
import os
import re
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import (  # noqa: E402
    PR_SET_CHILD_SUBREAPER, Failure, TraceInstance, libc, note, read_pid, reap_orphans,
    wait_exit, wait_or_kill)

CALL_TIMEOUT = 60


class Tracer(TraceInstance):
    """Syscalls, user page faults, forks, execs and trace_marker writes of one process
    tree at a time (`follow`: set_event_pid with event-fork)."""

    EVENTS = ("raw_syscalls/sys_enter", "exceptions/page_fault_user",
              "sched/sched_process_fork", "sched/sched_process_exec")

    def __init__(self, base):
        super().__init__(base, "moat-profile", self.EVENTS, 16384, options=("event-fork",))
        self.marker = os.path.join(self.dir, "trace_marker")

    def follow(self, pid):
        self._write("set_event_pid", str(pid))

    def take(self):
        return self.take_raw()

    def close(self):
        try:
            self._write("set_event_pid", "")
        except OSError:
            pass
        super().close()


def tracefs_base():
    """The mounted tracefs, mounting it at /sys/kernel/tracing when it is not (it is
    then unmounted by the caller); None when the kernel has none."""
    for b in ("/sys/kernel/tracing", "/sys/kernel/debug/tracing"):
        if os.path.isdir(os.path.join(b, "instances")):
            return b, False
    if subprocess.run(["mount", "-t", "tracefs", "nodev", "/sys/kernel/tracing"],
                      stderr=subprocess.DEVNULL).returncode == 0:
        return "/sys/kernel/tracing", True
    return None, False


def point_name(op, side, step):
    return f"{op} {side}: {step}" if op != "-" else f"main {step}"


class Namer:
    """A process's points as step keys shared by both passes: the point's name and how
    many times the process reached it (moat re-executed by exeseal reaches
    `main start` twice); '*' ops take the process's own from its earlier points."""

    def __init__(self):
        self.role = {}
        self.seen = collections.Counter()

    def key(self, pid, op, side, step):
        if op == "*":
            op, side = self.role.get(pid, ("?", "?"))
        elif op != "-":
            self.role[pid] = (op, side)
        name = point_name(op, side, step)
        self.seen[(pid, name)] += 1
        return f"{name}#{self.seen[(pid, name)]}"


def display(key):
    return key.rsplit("#", 1)[0]


def segments(lines, t_spawn, t_end):
    """Per process, the steps between its consecutive points, as (from key, label, ns):
    the first process's first step from the spawn, its last to the call's return."""
    namer = Namer()
    by_pid = collections.OrderedDict()
    for line in lines:
        parts = line.split()
        if len(parts) != 5:
            continue
        ns, pid = int(parts[0]), parts[1]
        by_pid.setdefault(pid, []).append((ns, namer.key(pid, *parts[2:])))
    out = []
    for i, (pid, ps) in enumerate(by_pid.items()):
        if i == 0:
            out.append(("start-up", f"spawned -> {display(ps[0][1])} (fork, execve, start-up)", ps[0][0] - t_spawn))
        for (n0, k0), (n1, k1) in zip(ps, ps[1:]):
            label = f"{display(k0)} -> {display(k1)}"
            if display(k0) == display(k1) == "main start":
                label = "main start -> (moat re-executed: exeseal) -> main start"
            out.append((k0, label, n1 - n0))
        if i == 0 and display(ps[-1][1]) == "main exit":
            out.append((ps[-1][1], "main exit -> call returned", t_end - ps[-1][0]))
    return out


def charge(events):
    """Counts per step key from one call's tracefs events: each syscall and user page
    fault is charged to the step its process was in (the last point it wrote;
    `start-up` from the call's execve to its first point, `forked` before a forked
    process's first); forks and execs are counted as process starts. What the driver's
    own forked child does before it executes the call is left out."""
    counts = collections.defaultdict(lambda: [0, 0])
    namer = Namer()
    state = {}
    forked = set()
    procs = 0
    for pid, _ts, ev, rest in events:
        if ev == "tracing_mark_write":
            parts = rest.split()
            if len(parts) == 5:
                state[pid] = namer.key(pid, *parts[2:])
            continue
        if ev == "sched_process_fork":
            procs += 1
            m = re.search(r"child_pid=(\d+)", rest)
            if m:
                state[int(m.group(1))] = "forked"
                forked.add(int(m.group(1)))
            continue
        if ev == "sched_process_exec":
            procs += 1
            state.setdefault(pid, "start-up")
            continue
        if pid not in state and pid not in forked:
            continue
        counts[state[pid]][0 if ev == "sys_enter" else 1] += 1
    return counts, procs


class Profile:
    def __init__(self, job):
        self.job = job
        self.work = job["workdir"]
        self.root = os.path.join(self.work, "roots", "profile")
        os.makedirs(self.root, exist_ok=True)
        self.seq = 0
        self.wall = collections.defaultdict(lambda: collections.defaultdict(list))
        self.totals = collections.defaultdict(lambda: collections.defaultdict(list))
        self.counts = collections.defaultdict(lambda: collections.defaultdict(list))
        self.procs = collections.defaultdict(list)
        self.count_totals = collections.defaultdict(list)
        self.order = collections.defaultdict(list)
        self.tracer = None
        self.trace_file = os.path.join(self.work, "steptrace.txt")

    def cid(self, kind):
        self.seq += 1
        return f"mp{os.getpid()}-{kind}-{self.seq}"

    def call(self, argv, env=None, check=True):
        t0 = time.monotonic_ns()
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE if check else subprocess.DEVNULL, env=env)
        if not wait_or_kill(p, CALL_TIMEOUT):
            raise Failure(f"{argv}: no exit after {CALL_TIMEOUT}s")
        t1 = time.monotonic_ns()
        if check and p.returncode != 0:
            raise Failure(f"{' '.join(argv)}: exit {p.returncode}: {p.stderr.read().decode()[-400:]}")
        if p.stderr:
            p.stderr.close()
        return t0, t1

    def moat(self, binary, *args):
        return [binary, "--root", self.root, *args]

    def measured(self, op, argv, counting):
        """One traced call: wall time per step (timing) or counts per step (counting)."""
        env = dict(os.environ)
        if counting:
            env["MOAT_STEPTRACE"] = self.tracer.marker
            self.tracer.take()
            self.tracer.follow(os.getpid())
            self.tracer.on(True)
            try:
                self.call(argv, env)
            finally:
                self.tracer.on(False)
            events = [e for e in self.tracer.take() if e[0] != os.getpid()]
            counts, procs = charge(events)
            for key, (sc, pf) in counts.items():
                self.counts[op][key].append((sc, pf))
            self.count_totals[op].append((sum(c[0] for c in counts.values()),
                                          sum(c[1] for c in counts.values())))
            self.procs[op].append(procs)
            return
        if os.path.exists(self.trace_file):
            os.unlink(self.trace_file)
        env["MOAT_STEPTRACE"] = self.trace_file
        t0, t1 = self.call(argv, env)
        with open(self.trace_file) as f:
            lines = f.read().splitlines()
        for key, label, ns in segments(lines, t0, t1):
            if (key, label) not in self.order[op]:
                self.order[op].append((key, label))
            self.wall[op][key].append(ns / 1e6)
        self.totals[op]["profiling build"].append((t1 - t0) / 1e6)

    def plain(self, op, argv):
        t0, t1 = self.call(argv)
        self.totals[op]["release build"].append((t1 - t0) / 1e6)

    def floor(self, name, argv, counting):
        if counting:
            self.tracer.take()
            self.tracer.follow(os.getpid())
            self.tracer.on(True)
            try:
                self.call(argv)
            finally:
                self.tracer.on(False)
            events = [e for e in self.tracer.take() if e[0] != os.getpid()]
            counts, procs = charge(events)
            sc = sum(c[0] for c in counts.values())
            pf = sum(c[1] for c in counts.values())
            self.counts["floor"][name].append((sc, pf))
            self.procs[f"floor: {name}"].append(procs)
            return
        t0, t1 = self.call(argv)
        self.totals["floor"][name].append((t1 - t0) / 1e6)

    def round(self, counting):
        j = self.job
        prof, rel = j["moat_profile"], j["moat"]
        true = os.path.join(j["bundle"], "rootfs", "bin", "true")
        self.floor("new namespaces + execve", [j["floor"], "new", true], counting)
        self.floor("unshare -mpfniu --mount-proc /bin/true",
                   ["unshare", "-mpfniu", "--mount-proc", true], counting)
        # The cycle: create, start, the init's run, delete.
        for binary, traced in ((prof, True), (rel, False)):
            if counting and not traced:
                continue
            cid = self.cid("c")
            pidf = os.path.join(self.work, f"{cid}.pid")
            steps = [("create", ["create", "--bundle", j["bundle"], "--pid-file", pidf, cid]),
                     ("start", ["start", cid])]
            for op, args in steps:
                argv = self.moat(binary, *args)
                if traced:
                    self.measured(op, argv, counting)
                else:
                    self.plain(op, argv)
            pid = read_pid(pidf)
            t0 = time.monotonic_ns()
            wait_exit(pid)
            if not counting:
                self.totals["wait"]["release build" if not traced else "profiling build"].append(
                    (time.monotonic_ns() - t0) / 1e6)
            argv = self.moat(binary, "delete", cid)
            if traced:
                self.measured("delete", argv, counting)
            else:
                self.plain("delete", argv)
            os.unlink(pidf)
            reap_orphans()
            argv = self.moat(binary, "run", "--bundle", j["bundle"], self.cid("r"))
            if traced:
                self.measured("run", argv, counting)
            else:
                self.plain("run", argv)
            reap_orphans()
            argv = self.moat(binary, "exec", self.sleeper, "/bin/true")
            if traced:
                self.measured("exec", argv, counting)
            else:
                self.plain("exec", argv)
            reap_orphans()
        self.floor("join + fork + execve (exec's floor)",
                   [j["floor"], "join", str(self.sleeper_pid), "/bin/true"], counting)

    def go(self):
        j = self.job
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        self.sleeper = self.cid("x")
        pidf = os.path.join(self.work, "sleeper.pid")
        self.call(self.moat(j["moat"], "create", "--bundle", j["sleep_bundle"], "--pid-file", pidf,
                            self.sleeper))
        self.call(self.moat(j["moat"], "start", self.sleeper))
        self.sleeper_pid = read_pid(pidf)
        base, mounted = tracefs_base()
        try:
            for _ in range(j["warmup"]):
                self.round(False)
            self.wall.clear()
            self.totals.clear()
            for _ in range(j["iterations"]):
                self.round(False)
            if base is None:
                note("*** NOTE: syscalls, page faults and process starts not counted: no tracefs ***")
            else:
                try:
                    self.tracer = Tracer(base)
                except OSError as e:
                    note(f"*** NOTE: syscalls, page faults and process starts not counted: {e} ***")
                if self.tracer:
                    for _ in range(j["count_iterations"]):
                        self.round(True)
        finally:
            if self.tracer:
                self.tracer.close()
            if mounted:
                subprocess.run(["umount", base])
            self.call(self.moat(j["moat"], "delete", "--force", self.sleeper), check=False)
            reap_orphans()
        self.report()

    def report(self):
        md = []
        w = md.append
        w(self.job["header"])
        n, nc = self.job["iterations"], self.job["count_iterations"]
        w(f"{n} timed rounds (+{self.job['warmup']} warm-up), {nc} counted rounds; "
          "medians. ms: wall time of the step; syscalls and faults (user page faults) are "
          "charged to the step the process was in (counted rounds, tracefs).\n")
        med = lambda v: statistics.median(v) if v else float("nan")
        w("| floor | ms | syscalls | faults | processes |\n|---|---:|---:|---:|---:|")
        for name, v in self.totals["floor"].items():
            c = self.counts["floor"].get(name, [])
            sc = med([x[0] for x in c]) if c else "—"
            pf = med([x[1] for x in c]) if c else "—"
            pr = med(self.procs.get(f"floor: {name}", [])) if self.procs.get(f"floor: {name}") else "—"
            w(f"| {name} | {med(v):.2f} | {sc} | {pf} | {pr} |")
        w("")
        for op in ("create", "start", "delete", "run", "exec"):
            rows = self.order.get(op, [])
            if not rows:
                continue
            w(f"**{op}** (profiling build {med(self.totals[op]['profiling build']):.2f} ms, "
              f"release build {med(self.totals[op]['release build']):.2f} ms"
              + (f", process starts {med(self.procs[op]):g}" if self.procs.get(op) else "") + ")\n")
            w("| step | ms | syscalls | faults |\n|---|---:|---:|---:|")
            counted = self.counts.get(op, {})
            for key, label in rows:
                ms = med(self.wall[op][key])
                c = counted.get(key, [])
                sc = f"{med([x[0] for x in c]):g}" if c else "—"
                pf = f"{med([x[1] for x in c]):g}" if c else "—"
                w(f"| {label} | {ms:.3f} | {sc} | {pf} |")
            timed = {k for k, _ in rows}
            for key, c in counted.items():
                if key in timed:
                    continue
                what = {"forked": "a forked process before its first point",
                        "start-up": "start-up"}.get(key, f"after {display(key)} (no later point)")
                w(f"| {what} | — | {med([x[0] for x in c]):g} | {med([x[1] for x in c]):g} |")
            ct = self.count_totals.get(op, [])
            tot_sc = f"{med([x[0] for x in ct]):g}" if ct else "—"
            tot_pf = f"{med([x[1] for x in ct]):g}" if ct else "—"
            w(f"| **all** | {med(self.totals[op]['profiling build']):.3f} | {tot_sc} | {tot_pf} |\n")
        w(f"wait (the init from start's return to its exit): "
          f"{med(self.totals['wait'].get('release build', [])):.2f} ms.\n")
        text = "\n".join(md)
        print(text)
        if self.job.get("md"):
            with open(self.job["md"], "w") as f:
                f.write(text + "\n")


def main():
    with open(sys.argv[1]) as f:
        job = json.load(f)
    Profile(job).go()


if __name__ == "__main__":
    main()
