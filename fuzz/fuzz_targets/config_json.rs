//! Bytes → `moat::fuzzing::config_json` (what it runs: src/fuzzing.rs).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| moat::fuzzing::config_json(data));
