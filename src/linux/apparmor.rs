//! AppArmor: the profile named in `process.apparmorProfile` is set for the next execve.
//! On a host without AppArmor the field is ignored, as runc 1.1 does.

use std::io;

pub fn enabled() -> bool {
    std::fs::read_to_string("/sys/module/apparmor/parameters/enabled")
        .is_ok_and(|s| s.trim() == "Y")
}

/// Writes `exec <profile>` to the calling thread's attr, through procfs checked by fd.
pub fn exec_profile(profile: &str) -> io::Result<()> {
    let value = format!("exec {profile}");
    match super::attrs::write_proc("/proc/thread-self/attr/apparmor/exec", &value) {
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
            super::attrs::write_proc("/proc/thread-self/attr/exec", &value)
        }
        r => r,
    }
}
