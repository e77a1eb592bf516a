//! AppArmor: the profile named in `process.apparmorProfile` is set for the next execve.
//! On a host without AppArmor the field is ignored, as runc 1.1 does.

use std::io;

pub fn enabled() -> bool {
    std::fs::read_to_string("/sys/module/apparmor/parameters/enabled")
        .is_ok_and(|s| s.trim() == "Y")
}

/// Writes `exec <profile>` to the calling thread's attr, through moat's own procfs.
pub fn exec_profile(profile: &str) -> Result<(), super::procfs::ProcError> {
    super::procfs::write_attr("apparmor", "exec", &format!("exec {profile}"))
}

/// Loads a profile moat ships (by name) unless the kernel already has it.
pub fn ensure_loaded(name: &str, text: &str) -> io::Result<()> {
    let loaded =
        std::fs::read_to_string("/sys/kernel/security/apparmor/profiles").unwrap_or_default();
    if loaded.lines().any(|l| l.split(' ').next() == Some(name)) {
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
        return Err(io::Error::other(format!(
            "apparmor_parser could not load {name}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}
