#!/bin/bash
# The work scripts/e2e-builds runs in each container: every step in a subshell of its own
# under /tmp/w (a tmpfs also with --read-only), its output between `=== step NAME` and
# `=== rc NAME N`, so the driver checks each step's output apart. No network is used.
# Usage (in the container): bash /steps/steps.sh [STEP...]  (default: all)
export HOME=/tmp/w LC_ALL=C.UTF-8 npm_config_cache=/tmp/w/.npm npm_config_update_notifier=false
mkdir -p /tmp/w && cd /tmp/w || exit 1

# A C project of six files and a Makefile: make -j4 builds it in parallel (the jobserver
# pipe, pselect), the program prints the sum of its parts.
step_c() {
	mkdir c && cd c || return 1
	local i
	for i in 1 2 3 4 5; do printf 'int part%d(void) { return %d * %d; }\n' "$i" "$i" "$i" >"p$i.c"; done
	cat >main.c <<'C'
#include <stdio.h>
int part1(void), part2(void), part3(void), part4(void), part5(void);
int main(void) { printf("c-result %d\n", part1() + part2() + part3() + part4() + part5()); return 0; }
C
	printf 'OBJ = main.o p1.o p2.o p3.o p4.o p5.o\nprog: $(OBJ)\n\tgcc -o $@ $(OBJ)\n%%.o: %%.c\n\tgcc -O2 -c $< -o $@\n' >Makefile
	make -s -j4 && ./prog
}

# multiprocessing: a pool of four processes; sqlite3: a database file, three rows back.
step_python() {
	python3 - <<'PY'
import multiprocessing, sqlite3
def sq(x):
    return x * x
if __name__ == "__main__":
    with multiprocessing.Pool(4) as p:
        print("py-pool", sum(p.map(sq, range(10))))
    db = sqlite3.connect("/tmp/w/t.db")
    db.execute("create table t (k text, v integer)")
    db.executemany("insert into t values (?, ?)", [("a", 1), ("b", 2), ("c", 3)])
    db.commit()
    rows = db.execute("select k, v from t order by k").fetchall()
    print("py-sqlite", len(rows), ",".join(f"{k}={v}" for k, v in rows))
PY
}

# worker_threads: four workers each sum a range, the main thread adds their answers.
step_node() {
	node - <<'JS'
const { Worker } = require("worker_threads");
const src = `const { parentPort, workerData } = require("worker_threads");
  let s = 0; for (let i = workerData * 1000; i < (workerData + 1) * 1000; i++) s += i;
  parentPort.postMessage(s);`;
Promise.all([0, 1, 2, 3].map((n) => new Promise((ok, bad) => {
  const w = new Worker(src, { eval: true, workerData: n });
  w.on("message", ok); w.on("error", bad);
}))).then((r) => console.log("node-workers", r.length, r.reduce((a, b) => a + b, 0)));
JS
}

# npm install of a local package (a tarball made by npm pack), offline.
step_npm() {
	mkdir -p pkg app && cd pkg || return 1
	printf '{"name":"moat-local","version":"1.2.3","main":"index.js"}\n' >package.json
	printf 'module.exports = () => "from moat-local";\n' >index.js
	npm pack --silent >/dev/null || return 1
	cd ../app || return 1
	printf '{"name":"app","version":"1.0.0","private":true}\n' >package.json
	npm install --offline --no-audit --no-fund --silent ../pkg/moat-local-1.2.3.tgz || return 1
	node -e 'console.log("npm-installed", require("moat-local/package.json").version, require("moat-local")())'
}

step_git() {
	git init -q -b main repo && cd repo || return 1
	git config user.email t@example.invalid && git config user.name moat-builds
	echo one >f && git add f && git commit -q -m first
	echo two >>f && git commit -q -am second
	echo "git-log $(git log --format=%s | paste -sd, -)"
	echo "git-count $(git rev-list --count HEAD)"
	git fsck --no-progress 2>&1 && echo git-fsck-ok
}

# Root writing into a root-owned directory without the write bit (this image's / is 0555):
# the permission bits hold for root only without CAP_DAC_OVERRIDE, which RESTRICTED cuts.
step_dac() {
	local err
	if err=$(touch /.moat-dac 2>&1); then echo "dac write-ok"; else echo "dac ${err##*: }"; fi
	echo "dac-mode $(stat -c %a / 2>/dev/null || echo "unknown (stat / fails in gVisor 20221219)")"
}

# What the container runs under, for the driver's per-mode checks (not compared with runc):
# the kernel release (gVisor reports its own), uid 0's host id, the root mount's ro/rw, and
# the confinement moat's RESTRICTED policy sets.
step_probe() {
	echo "kernel $(uname -r)"
	echo "uid0-host $(awk '$1 == 0 { print $2 }' /proc/self/uid_map)"
	echo "root-mount $(awk '$5 == "/" { split($6, o, ","); print o[1] }' /proc/self/mountinfo | tail -1)"
	awk '$1 == "CapEff:" || $1 == "NoNewPrivs:" || $1 == "Seccomp:" { print $1, $2 }' /proc/self/status
}

steps=("$@")
((${#steps[@]})) || steps=(probe c python node npm git)
for s in "${steps[@]}"; do
	echo "=== step $s"
	(cd /tmp/w && "step_$s") 2>&1
	echo "=== rc $s $?"
done
