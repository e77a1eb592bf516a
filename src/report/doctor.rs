//! `moat check` as a doctor: which engines on this host have moat registered and how (read
//! from their own config files), and the host traps moat can see, each with what to do.
//!
//! The engine files are TOML (podman, containerd, CRI-O), read with the `toml` crate as the
//! engines read them (a file that does not parse is said to be broken), and JSON (Docker).
//! They are only reported on, never trusted: moat acts on nothing read here.

use std::path::{Path, PathBuf};

/// The directory engine config paths are read under: `/`, or `MOAT_CHECK_ROOT` (tests).
fn etc_root() -> PathBuf {
    std::env::var_os("MOAT_CHECK_ROOT")
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from("/"), PathBuf::from)
}

fn read_under(root: &Path, path: &str) -> Option<(PathBuf, String)> {
    let p = root.join(path.trim_start_matches('/'));
    std::fs::read_to_string(&p).ok().map(|t| (p, t))
}

/// `(table path, key, value)` of each value of a TOML file, read with the `toml` crate:
/// strings as they are, arrays as their first string, other scalars as TOML writes them;
/// or the one-line parse error with its line.
fn toml_entries(text: &str) -> Result<Vec<(Vec<String>, String, String)>, String> {
    fn walk(t: &toml::Table, path: &mut Vec<String>, out: &mut Vec<(Vec<String>, String, String)>) {
        for (k, v) in t {
            let leaf = match v {
                toml::Value::Table(sub) => {
                    path.push(k.clone());
                    walk(sub, path, out);
                    path.pop();
                    continue;
                }
                toml::Value::String(s) => s.clone(),
                toml::Value::Array(a) => a
                    .iter()
                    .find_map(|x| x.as_str())
                    .unwrap_or_default()
                    .to_string(),
                toml::Value::Integer(i) => i.to_string(),
                toml::Value::Float(f) => f.to_string(),
                toml::Value::Boolean(b) => b.to_string(),
                toml::Value::Datetime(d) => d.to_string(),
            };
            out.push((path.clone(), k.clone(), leaf));
        }
    }
    let table: toml::Table = toml::from_str(text).map_err(|e| {
        let line = e.span().map_or(0, |s| {
            text.as_bytes()[..s.start.min(text.len())]
                .iter()
                .filter(|b| **b == b'\n')
                .count()
                + 1
        });
        format!("line {line}: {}", e.message().trim().replace('\n', "; "))
    })?;
    let mut out = Vec::new();
    walk(&table, &mut Vec::new(), &mut out);
    Ok(out)
}

/// A file the engine reads that is not TOML: said once, as a finding.
fn not_toml(p: &Path, e: &str, engine: &str) -> String {
    format!(
        "{}: not TOML ({e}): {engine} cannot read it either",
        p.display()
    )
}

/// A runtime entry that runs moat: its name or its binary says so.
fn is_moat(name: &str, path: &str) -> bool {
    name.contains("moat")
        || Path::new(path)
            .file_name()
            .is_some_and(|f| f.to_string_lossy().contains("moat"))
}

fn on_path(bin: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(bin).is_file()))
}

/// One engine's lines: where it is configured and how moat is registered, or what to do.
fn engine(name: &str, bin: &str, files: &[String], found: Vec<String>, hint: &str) -> Vec<String> {
    let installed = on_path(bin);
    let mut out = Vec::new();
    let head = format!("  {name:<18} ");
    if found.is_empty() {
        if installed || !files.is_empty() {
            let read = if files.is_empty() {
                "no config file".to_string()
            } else {
                files.join(", ")
            };
            out.push(format!("{head}moat not registered ({read}); {hint}"));
        } else {
            out.push(format!("{head}not installed"));
        }
    } else {
        for (i, f) in found.iter().enumerate() {
            out.push(if i == 0 {
                format!("{head}{f}")
            } else {
                format!("  {:<18} {f}", "")
            });
        }
    }
    out
}

