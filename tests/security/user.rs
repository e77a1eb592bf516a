//! T13 (crun CVE-2026-30892): odd `exec --user` forms. Numbers only (`uid[:gid]`); a name
//! would be looked up in the host's passwd, and a lenient parser runs the process as
//! someone else. The accepted forms run as exactly that uid and gid.

use crate::support::*;
use crate::{ctx, exec, field, sleeper, BOTH};

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn t13_exec_user_forms() {
    if !require_root() {
        return;
    }
    for policy in BOTH {
        let mut ctx = ctx("t13", policy);
        let c = sleeper(&mut ctx, "c");
        for (user, uid, gid) in [
            ("0", 0, 0),
            ("1000:1000", 1000, 1000),
            ("1000", 1000, 0),
            ("0:1000", 0, 1000),
            ("65534:65534", 65534, 65534),
        ] {
            let st = exec(&ctx, &c, &["-u", user, "cat", "/proc/self/status"]);
            assert_eq!(st.code, 0, "{policy:?} -u {user}: {st:#?}");
            assert_eq!(
                field(&st.stdout, "Uid"),
                format!("{uid} {uid} {uid} {uid}"),
                "{policy:?} -u {user}"
            );
            assert_eq!(
                field(&st.stdout, "Gid"),
                format!("{gid} {gid} {gid} {gid}"),
                "{policy:?} -u {user}"
            );
        }
        for bad in [
            "root",
            "u1000",
            "1000:",
            ":1000",
            ":",
            "4294967295",
            "0:4294967295",
            "4294967296",
            "99999999999999999999",
            "-1",
            "+1000",
            " 1000",
            "1000 ",
            "0x3e8",
            "1000:1000:1000",
            "1000:root",
            "",
        ] {
            let out = exec(&ctx, &c, &["-u", bad, "id"]);
            assert_eq!(out.code, 255, "{policy:?}: -u {bad:?} accepted: {out:#?}");
            assert_eq!(out.stdout, "", "{policy:?}: -u {bad:?} ran something");
            assert!(
                out.stderr.contains("--user"),
                "{policy:?} {bad:?}: {}",
                out.stderr
            );
        }
        c.kill("KILL");
    }
}
