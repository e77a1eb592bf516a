//! `moat check`: what this host offers, and what each moat control will do here.

use super::Result;
use crate::linux::seccomp;
use crate::policy;

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// Prints the host's facts and what moat's configuration makes of them.
pub fn report(criu: Option<&str>) -> Result<i32> {
    let cfg = policy::Config::load()?;
    let v2_root = read("/sys/fs/cgroup/cgroup.controllers");
    let unified = read("/sys/fs/cgroup/unified/cgroup.controllers");
    let v1: Vec<String> = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(" - cgroup "))
        .filter_map(|l| {
            l.split(' ')
                .nth(4)
                .map(|m| m.trim_start_matches("/sys/fs/cgroup/").to_string())
        })
        .collect();
    let cgroups = match (&v2_root, v1.is_empty()) {
        (Some(c), _) => format!("v2 (unified), controllers: {c}"),
        (None, false) => match &unified {
            Some(u) => format!(
                "hybrid: v1 {} + v2 at /sys/fs/cgroup/unified ({u})",
                v1.join(" ")
            ),
            None => format!("v1: {}", v1.join(" ")),
        },
        (None, true) => "none mounted".into(),
    };
    let host = crate::linux::hostfacts::HostFacts::probe();
    let (aa, selinux) = (host.apparmor, host.selinux);
    let userns = read("/proc/sys/user/max_user_namespaces").unwrap_or_else(|| "?".into());
    let actions =
        read("/proc/sys/kernel/seccomp/actions_avail").unwrap_or_else(|| "unavailable".into());
    let runsc = cfg
        .runsc_path
        .clone()
        .or_else(|| {
            std::env::var_os("PATH").and_then(|p| {
                std::env::split_paths(&p)
                    .map(|d| d.join("runsc"))
                    .find(|c| c.is_file())
                    .map(|c| c.display().to_string())
            })
        })
        .unwrap_or_else(|| "not found".into());
    let source = cfg
        .source
        .as_ref()
        .map_or("none (built-in defaults)".into(), |p| {
            p.display().to_string()
        });
    let mode = if cfg.audit {
        "AUDIT (runs as OPEN; each create logs what RESTRICTED would have cut)"
    } else if cfg.default_policy == policy::Mode::Open {
        "OPEN (the spec runs as written, runc semantics)"
    } else {
        "RESTRICTED"
    };
    println!("config in effect");
    println!(
        "  policy             {mode}, from {}{}",
        cfg.source.as_ref().map_or(
            "the built-in defaults (no /etc/moat/config.toml)".into(),
            |p| p.display().to_string()
        ),
        cfg.alias
            .as_ref()
            .map_or(String::new(), |a| format!(" [alias.{a}]"))
    );
    println!("engines (moat registered, from their config files)");
    for l in super::doctor::engines() {
        println!("{l}");
    }
    println!("host traps");
    for l in super::doctor::traps(aa) {
        println!("{l}");
    }
    println!("host");
    println!("  cgroups            {cgroups}");
    println!(
        "  AppArmor           {}",
        if aa { "enabled" } else { "not available" }
    );
    println!(
        "  SELinux            {}",
        if selinux { "enabled" } else { "not available" }
    );
    println!(
        "  seccomp            kernel actions: {actions}; libseccomp {}",
        seccomp::libseccomp_version()
    );
    println!("  user namespaces    max_user_namespaces={userns}");
    println!("  runsc (gVisor)     {runsc}");
    println!(
        "  CRIU               {} (checkpoint/restore of native containers, through moat-criu)",
        super::features::criu_usable(criu)
    );
    println!(
        "  egress             {}",
        if crate::linux::namespaces::bpf_cgroup() {
            format!(
                "enforced by cgroup BPF on each container's cgroup v2; RESTRICTED default: {}{}",
                cfg.egress_allow
                    .as_ref()
                    .map_or("every destination".into(), |l| format!("only {l}")),
                if cfg.egress_deny_metadata {
                    ", metadata endpoints refused"
                } else {
                    ", metadata endpoints reachable (deny_metadata = false)"
                }
            )
        } else {
            "cannot be enforced by this caller (rootless, or no cgroup v2 hierarchy): a \
             container with a list is refused"
                .into()
        }
    );
    println!("moat");
    println!("  config             {source}");
    println!(
        "  default policy     {} (annotations only tighten)",
        cfg.default_policy.as_str(),
    );
    println!(
        "  invoked as         {}",
        match (&cfg.alias, policy::config::invoked_name()) {
            (Some(a), _) => format!("{a}: [alias.{a}] applies"),
            (None, Some(n)) if n == crate::gvisor::select::ALIAS => {
                format!("{n}: the built-in alias (gVisor)")
            }
            (None, Some(n)) => format!("{n} (no [alias.{n}] in the config)"),
            (None, None) => "? (no argv[0])".into(),
        }
    );
    if cfg.default_policy == policy::Mode::Open {
        println!(
            "  restricted         not in effect for this name: no capability, seccomp, AppArmor, \
             namespace or limit floor{}",
            if cfg.audit {
                " (reported at each create)"
            } else {
                ""
            }
        );
    } else {
        println!(
            "  host namespaces    {}",
            if cfg.host_namespaces.is_empty() {
                "refused under restricted (pid, network, ipc, uts)".into()
            } else {
                format!(
                    "allowed under restricted: {}",
                    cfg.host_namespaces.join(" ")
                )
            }
        );
        println!(
            "  capabilities       kept under restricted: {}",
            if cfg.allowed_capabilities.is_empty() {
                "none".into()
            } else {
                cfg.allowed_capabilities.join(" ")
            }
        );
        println!("  seccomp            moat's restricted profile when the spec has none; deny floor stacked on engine profiles");
        println!(
            "  AppArmor           {}",
            if aa {
                "moat-default applied when the spec names no profile"
            } else {
                "not enforced on this host (no AppArmor): specs' profiles are ignored, as runc does"
            }
        );
        let limit = |v: Option<i64>| v.map_or("none".to_string(), |v| v.to_string());
        println!(
            "  default limits     memory {} pids {} cpus {}",
            limit(cfg.memory),
            limit(cfg.pids),
            cfg.cpus.map_or("none".into(), |c| c.to_string())
        );
        match policy::fleet_budget(&cfg) {
            Some((path, _)) => println!(
                "  fleet budget       {path}: memory {} pids {} cpus {}; covers containers without cgroupsPath or with a relative one{}",
                limit(cfg.fleet_memory),
                limit(cfg.fleet_pids),
                cfg.fleet_cpus.map_or("none".into(), |c| c.to_string()),
                if cfg.force_nesting { ", and (force_nesting) engine-placed ones" } else { "; engine-placed (absolute, systemd, kubelet) cgroups are not covered" }
            ),
            None => println!("  fleet budget       none configured ({} is created without limits)", cfg.fleet_cgroup),
        }
    }
    println!(
        "  root               {}",
        match crate::policy::Rootfs::of(&cfg) {
            crate::policy::Rootfs::Readonly => "read-only by default".to_string(),
            crate::policy::Rootfs::Ephemeral => format!(
                "ephemeral by default ({} bytes, {} inodes; moat.rootfs=readonly tightens)",
                cfg.rootfs_size, cfg.rootfs_inodes
            ),
            crate::policy::Rootfs::Writable => {
                "writable unless moat.rootfs=ephemeral or readonly".to_string()
            }
        }
    );
    if let Some(b) = cfg.rootfs_budget {
        let shares = crate::state::budget::Ledger::default().shares();
        println!(
            "  rootfs budget      {} for the bounded roots of all live containers on the host ({} share(s) on record in {})",
            crate::state::budget::human(b),
            shares.len(),
            crate::state::budget::LEDGER_DIR
        );
    }
    println!(
        "  network            {}",
        if cfg.network_none {
            "none by default"
        } else {
            "as the engine sets it unless moat.network=none"
        }
    );
    Ok(0)
}
