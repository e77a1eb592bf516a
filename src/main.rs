//! moat: a hardened, runc-compatible OCI runtime.
#![deny(unsafe_code)]

mod cli;
mod gvisor;
mod linux;
mod log;
mod policy;
mod spec;
mod state;

fn main() {
    std::process::exit(cli::main());
}