/// The engines' configs: podman's containers.conf, Docker's daemon.json, containerd's
/// config.toml (CRI 1.x and 2.x tables), CRI-O's crio.conf and drop-ins.
pub fn engines() -> Vec<String> {
    let root = etc_root();
    let mut lines = Vec::new();

    // podman: [engine.runtimes] NAME = ["PATH", …]; [engine] runtime = "NAME".
    let mut files = Vec::new();
    let mut found = Vec::new();
    for f in [
        "/usr/share/containers/containers.conf",
        "/etc/containers/containers.conf",
    ] {
        let Some((p, text)) = read_under(&root, f) else {
            continue;
        };
        files.push(p.display().to_string());
        let entries = toml_entries(&text).unwrap_or_else(|e| {
            found.push(not_toml(&p, &e, "podman"));
            Vec::new()
        });
        for (t, k, v) in entries {
            if t == ["engine", "runtimes"] && is_moat(&k, &v) {
                found.push(format!(
                    "{}: [engine.runtimes] {k} = {v:?}: podman --runtime {k}",
                    p.display()
                ));
            }
            if t == ["engine"] && k == "runtime" && v.contains("moat") {
                found.push(format!(
                    "{}: [engine] runtime = {v:?}: every podman container runs moat",
                    p.display()
                ));
            }
        }
    }
    lines.extend(engine(
        "podman",
        "podman",
        &files,
        found,
        "add [engine.runtimes] moat = [\"/usr/local/bin/moat\"] to /etc/containers/containers.conf, \
         or use podman --runtime /usr/local/bin/moat (docs/integrations.md)",
    ));

    // Docker: {"runtimes": {NAME: {"path": PATH}}, "default-runtime": NAME}.
    let mut files = Vec::new();
    let mut found = Vec::new();
    if let Some((p, text)) = read_under(&root, "/etc/docker/daemon.json") {
        files.push(p.display().to_string());
        match serde_json::from_str::<serde_json::Value>(&text) {
            Ok(v) => {
                if let Some(rt) = v["runtimes"].as_object() {
                    for (k, e) in rt {
                        let path = e["path"].as_str().unwrap_or_default();
                        if is_moat(k, path) {
                            found.push(format!(
                                "{}: runtimes.{k}.path = {path:?}: docker run --runtime {k}",
                                p.display()
                            ));
                        }
                    }
                }
                if let Some(d) = v["default-runtime"].as_str().filter(|d| d.contains("moat")) {
                    found.push(format!(
                        "{}: default-runtime = {d:?}: every Docker container runs moat",
                        p.display()
                    ));
                }
            }
            Err(e) => found.push(format!(
                "{}: not JSON ({e}): dockerd will not start",
                p.display()
            )),
        }
    }
    lines.extend(engine(
        "Docker",
        "dockerd",
        &files,
        found,
        "add \"runtimes\": {\"moat\": {\"path\": \"/usr/local/bin/moat\"}} to /etc/docker/daemon.json \
         (docs/integrations.md)",
    ));

    // containerd: [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.NAME] (config
    // version 2) or [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.NAME] (3),
    // with options.BinaryName; default_runtime_name.
    let mut files = Vec::new();
    let mut found = Vec::new();
    if let Some((p, text)) = read_under(&root, "/etc/containerd/config.toml") {
        files.push(p.display().to_string());
        let entries = toml_entries(&text).unwrap_or_else(|e| {
            found.push(not_toml(&p, &e, "containerd"));
            Vec::new()
        });
        let mut cri = false;
        for (t, k, v) in &entries {
            // plugins.<cri plugin>.….runtimes.<NAME>[.options]
            cri |= t.len() >= 2
                && t[0] == "plugins"
                && (t[1] == "io.containerd.grpc.v1.cri"
                    || t[1].starts_with("io.containerd.cri.v1"));
            let runtime = t
                .iter()
                .position(|c| c == "runtimes")
                .and_then(|i| t.get(i + 1));
            match (runtime, k.as_str()) {
                (Some(r), "BinaryName") if is_moat(r, v) => found.push(format!(
                    "{}: runtime {r}, BinaryName = {v:?}: a RuntimeClass with handler: {r}",
                    p.display()
                )),
                (_, "default_runtime_name") if v.contains("moat") => found.push(format!(
                    "{}: default_runtime_name = {v:?}: every pod runs moat, system pods (CNI, \
                     kube-proxy) too, under RESTRICTED unless that runtime's name is an OPEN \
                     alias; prefer a RuntimeClass",
                    p.display()
                )),
                _ => {}
            }
        }
        if !cri && !entries.is_empty() {
            found.push(format!(
                "{}: no CRI plugin table: a kubelet cannot use this containerd (ctr --runc-binary still works)",
                p.display()
            ));
        }
    }
    lines.extend(engine(
        "containerd",
        "containerd",
        &files,
        found,
        "add a runtime with options.BinaryName = \"/usr/local/bin/moat\" next to runc, \
         or use ctr run --runc-binary (docs/integrations.md)",
    ));

    // CRI-O: [crio.runtime.runtimes.NAME] runtime_path = PATH.
    let mut files = Vec::new();
    let mut found = Vec::new();
    let mut crio_files = vec!["/etc/crio/crio.conf".to_string()];
    if let Ok(rd) = std::fs::read_dir(root.join("etc/crio/crio.conf.d")) {
        let mut d: Vec<String> = rd
            .filter_map(|e| e.ok())
            .map(|e| format!("/etc/crio/crio.conf.d/{}", e.file_name().to_string_lossy()))
            .collect();
        d.sort();
        crio_files.extend(d);
    }
    for f in &crio_files {
        let Some((p, text)) = read_under(&root, f) else {
            continue;
        };
        files.push(p.display().to_string());
        let entries = toml_entries(&text).unwrap_or_else(|e| {
            found.push(not_toml(&p, &e, "CRI-O"));
            Vec::new()
        });
        for (t, k, v) in entries {
            if let [a, b, c, r] = t.as_slice() {
                if [a, b, c] == ["crio", "runtime", "runtimes"]
                    && k == "runtime_path"
                    && is_moat(r, &v)
                {
                    found.push(format!(
                        "{}: runtime {r}, runtime_path = {v:?}",
                        p.display()
                    ));
                }
            }
        }
    }
    lines.extend(engine(
        "CRI-O",
        "crio",
        &files,
        found,
        "add [crio.runtime.runtimes.moat] runtime_path = \"/usr/local/bin/moat\" (docs/integrations.md)",
    ));
    lines
}

