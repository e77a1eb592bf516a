//! `moat check` as a doctor: the config in effect and where it came from, moat's
//! registration in each engine's own config file (read under `MOAT_CHECK_ROOT`, a fake
//! `/` for the engine files only), the host traps with what to do.

mod support;

use std::fs;
use std::process::Command;

use support::*;

fn check(config: &std::path::Path, etc: &std::path::Path) -> String {
    let out = Command::new(MOAT)
        .arg("check")
        .env("MOAT_CONFIG", config)
        .env("MOAT_CHECK_ROOT", etc)
        .run_output()
        .expect("run moat check");
    assert!(out.status.success(), "{}", stderr_of(&out));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn check_names_the_config_in_effect_the_engines_registrations_and_the_traps() {
    let dir = tmp_base().join(format!("moat-doctor-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    let etc = dir.join("root");
    for d in ["etc/docker", "etc/containers", "etc/containerd"] {
        fs::create_dir_all(etc.join(d)).unwrap();
    }
    fs::write(
        etc.join("etc/docker/daemon.json"),
        r#"{"runtimes": {"moat": {"path": "/usr/local/bin/moat"}}}"#,
    )
    .unwrap();
    fs::write(
        etc.join("etc/containers/containers.conf"),
        "[engine.runtimes]\nmoat-open = [\n  \"/usr/local/bin/moat-open\",\n]\n",
    )
    .unwrap();
    fs::write(
        etc.join("etc/containerd/config.toml"),
        "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n\
         default_runtime_name = \"moat\"\n\
         [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.moat.options]\n\
         BinaryName = \"/usr/local/bin/moat\"\n",
    )
    .unwrap();
    let open = dir.join("open.toml");
    fs::write(&open, "default_policy = \"open\"\n").unwrap();

    let out = check(&open, &etc);
    assert!(
        out.contains(&format!(
            "  policy             OPEN (the spec runs as written, runc semantics), from {}",
            open.display()
        )),
        "{out}"
    );
    // Under OPEN, no RESTRICTED setting is described as if it applied.
    assert!(
        out.contains("restricted         not in effect for this name"),
        "{out}"
    );
    assert!(!out.contains("kept under restricted"), "{out}");
    assert!(
        out.contains("runtimes.moat.path = \"/usr/local/bin/moat\": docker run --runtime moat"),
        "{out}"
    );
    assert!(
        out.contains("[engine.runtimes] moat-open = \"/usr/local/bin/moat-open\": podman --runtime moat-open"),
        "{out}"
    );
    assert!(
        out.contains("runtime moat, BinaryName = \"/usr/local/bin/moat\""),
        "{out}"
    );
    assert!(
        out.contains("default_runtime_name = \"moat\": every pod runs moat, system pods"),
        "{out}"
    );
    assert!(out.contains("host traps\n"), "{out}");
    for trap in ["rlimits", "systemd", "subuid", "AppArmor", "nftables"] {
        assert!(
            out.lines().any(|l| l
                .trim_start()
                .trim_start_matches(['!', 'o', 'k'])
                .trim_start()
                .starts_with(trap)),
            "{trap}: {out}"
        );
    }

    // The built-in defaults: RESTRICTED, and its settings described.
    let out = check(std::path::Path::new(""), &etc);
    assert!(
        out.contains("  policy             RESTRICTED, from the built-in defaults"),
        "{out}"
    );
    assert!(out.contains("kept under restricted: none"), "{out}");
    fs::remove_dir_all(&dir).unwrap();
}
