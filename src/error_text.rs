//! How errors read in moat's one-line messages, written once.

use std::io;

/// An I/O error's text without std's " (os error N)" suffix: messages name the file and
/// value already, and runc's users grep for the bare strerror text.
pub fn strerror(e: &io::Error) -> String {
    let s = e.to_string();
    match s.rfind(" (os error ") {
        Some(i) if s.ends_with(')') => s[..i].to_string(),
        _ => s,
    }
}

/// The C library's text for `errno` (its table: no I/O), without the suffix.
pub fn errno_text(errno: i32) -> String {
    strerror(&io::Error::from_raw_os_error(errno))
}

/// An error chain in one line, outermost context first, joined by ": " (Go's `%w` chains
/// read the same, so runc's messages and moat's line up).
pub fn one_line<'a>(
    chain: impl IntoIterator<Item = &'a (dyn std::error::Error + 'static)>,
) -> String {
    chain
        .into_iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strerror_drops_only_stds_suffix() {
        assert_eq!(errno_text(libc::ENOENT), "No such file or directory");
        let custom = io::Error::other("a (os error 2) in the middle");
        assert_eq!(strerror(&custom), "a (os error 2) in the middle");
    }

    #[test]
    fn one_line_joins_outermost_first() {
        let e = anyhow::anyhow!("inner").context("middle").context("outer");
        assert_eq!(one_line(e.chain()), "outer: middle: inner");
        assert_eq!(one_line(e.chain().skip(1)), "middle: inner");
    }
}
