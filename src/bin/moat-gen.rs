//! `moat-gen OUTDIR`: moat's man pages (`moat.1`, one `moat-SUB.1` per subcommand) and
//! its bash, zsh and fish completions, generated from the clap definitions moat parses
//! with. Built only with `--features gen` (the package build, `scripts/package`), so
//! clap_mangen and clap_complete never reach the moat binary.

use std::path::PathBuf;

fn main() -> std::io::Result<()> {
    let out = PathBuf::from(std::env::args_os().nth(1).expect("usage: moat-gen OUTDIR"));
    let man = out.join("man");
    let comp = out.join("completions");
    std::fs::create_dir_all(&man)?;
    std::fs::create_dir_all(&comp)?;
    let cmd = moat::entry::command()
        .version(env!("CARGO_PKG_VERSION"))
        .long_about(
            "moat is a hardened, runc-compatible OCI runtime: container engines call it as \
             they call runc (the same global flags, subcommands, exit codes and state JSON). \
             The plain lifecycle calls (create, start, state, kill, delete) are parsed by a \
             fast parser that accepts a subset of what is documented here. Its policy is read \
             from /etc/moat/config.toml (see /usr/share/doc/moat).",
        );
    let render = |c: clap::Command, name: &str| -> std::io::Result<()> {
        let mut buf = Vec::new();
        clap_mangen::Man::new(c).render(&mut buf)?;
        std::fs::write(man.join(format!("{name}.1")), buf)
    };
    render(cmd.clone(), "moat")?;
    for sub in cmd.get_subcommands() {
        // clap takes a 'static name without its `string` feature; a one-shot generator.
        let name: &'static str = Box::leak(format!("moat-{}", sub.get_name()).into_boxed_str());
        render(sub.clone().name(name), name)?;
    }
    for shell in [
        clap_complete::Shell::Bash,
        clap_complete::Shell::Zsh,
        clap_complete::Shell::Fish,
    ] {
        let mut c = cmd.clone();
        clap_complete::generate_to(shell, &mut c, "moat", &comp)?;
    }
    Ok(())
}
