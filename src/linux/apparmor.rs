//! AppArmor: the profile named in `process.apparmorProfile` is set for the next execve.
//! Whether the host has AppArmor is a host fact ([`super::hostfacts`]), probed before
//! fork; on a host without it the field is ignored, as runc does.

use std::io;

use super::hostfacts::HostFacts;

/// The attr (below `/proc/thread-self/attr/`) and the value that set `profile` for the
/// next execve: the per-LSM directory where the kernel has one (5.8 on), else the shared
/// `exec` file, which is AppArmor's when AppArmor is the major LSM.
pub fn exec_attr(profile: &str, host: &HostFacts) -> (&'static str, String) {
    let attr = if host.apparmor_attr_dir {
        "apparmor/exec"
    } else {
        "exec"
    };
    (attr, format!("exec {profile}"))
}

/// Loads a profile moat ships (by name) unless the host facts say the kernel has it.
pub fn ensure_loaded(name: &str, text: &str, host: &HostFacts) -> io::Result<()> {
    if host.apparmor_loaded(name) == Some(true) {
        return Ok(());
    }
    use std::io::Write;
    let mut child = std::process::Command::new("apparmor_parser")
        .args(["--replace", "--skip-cache"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| io::Error::new(e.kind(), format!("apparmor_parser: {e}")))?;
    child
        .stdin
        .take()
        .expect("piped")
        .write_all(text.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        // Its own message; its status when it printed none.
        let stderr = String::from_utf8_lossy(&out.stderr);
        let why = match stderr.trim() {
            "" => super::signal::ChildEnd::from(out.status).to_string(),
            msg => msg.to_string(),
        };
        return Err(io::Error::other(format!(
            "apparmor_parser could not load {name}: {why}"
        )));
    }
    Ok(())
}
