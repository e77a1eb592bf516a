//! Annotation maps (keys mostly moat's own, values anything) → the policy, through
//! `moat::fuzzing::annotations`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mut u = arbitrary::Unstructured::new(data);
    if let Ok(a) = moat_fuzz::annotations(&mut u) {
        moat::fuzzing::annotations(&a);
    }
});
