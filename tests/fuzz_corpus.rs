//! Replays the committed fuzz corpora on stable: every file of `fuzz/corpus/<target>/` (and
//! of `fuzz/regressions/<target>/`, if present) goes through the same checks the cargo-fuzz
//! targets make, so CI keeps what fuzzing found without nightly or libFuzzer. Then a short
//! mutation smoke run per target: inputs mutated from the corpus (bit flips, interesting
//! bytes, cut, duplicated and spliced ranges) for `CHEIRON_FUZZ_SMOKE_SECONDS` (default 2)
//! each, from a seed printed on failure and settable with `CHEIRON_FUZZ_SEED`. See
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

/// A small xorshift generator: the smoke run needs reproducible, not good, randomness.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number below `n` (`n` > 0).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Bytes that matter to the parsers under test: JSON and YAML structure, glob syntax, escapes.
const INTERESTING: &[u8] = b"\0\xff\"{}[],:\\*?/-. \n\t#&!|>'";

/// One mutation of `input`, sometimes spliced with `other`.
fn mutate(rng: &mut Rng, input: &[u8], other: &[u8]) -> Vec<u8> {
    let mut out = input.to_vec();
    for _ in 0..=rng.below(4) {
        let len = out.len();
        match rng.below(6) {
            0 if len > 0 => {
                let i = rng.below(len);
                out[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                out[i] = INTERESTING[rng.below(INTERESTING.len())];
            }
            2 if len > 0 => {
                let start = rng.below(len);
                let end = (start + 1 + rng.below(16)).min(len);
                out.drain(start..end);
            }
            3 if len > 0 => {
                let start = rng.below(len);
                let end = (start + 1 + rng.below(64)).min(len);
                let copy = out[start..end].to_vec();
                let at = rng.below(len + 1);
                out.splice(at..at, copy);
            }
            4 if !other.is_empty() => {
                let cut = rng.below(len + 1);
                let from = rng.below(other.len());
                out.truncate(cut);
                out.extend_from_slice(&other[from..]);
            }
            _ => {
                let at = rng.below(len + 1);
                out.insert(at, INTERESTING[rng.below(INTERESTING.len())]);
            }
        }
    }
    out
}

fn smoke_seconds() -> f64 {
    std::env::var("CHEIRON_FUZZ_SMOKE_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0)
}

fn seed() -> u64 {
    std::env::var("CHEIRON_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
                | 1
        })
}

/// Runs `check` on mutations of the corpus of `target` for [`smoke_seconds`]; a failing input
/// is written to `target/fuzz-smoke/` and named in the failure with the seed.
fn smoke(target: &str, check: fn(&[u8])) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let corpus: Vec<Vec<u8>> = files(&root.join("corpus").join(target))
        .iter()
        .filter_map(|p| fs::read(p).ok())
        .collect();
    assert!(
        !corpus.is_empty(),
        "fuzz/corpus/{target}/ is missing or empty"
    );
    let seed = seed();
    let mut rng = Rng(seed);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs_f64(smoke_seconds());
    let mut runs = 0u64;
    let mut failure = None;
    while std::time::Instant::now() < deadline {
        let (first, second) = (rng.below(corpus.len()), rng.below(corpus.len()));
        let input = mutate(&mut rng, &corpus[first], &corpus[second]);
        runs += 1;
        if catch_unwind(AssertUnwindSafe(|| check(&input))).is_err() {
            failure = Some(input);
            break;
        }
    }
    let saved = failure.map(|input| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/fuzz-smoke");
        let _ = fs::create_dir_all(&dir);
        let path = dir.join(format!("{target}-{seed}"));
        let _ = fs::write(&path, &input);
        path.display().to_string()
    });
    assert!(
        saved.is_none(),
        "{target}: mutation {runs} of the smoke run (CHEIRON_FUZZ_SEED={seed}) fails the check; \
         the input is in {path} (reproduce with `cargo +nightly fuzz run {target} {path}`)",
        path = saved.as_deref().unwrap_or_default()
    );
    assert!(runs > 0, "{target}: the smoke run ran nothing");
    eprintln!("{target}: {runs} mutated inputs passed (seed {seed})");
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

#[test]
fn review_mutations_pass_the_same_checks() {
    smoke("review", fuzz_checks::review);
}

#[test]
fn patch_mutations_pass_the_same_checks() {
    smoke("patch", fuzz_checks::patch);
}

#[test]
fn dockerconfig_mutations_pass_the_same_checks() {
    smoke("dockerconfig", fuzz_checks::dockerconfig);
}

#[test]
fn glob_mutations_pass_the_same_checks() {
    smoke("glob", fuzz_checks::glob);
}

#[test]
fn manager_mutations_pass_the_same_checks() {
    smoke("manager", fuzz_checks::manager);
}
