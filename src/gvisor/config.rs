//! The gVisor settings of moat's configuration (`[gvisor]` in `/etc/moat/config.toml`, see
//! `policy::config`), in the shape the gVisor path uses.

use std::path::PathBuf;

use anyhow::{bail, Result};

/// The gVisor settings of the config file.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct GvisorConfig {
    /// Where the settings came from, for error messages.
    pub source: PathBuf,
    /// `runtime`: "gvisor" when the config makes gVisor the default.
    pub runtime: Option<String>,
    /// `runsc_path`: absolute path of runsc.
    pub runsc_path: Option<PathBuf>,
    /// The whole configuration: the hardening policy applies to gVisor containers too.
    pub policy: crate::policy::Config,
}

impl GvisorConfig {
    pub fn load() -> Result<GvisorConfig> {
        let cfg = crate::policy::Config::load()?;
        let runsc_path = cfg.runsc_path.clone().map(PathBuf::from);
        if let Some(p) = &runsc_path {
            if !p.is_absolute() {
                bail!("gvisor.runsc_path {:?} must be an absolute path", p);
            }
        }
        Ok(GvisorConfig {
            source: cfg
                .source
                .clone()
                .unwrap_or_else(|| PathBuf::from("/etc/moat/config.toml")),
            runtime: cfg.runtime_gvisor.then(|| "gvisor".to_string()),
            runsc_path,
            policy: cfg,
        })
    }
}
