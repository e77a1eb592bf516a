//! The controls a container asks for: config defaults, then moat's annotations.

use super::decision::config_name;
use super::rootfs::Rootfs;
use super::{config, egress, Change, Config, Mode, PolicyError};
use crate::spec::Spec;

/// The controls a container gets: config defaults, then annotations, which may only
/// tighten. A loosening annotation is ignored and reported (an image can carry one: podman
/// copies image annotations into the spec); loosening is the operator's, through the name
/// moat is invoked by (`[alias.NAME]` in the config).
pub(super) struct Selection {
    pub(super) mode: Mode,
    pub(super) rootfs: Rootfs,
    /// `moat.rootfs.size`, at most `[restricted] rootfs_size`.
    pub(super) rootfs_size: u64,
    pub(super) network_none: bool,
    pub(super) userns_auto: bool,
    /// `moat.egress`, parsed (checked against the config's list in `egress_policy`).
    pub(super) egress: Option<egress::List>,
    pub(super) ignored: Vec<Change>,
}

/// Why a loosening annotation is ignored.
pub const IGNORED_ANNOTATION: &str = "annotations may only tighten; the operator loosens \
     with an [alias.NAME] table in the config, NAME being the name moat is invoked by \
     (a symlink an engine runtime points at)";

pub(super) fn select(spec: &Spec, cfg: &Config) -> Result<Selection, PolicyError> {
    let mut sel = Selection {
        mode: cfg.default_policy,
        rootfs: Rootfs::of(cfg),
        rootfs_size: cfg.rootfs_size,
        network_none: cfg.network_none,
        userns_auto: cfg.userns_auto,
        egress: None,
        ignored: Vec::new(),
    };
    for (k, v) in &spec.annotations {
        if !k.starts_with("moat.") {
            continue;
        }
        let bad = || PolicyError::AnnotationValue {
            key: k.clone(),
            value: v.clone(),
        };
        // `loosens`: the value asks for less than the config gives (ignored); otherwise it
        // tightens or restates the config.
        let loosens = match k.as_str() {
            "moat.policy" => match (Mode::parse(v), v.as_str()) {
                (Some(Mode::Restricted), _) => {
                    sel.mode = Mode::Restricted;
                    false
                }
                (Some(Mode::Open), _) => cfg.default_policy != Mode::Open,
                // The operator's alone (`[alias.NAME] default_policy = "audit"`): an image
                // asking for it would run as OPEN.
                (None, "audit") => true,
                (None, _) => return Err(bad()),
            },
            "moat.rootfs" => {
                let want = match v.as_str() {
                    "readonly" => Rootfs::Readonly,
                    "ephemeral" => Rootfs::Ephemeral,
                    "writable" => Rootfs::Writable,
                    _ => return Err(bad()),
                };
                sel.rootfs = sel.rootfs.max(want);
                want < Rootfs::of(cfg)
            }
            "moat.rootfs.size" => {
                let n = config::parse_size(v).ok_or_else(bad)?.unsigned_abs();
                let loosens = n > cfg.rootfs_size;
                if !loosens {
                    sel.rootfs_size = sel.rootfs_size.min(n);
                }
                loosens
            }
            "moat.network" => match v.as_str() {
                "none" => {
                    sel.network_none = true;
                    false
                }
                "engine" => cfg.network_none,
                _ => return Err(bad()),
            },
            // Refused, not ignored, when it widens: checked in `egress_policy`.
            "moat.egress" => {
                sel.egress = Some(egress::parse_list(v)?);
                false
            }
            "moat.userns" => match v.as_str() {
                "auto" => {
                    sel.userns_auto = true;
                    false
                }
                "engine" => cfg.userns_auto,
                _ => return Err(bad()),
            },
            // Chosen with the backend (`gvisor::select`); `native` leaving the operator's
            // gVisor is ignored and reported there (`gvisor::policy::adjust`).
            "moat.runtime" => {
                if v != "gvisor" && v != "native" {
                    return Err(bad());
                }
                false
            }
            _ => return Err(PolicyError::AnnotationUnknown { key: k.clone() }),
        };
        if loosens {
            sel.ignored.push(Change {
                field: format!("annotations.{k}"),
                action: "ignored",
                detail: format!("{k}={v} would loosen {}", config_name(cfg)),
                reason: IGNORED_ANNOTATION.into(),
            });
        }
    }
    Ok(sel)
}
