//! Bytes → `moat::fuzzing::passwd` (what it runs: src/fuzzing.rs).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| moat::fuzzing::passwd(data));
