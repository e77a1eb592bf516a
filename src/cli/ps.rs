//! `moat ps [--format table|json] <id> [ps options]` (`container::ps`).

use super::{Global, Result};
use crate::container::ps::{self, Request};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// select one of: table or json
    #[arg(short = 'f', long, default_value = "table")]
    pub format: String,
    pub id: String,
    /// Options for ps(1) (default -ef)
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub ps_args: Vec<String>,
}

impl Args {
    pub fn request(&self) -> Request {
        Request {
            id: self.id.clone(),
            format: self.format.clone(),
            ps_args: self.ps_args.clone(),
        }
    }
}

pub fn run(g: &Global, a: Args) -> Result<i32> {
    ps::ps(&g.context()?, &a.request())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_after_the_id_go_to_ps() {
        use clap::Parser;
        #[derive(Parser)]
        struct T {
            #[command(flatten)]
            a: Args,
        }
        let t = T::try_parse_from(["ps", "-f", "json", "c1"]).unwrap();
        assert_eq!((t.a.format.as_str(), t.a.id.as_str()), ("json", "c1"));
        assert!(t.a.ps_args.is_empty());
        let t = T::try_parse_from(["ps", "c1", "-o", "pid,comm", "-f"]).unwrap();
        assert_eq!(t.a.format, "table");
        assert_eq!(t.a.ps_args, ["-o", "pid,comm", "-f"]);
        let t = T::try_parse_from(["ps", "c1", "aux"]).unwrap();
        assert_eq!(t.a.ps_args, ["aux"]);
    }
}
