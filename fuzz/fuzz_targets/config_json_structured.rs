//! The default spec with edits at the fields create reads (moat_fuzz::spec_edits), so most
//! inputs get past serde into validation and the policy: `moat::fuzzing::config_json`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mut u = arbitrary::Unstructured::new(data);
    if let Ok(bytes) = moat_fuzz::spec_edits(&mut u) {
        moat::fuzzing::config_json(&bytes);
    }
});
