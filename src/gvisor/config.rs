//! Stop-gap reader for the two gVisor keys of moat's config file, until the policy
//! configuration exists (it will replace this file).
//!
//! The file is `$MOAT_CONFIG`, else `/etc/moat/config.toml`; a missing file is no
//! configuration. Only lines of the form `key = "value"` are read, comments (`#`) and
//! blank lines are skipped, section headers and other keys are ignored:
//!
//! ```toml
//! runtime = "gvisor"            # or "native": the default backend for new containers
//! runsc_path = "/usr/bin/runsc" # absolute; otherwise runsc is looked up in PATH
//! ```

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

pub const DEFAULT_PATH: &str = "/etc/moat/config.toml";

/// The gVisor settings of the stop-gap config file.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct GvisorConfig {
    /// Where the settings came from, for error messages.
    pub source: PathBuf,
    /// `runtime`: "gvisor" or "native".
    pub runtime: Option<String>,
    /// `runsc_path`: absolute path of runsc.
    pub runsc_path: Option<PathBuf>,
}

impl GvisorConfig {
    /// Reads `$MOAT_CONFIG` or the default path.
    pub fn load() -> Result<GvisorConfig> {
        let path = std::env::var_os("MOAT_CONFIG")
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(DEFAULT_PATH));
        Self::load_from(&path)
    }

    pub fn load_from(path: &Path) -> Result<GvisorConfig> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(GvisorConfig {
                    source: path.into(),
                    ..Default::default()
                })
            }
            Err(e) => return Err(e).with_context(|| format!("read {}", path.display())),
        };
        Self::parse(path, &text)
    }

    pub fn parse(path: &Path, text: &str) -> Result<GvisorConfig> {
        let mut c = GvisorConfig {
            source: path.into(),
            ..Default::default()
        };
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with('[') {
                continue;
            }
            let Some((key, value)) = line.split_once('=') else {
                continue;
            };
            let key = key.trim();
            if key != "runtime" && key != "runsc_path" {
                continue;
            }
            let at = || format!("{}:{}: {key}", path.display(), n + 1);
            let value = quoted(value.trim()).with_context(at)?;
            match key {
                "runtime" => {
                    if value != "gvisor" && value != "native" {
                        bail!("{}: want \"gvisor\" or \"native\", got {value:?}", at());
                    }
                    c.runtime = Some(value);
                }
                _ => {
                    if !value.starts_with('/') {
                        bail!("{}: must be an absolute path, got {value:?}", at());
                    }
                    c.runsc_path = Some(PathBuf::from(value));
                }
            }
        }
        Ok(c)
    }
}

/// `"value"` optionally followed by a `# comment`; no escapes.
fn quoted(v: &str) -> Result<String> {
    let rest = v
        .strip_prefix('"')
        .context("value must be a double-quoted string")?;
    let end = rest.find('"').context("unterminated string")?;
    let tail = rest[end + 1..].trim();
    if !tail.is_empty() && !tail.starts_with('#') {
        bail!("unexpected {tail:?} after the value");
    }
    Ok(rest[..end].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_two_keys() {
        let c = GvisorConfig::parse(
            Path::new("c"),
            "# moat\n[engine]\nruntime = \"gvisor\"  # default\nother = 3\nrunsc_path=\"/opt/runsc\"\n",
        )
        .unwrap();
        assert_eq!(c.runtime.as_deref(), Some("gvisor"));
        assert_eq!(c.runsc_path.as_deref(), Some(Path::new("/opt/runsc")));
    }

    #[test]
    fn rejects_bad_values() {
        for bad in [
            "runtime = \"kata\"",
            "runtime = gvisor",
            "runsc_path = \"runsc\"",
            "runtime = \"gvisor\" x",
        ] {
            assert!(GvisorConfig::parse(Path::new("c"), bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn missing_file_is_empty() {
        let c = GvisorConfig::load_from(Path::new("/nonexistent/moat.toml")).unwrap();
        assert_eq!(c.runtime, None);
        assert_eq!(c.runsc_path, None);
    }
}
