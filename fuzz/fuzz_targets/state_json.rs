//! Bytes → `moat::fuzzing::state_json` (what it runs: src/fuzzing.rs).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| moat::fuzzing::state_json(data));
