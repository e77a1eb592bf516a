#!/usr/bin/env python3
"""Checkpoint, restore and fork figures: driver of `scripts/bench --tests snapshot` (see
that script for usage).

Job (JSON, argv[1]): workdir, moat, rootfs (the cached busybox root), iterations, warmup,
md, criu (a CRIU that works here, or ""), runscs (paths). Cells: native through CRIU when
one is given, and gVisor through each runsc (its own default platform); in each, two
workloads, both under moat's default policy (RESTRICTED):

  shell   busybox sh counting in /dev/shm
  python  the host's python3 (its /usr bound read-only) holding 100 MiB of heap, every
          page written, ready once it has

A round: `moat run --detach`, wait until the workload is ready, `moat checkpoint` (timed;
the container is gone after it, as runc's), the image's size, then two `moat restore
--detach` of that image into two new ids one after the other (a fork; each timed to its
return, and to its first answer: an `exec` reading the workload's counter file, timed
from the restore's start), both deleted. A warm-up round first is not counted. Figures:
median [min-max] in ms (size in MiB). After each round nothing of the round's ids may be
left in moat's root, or the run fails.
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import PR_SET_CHILD_SUBREAPER, Failure, libc, note  # noqa: E402


class Reaper(threading.Thread):
    """Reaps the zombies re-parented here (a sandbox's gofer and stubs, a container's
    processes) as they appear, as a shim does: runsc's delete waits until they are gone,
    which a zombie never is. The call in flight is moat's own child, left to its wait."""

    def __init__(self):
        super().__init__(daemon=True)
        self.lock = threading.Lock()
        self.in_flight = None

    def run(self):
        me = os.getpid()
        while True:
            try:
                with open(f"/proc/{me}/task/{me}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except OSError:
                kids = []
            for k in kids:
                try:
                    with open(f"/proc/{k}/stat") as f:
                        zombie = f.read().rsplit(")", 1)[1].split()[0] == "Z"
                except OSError:
                    continue
                with self.lock:
                    if zombie and k != self.in_flight:
                        try:
                            os.waitpid(k, os.WNOHANG)
                        except ChildProcessError:
                            pass
            time.sleep(0.01)


REAPER = Reaper()

# Each workload's stdio its own /dev/null: CRIU dumps no descriptor of the host's files.
PY_HEAP = (
    "import os,time\n"
    "fd = os.open('/dev/null', os.O_RDWR)\n"
    "for i in (0, 1, 2): os.dup2(fd, i)\n"
    "b = bytearray(100 << 20)\n"
    "for i in range(0, len(b), 4096): b[i] = 1\n"
    "n = 0\n"
    "while True:\n"
    "    n += 1\n"
    "    open('/dev/shm/t', 'w').write(str(n)); os.rename('/dev/shm/t', '/dev/shm/c')\n"
    "    time.sleep(0.05)\n"
)
SHELL = "exec </dev/null >/dev/null 2>&1; i=0; while :; do i=$((i+1)); echo $i > /dev/shm/t; mv /dev/shm/t /dev/shm/c; sleep 0.05; done"


def bundle(moat, work, rootfs, name, args, host_usr):
    """A bundle under work: `moat spec`'s config, the busybox root copied, args as the
    process; with host_usr the host's /usr bound read-only (and /lib, /lib64 as its
    symlinks)."""
    b = os.path.join(work, name)
    shutil.rmtree(b, ignore_errors=True)
    os.makedirs(b)
    r = os.path.join(b, "rootfs")
    subprocess.run(["cp", "-a", rootfs, r], check=True)
    subprocess.run([moat, "spec", "--bundle", b], check=True)
    with open(os.path.join(b, "config.json")) as f:
        spec = json.load(f)
    spec["process"]["terminal"] = False
    spec["process"]["args"] = args
    if host_usr:
        os.makedirs(os.path.join(r, "usr"), exist_ok=True)
        for link in ("lib", "lib64"):
            p = os.path.join(r, link)
            if not os.path.lexists(p):
                os.symlink(f"usr/{link}", p)
        spec["mounts"].append({"destination": "/usr", "type": "bind", "source": "/usr",
                               "options": ["rbind", "ro", "nosuid", "nodev"]})
    with open(os.path.join(b, "config.json"), "w") as f:
        json.dump(spec, f)
    return b


class Cell:
    def __init__(self, name, env, extra):
        self.name = name
        self.env = env
        self.extra = extra  # global flags before the command (--criu)


class Snapshot:
    def __init__(self, job):
        self.job = job
        self.work = job["workdir"]
        self.moat = job["moat"]
        self.root = os.path.join(self.work, "roots", "snapshot")
        os.makedirs(self.root, exist_ok=True)
        self.seq = 0
        self.samples = {}  # (cell, workload) -> {metric: [values]}

    def call(self, cell, args, timeout=120, check=True):
        """moat with args; returns (ms, stdout). Output through files: a container started
        with --detach keeps the caller's stdout and stderr open, as runc's does."""
        argv = [self.moat, "--root", self.root] + cell.extra + args
        with tempfile.TemporaryFile(dir=self.work) as out, \
                tempfile.TemporaryFile(dir=self.work) as err:
            t0 = time.monotonic_ns()
            with REAPER.lock:
                p = subprocess.Popen(argv, env=cell.env, stdin=subprocess.DEVNULL, stdout=out,
                                     stderr=err)
                REAPER.in_flight = p.pid
            try:
                p.wait(timeout=timeout)
            finally:
                if p.returncode is None:
                    p.kill()
                    p.wait()
                REAPER.in_flight = None
            ms = (time.monotonic_ns() - t0) / 1e6
            out.seek(0)
            err.seek(0)
            text, etext = out.read().decode(errors="replace"), err.read().decode(errors="replace")
        if check and p.returncode != 0:
            raise Failure(f"{cell.name}: moat {' '.join(args)}: exit {p.returncode}: "
                          f"{etext.strip()}")
        return ms, text if p.returncode == 0 else None

    def counter(self, cell, cid):
        _, out = self.call(cell, ["exec", cid, "cat", "/dev/shm/c"], timeout=60, check=False)
        try:
            return int(out.strip()) if out is not None else None
        except ValueError:
            return None

    def wait_ready(self, cell, cid, deadline_s=60):
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            if (self.counter(cell, cid) or 0) >= 2:
                return
            time.sleep(0.05)
        raise Failure(f"{cell.name}: {cid} never became ready")

    def gone(self, cid):
        if os.path.exists(os.path.join(self.root, cid)):
            raise Failure(f"{cid}: state directory left in {self.root}")

    def round(self, cell, workload, b, counted):
        self.seq += 1
        base = f"snap{self.seq}"
        images = os.path.join(self.work, f"{base}-img")
        shutil.rmtree(images, ignore_errors=True)
        self.call(cell, ["run", "--detach", "--bundle", b, base])
        try:
            self.wait_ready(cell, base)
            ckpt, _ = self.call(cell, ["checkpoint", "--image-path", images, base])
        except Exception:
            self.call(cell, ["delete", "--force", base], check=False)
            raise
        self.gone(base)
        size = sum(os.path.getsize(os.path.join(dp, f))
                   for dp, _, fs in os.walk(images) for f in fs) / (1 << 20)
        restores, answers = [], []
        forks = [f"{base}-f1", f"{base}-f2"]
        try:
            for f in forks:
                t0 = time.monotonic_ns()
                ms, _ = self.call(cell, ["restore", "--detach", "--image-path", images,
                                         "--bundle", b, f])
                n = self.counter(cell, f)
                answered = (time.monotonic_ns() - t0) / 1e6
                if n is None:
                    raise Failure(f"{cell.name}: {f} restored but does not answer")
                restores.append(ms)
                answers.append(answered)
        finally:
            for f in forks:
                self.call(cell, ["delete", "--force", f], check=False)
            shutil.rmtree(images, ignore_errors=True)
        for f in forks:
            self.gone(f)
        if counted:
            s = self.samples.setdefault((cell.name, workload), {})
            s.setdefault("checkpoint", []).append(ckpt)
            s.setdefault("size", []).append(size)
            s.setdefault("restore", []).extend(restores)
            s.setdefault("answer", []).extend(answers)

    def cleanup(self):
        """Every container still recorded in the root deleted (a failed round's)."""
        for name in sorted(os.listdir(self.root)):
            if name.startswith("@"):
                continue
            for cell in self.cells():
                if self.call(cell, ["delete", "--force", name], check=False)[1] is not None:
                    break

    def cells(self):
        cells = []
        base_env = dict(os.environ)
        base_env.pop("MOAT_RUNTIME", None)
        base_env.pop("MOAT_CONFIG", None)
        criu = self.job.get("criu") or ""
        if criu:
            env = dict(base_env)
            env["PATH"] = os.path.dirname(criu) + ":" + env.get("PATH", "")
            cells.append(Cell(f"native (CRIU {criu_version(criu)})", env, ["--criu", criu]))
        else:
            note("*** NOTE: snapshot: native skipped: no CRIU that works here (scripts/lib/criu-newer) ***")
        for i, runsc in enumerate(self.job.get("runscs") or []):
            cfg = os.path.join(self.work, f"snapshot-gvisor-{i}.toml")
            with open(cfg, "w") as f:
                f.write(f'[gvisor]\nruntime = "gvisor"\nrunsc_path = "{runsc}"\n')
            env = dict(base_env, MOAT_CONFIG=cfg)
            cells.append(Cell(f"gVisor (runsc {runsc_version(runsc)})", env, []))
        return cells

    def run(self):
        rootfs = self.job["rootfs"]
        bundles = {
            "shell": bundle(self.moat, self.work, rootfs, "snap-shell", ["sh", "-c", SHELL],
                            False),
            "python": bundle(self.moat, self.work, rootfs, "snap-python",
                             ["/usr/bin/python3", "-c", PY_HEAP], True),
        }
        iters, warmup = self.job["iterations"], self.job["warmup"]
        for cell in self.cells():
            for workload, b in bundles.items():
                for it in range(warmup + iters):
                    self.round(cell, workload, b, it >= warmup)
                note(f"snapshot: {cell.name} {workload}: {iters} rounds")
        return self.table()

    def table(self):
        def fmt(v):
            return f"{statistics.median(v):.0f} [{min(v):.0f}–{max(v):.0f}]"

        lines = [
            "| engine | workload | checkpoint, ms | image, MiB | restore, ms | restore to first answer, ms | rounds (restores) |",
            "|---|---|---:|---:|---:|---:|---:|",
        ]
        for (cell, workload), s in self.samples.items():
            size = statistics.median(s["size"])
            lines.append(f"| {cell} | {workload} | {fmt(s['checkpoint'])} | {size:.1f} | "
                         f"{fmt(s['restore'])} | {fmt(s['answer'])} | "
                         f"{len(s['checkpoint'])} ({len(s['restore'])}) |")
        return "\n".join(lines) + "\n"


def criu_version(criu):
    p = subprocess.run([criu, "--version"], capture_output=True, text=True)
    for line in p.stdout.splitlines():
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip()
    return "?"


def runsc_version(runsc):
    p = subprocess.run([runsc, "--version"], capture_output=True, text=True)
    first = (p.stdout.splitlines() or ["?"])[0]
    return first.replace("runsc version ", "").replace("release-", "").replace("0.0~", "")


def main():
    with open(sys.argv[1]) as f:
        job = json.load(f)
    # The containers' processes are re-parented here when moat exits (Reaper).
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        note("*** NOTE: snapshot: not a subreaper: orphans are reaped by PID 1 ***")
    REAPER.start()
    snap = Snapshot(job)
    try:
        md = snap.run()
    except (Failure, subprocess.TimeoutExpired) as e:
        note(f"FAILED snapshot: {e}")
        return 1
    finally:
        snap.cleanup()
    print(md)
    if job.get("md"):
        with open(job["md"], "a") as f:
            f.write(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
