//! Bytes → `moat::fuzzing::first_bytes` (what it runs: src/fuzzing.rs).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| moat::fuzzing::first_bytes(data));
