//! `ps [--format table|json] <id> [ps options]`: the container's processes, as
//! host pids (json) or as the host `ps` shows them, filtered to the container (table).

use std::io::Write;

use anyhow::{bail, Context as _};

use super::{Container, Context, Error, Result};

/// runc's `ps` flags.
#[derive(Debug, Clone)]
pub struct Request {
    pub id: String,
    /// `table` or `json`.
    pub format: String,
    /// Options for ps(1) (default -ef).
    pub ps_args: Vec<String>,
}

pub fn ps(ctx: &Context, req: &Request) -> Result<i32> {
    let c = Container::open_read(ctx, &req.id)?;
    c.engine().ps(ctx, &c, req)
}

pub fn native(c: &Container, req: &Request) -> Result<()> {
    // A stopped container lists no processes, as with runc (whose cgroup may still
    // hold stragglers: those are listed).
    let pids = match &c.record.cgroup {
        Some(cg) => cg.pids()?,
        None => Vec::new(),
    };
    let mut out = std::io::stdout().lock();
    match req.format.as_str() {
        "json" => {
            writeln!(out, "{}", serde_json::to_string(&pids)?)
                .context("write to standard output")?;
            return Ok(());
        }
        "table" => {}
        _ => return Err(Error::PsFormat.into()),
    }
    let args = if req.ps_args.is_empty() {
        vec!["-ef".to_string()]
    } else {
        req.ps_args.clone()
    };
    let output = std::process::Command::new("ps")
        .args(&args)
        .stdin(std::process::Stdio::null())
        .output()
        .context("cannot run ps")?;
    if !output.status.success() {
        bail!(
            "ps {}: {}: {}{}",
            args.join(" "),
            crate::linux::signal::ChildEnd::from(output.status),
            String::from_utf8_lossy(&output.stdout).trim_end(),
            String::from_utf8_lossy(&output.stderr).trim_end()
        );
    }
    let text = String::from_utf8_lossy(&output.stdout);
    for line in filter(&text, &pids)? {
        writeln!(out, "{line}").context("write to standard output")?;
    }
    Ok(())
}

/// The header and the lines whose PID column holds one of `pids`.
pub fn filter<'a>(ps_output: &'a str, pids: &[i32]) -> Result<Vec<&'a str>> {
    let mut lines = ps_output.lines();
    let header = lines.next().unwrap_or("");
    let Some(col) = header.split_whitespace().position(|t| t == "PID") else {
        return Err(Error::PsNoPidColumn.into());
    };
    let mut out = vec![header];
    for line in lines {
        let pid = line
            .split_whitespace()
            .nth(col)
            .and_then(|p| p.parse::<i32>().ok());
        if pid.is_some_and(|p| pids.contains(&p)) {
            out.push(line);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_header_and_container_lines() {
        let ps = "UID          PID    PPID  C STIME TTY          TIME CMD\n\
                  root           1       0  0 09:00 ?        00:00:01 init\n\
                  root        4242       1  0 09:36 ?        00:00:00 sleep 1000\n\
                  root        4243    4242  0 09:36 ?        00:00:00 sh -c 4242\n";
        let got = filter(ps, &[4242]).unwrap();
        assert_eq!(got.len(), 2);
        assert!(got[0].starts_with("UID"));
        assert!(got[1].ends_with("sleep 1000"));
        // The PID column is found from the header, wherever ps puts it.
        let ps = "  PID COMMAND\n 4243 sh\n 4242 sleep\n";
        assert_eq!(filter(ps, &[4242, 4243]).unwrap().len(), 3);
        assert_eq!(filter(ps, &[]).unwrap(), ["  PID COMMAND"]);
    }

    #[test]
    fn header_without_pid_is_an_error() {
        let e = filter("USER COMMAND\nroot x\n", &[1]).unwrap_err();
        assert!(e.to_string().contains("PID"), "{e}");
    }
}
