//! moat-criu: moat's CRIU client, a program of its own.
//!
//! moat runs it (next to its own binary) for each conversation with CRIU: one JSON request
//! on stdin, one JSON reply on stdout (`src/linux/criu/wire.rs`). It speaks CRIU's RPC to a
//! `criu swrk` it starts, through the `rust-criu` crate. Keeping the crate's generated
//! protobuf code and the protobuf runtime out of `moat` keeps them off the start-up cost of
//! every container that is never checkpointed.

#[path = "../linux/criu/wire.rs"]
mod wire;

use std::io::{Read, Write};

use wire::{Answer, Reply, Request};

fn main() {
    let mut input = String::new();
    let reply: Reply = match std::io::stdin().read_to_string(&mut input) {
        Ok(_) => match serde_json::from_str::<Request>(&input) {
            Ok(req) => run(req),
            Err(e) => Err(format!("moat-criu: bad request: {e}")),
        },
        Err(e) => Err(format!("moat-criu: read the request: {e}")),
    };
    let out = serde_json::to_vec(&reply).unwrap_or_default();
    let _ = std::io::stdout().write_all(&out);
}

fn run(req: Request) -> Reply {
    match req {
        Request::Version { criu } => version(criu),
    }
}

/// CRIU's `VERSION` answer as `major.minor.sublevel`; rust-criu folds it into one number
/// (`major * 10000 + minor * 100 + sublevel`, a git build counted as the next minor).
fn version(criu: String) -> Reply {
    let mut c = rust_criu::Criu::new_with_criu_path(criu.clone())
        .map_err(|e| format!("criu {criu}: {e}"))?;
    let v = c
        .get_criu_version()
        .map_err(|e| format!("criu {criu}: version: {e}"))?;
    Ok(Answer::Version(format!(
        "{}.{}.{}",
        v / 10000,
        v / 100 % 100,
        v % 100
    )))
}
