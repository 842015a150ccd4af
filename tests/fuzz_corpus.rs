//! Replays the committed fuzz corpora on stable: every file of `fuzz/corpus/<target>/` (and
//! of `fuzz/regressions/<target>/`, if present) goes through the same checks the cargo-fuzz
//! targets make, so CI keeps what fuzzing found without nightly or libFuzzer. See
//! docs/fuzzing.md.

use std::{
    fs,
    panic::{AssertUnwindSafe, catch_unwind},
    path::{Path, PathBuf},
};

// The one copy of the checks, shared with fuzz/fuzz_targets/*.rs.
mod fuzz_checks;

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    files
}

/// Runs `check` on every input of `target`; fails naming each input that fails, and when the
/// corpus is missing or empty.
fn replay(target: &str, check: fn(&[u8])) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let corpus = files(&root.join("corpus").join(target));
    assert!(
        !corpus.is_empty(),
        "fuzz/corpus/{target}/ is missing or empty: run `cargo +nightly fuzz run {target}` (docs/fuzzing.md)"
    );
    let regressions = files(&root.join("regressions").join(target));
    let mut failed = Vec::new();
    for path in corpus.iter().chain(&regressions) {
        match fs::read(path) {
            Ok(data) if catch_unwind(AssertUnwindSafe(|| check(&data))).is_ok() => {}
            Ok(_) => failed.push(path.display().to_string()),
            Err(e) => failed.push(format!("{}: {e}", path.display())),
        }
    }
    assert!(
        failed.is_empty(),
        "{target}: {} of {} inputs fail (reproduce with `cargo +nightly fuzz run {target} <file>`): {failed:#?}",
        failed.len(),
        corpus.len() + regressions.len()
    );
}

#[test]
fn review_corpus_is_answered_allowed_with_patches_that_apply_once() {
    replay("review", fuzz_checks::review);
}

#[test]
fn patch_corpus_patches_apply_keep_entries_and_are_idempotent() {
    replay("patch", fuzz_checks::patch);
}

#[test]
fn dockerconfig_corpus_round_trips_and_errors_quote_no_credential() {
    replay("dockerconfig", fuzz_checks::dockerconfig);
}

#[test]
fn glob_corpus_compiles_exactly_the_grammar_and_matches_like_a_shell_glob() {
    replay("glob", fuzz_checks::glob);
}

#[test]
fn manager_corpus_validates_and_compiles_without_panicking() {
    replay("manager", fuzz_checks::manager);
}
