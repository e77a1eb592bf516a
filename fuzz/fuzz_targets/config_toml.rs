//! Bytes → `moat::fuzzing::config_toml` (what it runs: src/fuzzing.rs).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| moat::fuzzing::config_toml(data));