/// A host trap: `None` when the host is fine, else what is wrong and what to do.
struct Trap {
    what: &'static str,
    problem: Option<String>,
}

fn cap_effective(cap: u32) -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|v| v & (1 << cap) != 0)
}

/// The traps moat can see from here: rlimits engines ask for above the hard limit, no
/// systemd, no subuid range for podman's `--userns=auto`, no AppArmor, no nftables.
pub fn traps(apparmor: bool) -> Vec<String> {
    const PODMAN_NOFILE: u64 = 1_048_576;
    let mut traps = Vec::new();
    let sys_resource = cap_effective(24);
    for (name, res) in [
        ("RLIMIT_NOFILE", libc::RLIMIT_NOFILE),
        ("RLIMIT_NPROC", libc::RLIMIT_NPROC),
    ] {
        #[allow(clippy::cast_possible_wrap)] // RLIMIT_* are small constants
        let hard = crate::linux::sys::hard_rlimit(res as libc::c_int).unwrap_or(u64::MAX);
        traps.push(Trap {
            what: "rlimits",
            problem: (hard < PODMAN_NOFILE && !sys_resource).then(|| {
                format!(
                    "{name} hard limit is {hard}, below podman's default {PODMAN_NOFILE}, and \
                     raising it needs CAP_SYS_RESOURCE: every podman run fails setting it; set \
                     default_ulimits = [\"nofile=1024:1024\", \"nproc=1024:1024\"] in \
                     containers.conf (or --ulimit), or raise the limit of the engine's service"
                )
            }),
        });
    }
    let systemd = Path::new("/run/systemd/system").is_dir();
    traps.push(Trap {
        what: "systemd",
        problem: (!systemd).then(|| {
            "not running (no /run/systemd/system): the engines' systemd cgroup driver fails; use \
             cgroupfs (podman --cgroup-manager=cgroupfs or cgroup_manager = \"cgroupfs\", \
             containerd SystemdCgroup = false, dockerd --exec-opt native.cgroupdriver=cgroupfs)"
                .into()
        }),
    });
    let subuid = |f: &str| {
        std::fs::read_to_string(f)
            .unwrap_or_default()
            .lines()
            .any(|l| l.starts_with("containers:"))
    };
    traps.push(Trap {
        what: "subuid",
        problem: (!(subuid("/etc/subuid") && subuid("/etc/subgid"))).then(|| {
            "no range for user \"containers\" in /etc/subuid and /etc/subgid: podman \
             --userns=auto fails; add e.g. containers:2147483647:2147483648 to both (moat's own \
             moat.userns=auto uses [userns] pool instead)"
                .into()
        }),
    });
    traps.push(Trap {
        what: "AppArmor",
        problem: (!apparmor).then(|| {
            "not enabled: moat-default is not applied (capabilities, seccomp and the rest are); \
             on Debian apt install apparmor and boot with apparmor=1 security=apparmor"
                .into()
        }),
    });
    let nft = Path::new("/sys/module/nf_tables").exists() || on_path("nft");
    traps.push(Trap {
        what: "nftables",
        problem: (!nft).then(|| {
            "no nf_tables module and no nft: podman's netavark and containerd's CNI firewall \
             rules need nftables (or iptables-legacy); apt install nftables"
                .into()
        }),
    });
    traps
        .into_iter()
        .map(|t| match t.problem {
            Some(p) => format!("  ! {:<16} {p}", t.what),
            None => format!("  ok {:<15} fine", t.what),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_engine_tables_as_toml() {
        let text = "version = 2 # comment\n\
            [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.moat.options]\n\
            BinaryName = \"/usr/local/bin/moat\"\n\
            [engine.runtimes]\n\
            moat = [\n  \"/usr/local/bin/moat\",\n]\n\
            runc = ['/usr/bin/runc'] # '#'\n";
        let l = toml_entries(text).unwrap();
        let path = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(l.contains(&(
            path(&[
                "plugins",
                "io.containerd.grpc.v1.cri",
                "containerd",
                "runtimes",
                "moat",
                "options"
            ]),
            "BinaryName".into(),
            "/usr/local/bin/moat".into()
        )));
        assert!(l.contains(&(
            path(&["engine", "runtimes"]),
            "moat".into(),
            "/usr/local/bin/moat".into()
        )));
        assert!(l.contains(&(
            path(&["engine", "runtimes"]),
            "runc".into(),
            "/usr/bin/runc".into()
        )));
        let e = toml_entries("[engine]\nruntime = moat\n").unwrap_err();
        assert!(e.starts_with("line 2: "), "{e}");
    }
}
