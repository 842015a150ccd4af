//! Fuzzes `review`: see `fuzz_checks::review` for the properties checked.
#![no_main]

// The checks live in one file shared with the stable replay test (tests/fuzz_corpus.rs).
#[allow(dead_code)] // each target uses one check
#[path = "../../tests/fuzz_checks/mod.rs"]
mod fuzz_checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_checks::review(data));
