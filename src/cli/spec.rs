//! `moat spec`: write a starter config.json, like `runc spec`.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use anyhow::Context;

use super::{Global, Result};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Bundle directory to write config.json into
    #[arg(short = 'b', long, default_value = ".")]
    pub bundle: PathBuf,
    /// Generate a spec for a rootless container
    ///
    /// Shares its id with the global `--rootless` (true|false|auto), so clap propagates
    /// it up into `Global`: it must therefore be a string-valued flag, or parsing panics
    /// on the type mismatch. The global's value propagates down here too (`auto` when
    /// not given), so only `true` asks for a rootless spec.
    #[arg(long, num_args = 0, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub rootless: Option<String>,
}

pub fn run(_g: &Global, a: Args) -> Result<i32> {
    let path = a.bundle.join("config.json");
    let json = serde_json::to_string_pretty(&crate::spec::default::spec(
        a.rootless.as_deref() == Some("true"),
        crate::linux::cgroups::unified_mode(),
    ))?;
    let mut f = match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o666)
        .open(&path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            anyhow::bail!("File {} exists. Remove it first", path.display())
        }
        Err(e) => return Err(e).with_context(|| format!("cannot create {}", path.display())),
    };
    f.write_all(json.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(0)
}
