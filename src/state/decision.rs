//! `policy.json`: the policy's [`Decision`] for a container, written at create (and
//! rewritten by `update --egress`) and read back by every later command, here alone.

use super::{io_err, write_atomic, ContainerDir, Corruption, StateError, POLICY_FILE};
use crate::policy::Decision;

/// How [`ContainerDir::save_decision`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Save {
    /// The file does not exist yet and nobody reads it before the record exists: written
    /// in place ([`ContainerDir::write_new`]).
    New,
    /// Replaces the file atomically (a temporary and a rename): readers see the old
    /// decision or the new one.
    Replace,
}

impl ContainerDir {
    /// Writes the container's decision (indented JSON, as `policy explain --format json`
    /// shows it).
    pub fn save_decision(&self, d: &Decision, how: Save) -> Result<(), StateError> {
        let json = serde_json::to_vec_pretty(d).expect("decision serialises");
        match how {
            Save::New => self.write_new(POLICY_FILE, &json),
            Save::Replace => write_atomic(&self.file(POLICY_FILE), &json),
        }
    }

    /// The container's recorded decision; `None` when it has none (a create killed before
    /// it wrote one). A record written by an older moat reads with the meaning its missing
    /// fields had then; fields this moat does not know are kept ([`Decision::unknown`]).
    pub fn load_decision(&self) -> Result<Option<Decision>, StateError> {
        let path = self.file(POLICY_FILE);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err("cannot read", &path)(e)),
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| StateError::Corrupt {
                path,
                reason: Corruption::Decision(e),
            })
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::policy::egress::ForwarderLimits;
    use crate::policy::{Change, Mode, Rootfs, Userns, ACTIONS};

    /// A state directory of its own under the temp dir, removed when dropped.
    struct Dir(Option<ContainerDir>, PathBuf);

    impl Dir {
        fn new(tag: &str) -> Dir {
            let root = std::env::temp_dir()
                .join(format!("moat-decision-test-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&root);
            Dir(Some(ContainerDir::create(&root, "c").unwrap()), root)
        }

        fn write(&self, json: &str) {
            self.0
                .as_ref()
                .unwrap()
                .save_file(POLICY_FILE, json.as_bytes())
                .unwrap();
        }
    }

    impl std::ops::Deref for Dir {
        type Target = ContainerDir;
        fn deref(&self) -> &ContainerDir {
            self.0.as_ref().unwrap()
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            if let Some(d) = self.0.take() {
                let _ = d.remove();
            }
            let _ = std::fs::remove_dir(&self.1);
        }
    }

    /// A record in this moat's format with every field set, none to its default, and a
    /// field of a newer moat.
    const FULL: &str = r#"{
      "policy": "restricted",
      "readonly_rootfs": true,
      "rootfs": "ephemeral",
      "bounded_root": {"size": 67108864, "inodes": 4096},
      "network_none": true,
      "seccomp_floor": true,
      "userns": "auto",
      "userns_pool": true,
      "changes": [
        {"field": "f.removed", "action": "removed", "detail": "d", "reason": "r"},
        {"field": "f.set", "action": "set", "detail": "d", "reason": "r"},
        {"field": "f.added", "action": "added", "detail": "d", "reason": "r"},
        {"field": "f.replaced", "action": "replaced", "detail": "d", "reason": "r"},
        {"field": "f.kept", "action": "kept", "detail": "d", "reason": "r"},
        {"field": "f.ignored", "action": "ignored", "detail": "d", "reason": "r"},
        {"field": "f.absent", "action": "absent", "detail": "d", "reason": "r"}
      ],
      "not_applied": [
        {"field": "linux.maskedPaths", "action": "not applied", "detail": "d", "reason": "r"}
      ],
      "host_namespaces": ["pid", "network", "ipc", "uts"],
      "audit": [{"field": "spec", "action": "refused", "detail": "d", "reason": "r"}],
      "memory_high": 0.9,
      "egress": {
        "allow": ["10.0.0.0/8:443", "tcp/[2001:db8::1]:53", "*.example.com"],
        "deny": ["169.254.169.254", "fd00:ec2::254"],
        "resolvers": ["10.0.0.2:53"],
        "forwarder": {"names": 7, "answers": 3, "memory": 33554432, "pids": 9},
        "packets": true
      },
      "from_a_newer_moat": [1]
    }"#;

    #[test]
    fn every_field_round_trips() {
        let dir = Dir::new("full");
        assert!(dir.load_decision().unwrap().is_none());
        dir.write(FULL);
        let d = dir.load_decision().unwrap().unwrap();
        // Each field read as what it says (none fell back to a default).
        assert_eq!(
            (
                d.policy,
                d.rootfs,
                d.userns,
                d.bounded_root.map(|b| (b.size, b.inodes))
            ),
            (
                Mode::Restricted,
                Rootfs::Ephemeral,
                Userns::Auto,
                Some((64 << 20, 4096))
            )
        );
        assert!(d.readonly_rootfs && d.network_none && d.seccomp_floor && d.userns_pool);
        assert_eq!(d.host_namespaces, ["pid", "network", "ipc", "uts"]);
        assert_eq!(d.memory_high, Some(0.9));
        assert!(d.enforced);
        let mut actions: Vec<_> = d
            .changes
            .iter()
            .chain(&d.not_applied)
            .chain(&d.audit)
            .map(|c| c.action)
            .collect();
        actions.sort_unstable();
        let mut all = ACTIONS;
        all.sort_unstable();
        assert_eq!(actions, all, "every action is in the record");
        let e = d.egress.as_ref().unwrap();
        assert_eq!(
            e.allow.as_ref().unwrap().to_string(),
            "10.0.0.0/8:443,tcp/[2001:db8::1]:53,*.example.com"
        );
        assert_eq!(e.deny.len(), 2);
        assert_eq!(e.resolvers, ["10.0.0.2:53".parse().unwrap()]);
        assert_eq!(
            e.forwarder,
            ForwarderLimits {
                names: 7,
                answers: 3,
                memory: 32 << 20,
                pids: 9
            }
        );
        assert!(e.packets);
        assert_eq!(d.unknown["from_a_newer_moat"], serde_json::json!([1]));
        // Saved, it is the same record, field for field, and reads back the same.
        dir.save_decision(&d, Save::Replace).unwrap();
        let saved: serde_json::Value =
            serde_json::from_slice(&dir.read_file(POLICY_FILE).unwrap().unwrap()).unwrap();
        assert_eq!(
            saved,
            serde_json::from_str::<serde_json::Value>(FULL).unwrap()
        );
        assert_eq!(dir.load_decision().unwrap().as_ref(), Some(&d));
        // The in-memory switch of `verify`'s tests is not recorded: a record reads enforced.
        let mut unenforced = d.clone();
        unenforced.enforced = false;
        dir.save_decision(&unenforced, Save::Replace).unwrap();
        assert_eq!(dir.load_decision().unwrap(), Some(d));
    }

    /// `policy.json` as the previous release (afd98e2) wrote it for a RESTRICTED container
    /// with `moat.network=none`: no `rootfs`, `bounded_root`, `audit`, `memory_high`,
    /// `egress`.
    const AFD98E2: &str = include_str!("testdata/policy-afd98e2.json");

    #[test]
    fn a_record_of_the_previous_release_loads() {
        let dir = Dir::new("old");
        dir.write(AFD98E2);
        let d = dir.load_decision().unwrap().unwrap();
        assert_eq!(d.policy, Mode::Restricted);
        assert!(d.network_none && !d.readonly_rootfs && !d.seccomp_floor);
        assert_eq!(
            (d.rootfs, d.userns, d.userns_pool),
            (Rootfs::Writable, Userns::Engine, false)
        );
        assert_eq!(
            (d.bounded_root, d.memory_high, &d.egress),
            (None, None, &None)
        );
        assert!(d.not_applied.is_empty() && d.audit.is_empty() && d.host_namespaces.is_empty());
        assert!(d.unknown.is_empty() && d.enforced);
        assert_eq!(d.changes.len(), 7);
        assert_eq!(
            d.changes[4],
            Change {
                field: "linux.seccomp".into(),
                action: "set",
                detail: "seccomp-profiles/restricted.json".into(),
                reason: "no seccomp profile in the spec".into(),
            }
        );
        // Before `moat.rootfs`, a read-only root was all `readonly_rootfs` said.
        let ro = AFD98E2.replace("\"readonly_rootfs\": false", "\"readonly_rootfs\": true");
        dir.write(&ro);
        assert_eq!(
            dir.load_decision().unwrap().unwrap().rootfs,
            Rootfs::Readonly
        );
        // Before `moat.userns`.
        dir.write(&AFD98E2.replace("\"userns\": \"engine\",", ""));
        assert_eq!(dir.load_decision().unwrap().unwrap().userns, Userns::Engine);
    }

    /// A field this moat does not know (a newer moat's) is kept through a load and a save
    /// (`update --egress` rewrites the file), and acted on by nothing.
    #[test]
    fn unknown_fields_are_kept_through_a_rewrite() {
        let dir = Dir::new("unknown");
        let newer = AFD98E2.replacen('{', r#"{"rootfs_quota": {"bytes": 5}, "zz": true,"#, 1);
        dir.write(&newer);
        let mut d = dir.load_decision().unwrap().unwrap();
        assert_eq!(
            d.unknown.keys().map(String::as_str).collect::<Vec<_>>(),
            ["rootfs_quota", "zz"]
        );
        d.memory_high = Some(0.5);
        dir.save_decision(&d, Save::Replace).unwrap();
        let v: serde_json::Value =
            serde_json::from_slice(&dir.read_file(POLICY_FILE).unwrap().unwrap()).unwrap();
        assert_eq!(v["rootfs_quota"]["bytes"], 5);
        assert_eq!(v["zz"], true);
        assert_eq!(v["memory_high"], 0.5);
    }

    /// What moat cannot read is refused by name, with the file's path: never read as a
    /// looser decision (a policy it does not know, an action or a namespace type it never
    /// writes, a malformed egress list).
    #[test]
    fn a_record_that_does_not_parse_is_refused_naming_the_field() {
        let dir = Dir::new("bad");
        for (from, to, says) in [
            (
                r#""policy": "restricted""#,
                r#""policy": "lax""#,
                "unknown variant `lax`",
            ),
            (
                r#""action": "set""#,
                r#""action": "loosened""#,
                "a policy action",
            ),
            (
                r#""network_none": true,"#,
                "",
                "missing field `network_none`",
            ),
            (
                r#""userns": "engine""#,
                r#""userns": "engine", "host_namespaces": ["mount"]"#,
                "a host namespace type",
            ),
            (
                r#""userns": "engine""#,
                r#""userns": "engine", "egress": {"allow": ["300.1.1.1"], "deny": [], "resolvers": []}"#,
                "egress rule \"300.1.1.1\"",
            ),
        ] {
            let bad = AFD98E2.replacen(from, to, 1);
            assert_ne!(bad, AFD98E2, "{from}");
            dir.write(&bad);
            let e = dir.load_decision().unwrap_err().to_string();
            assert!(e.contains(says), "{from}: {e}");
            assert!(
                e.contains("policy.json: corrupt state: policy decision: "),
                "{e}"
            );
        }
    }
}
