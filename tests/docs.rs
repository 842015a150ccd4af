//! The developer documentation names files that exist: a move that forgets DEVELOPMENT.md's
//! "where to change what" table, or the README's and the design's pointers into the tree,
//! fails here rather than misleading the next contributor.

use std::path::Path;

/// The top-level folders of the repository: a backticked path starting with one of them is a
/// path into the tree (others are URLs, flags, cache folders or placeholders).
const TREE: [&str; 12] = [
    "src/",
    "crates/",
    "tests/",
    "benches/",
    "charts/",
    "certs-tool/",
    "scripts/",
    "docs/",
    "examples/",
    "fuzz/",
    "webhook-config/",
    ".ci/",
];

/// Every backticked path into the tree in `doc` (globs and `<placeholders>` left out).
fn paths_named_in(doc: &str) -> Vec<String> {
    doc.split('`')
        .skip(1)
        .step_by(2)
        .filter(|span| !span.contains(char::is_whitespace))
        .filter(|span| !span.contains(['*', '<', '>']))
        .filter(|span| TREE.iter().any(|top| span.starts_with(top)))
        .map(str::to_owned)
        .collect()
}

fn missing_in(doc: &str) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join(doc)).unwrap_or_default();
    assert!(!text.is_empty(), "{doc} is missing or empty");
    paths_named_in(&text)
        .into_iter()
        .filter(|path| !root.join(path.trim_end_matches(':')).exists())
        .collect()
}

#[test]
fn every_path_in_development_md_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("DEVELOPMENT.md")).unwrap_or_default();
    let named = paths_named_in(&text);
    assert!(
        named.len() > 50,
        "the table names the tree: {}",
        named.len()
    );
    assert_eq!(missing_in("DEVELOPMENT.md"), Vec::<String>::new());
}

#[test]
fn every_path_in_the_readme_and_the_design_exists() {
    for doc in ["README.md", "docs/design.md"] {
        assert_eq!(missing_in(doc), Vec::<String>::new(), "{doc}");
    }
}

#[test]
fn a_renamed_file_is_caught() {
    assert_eq!(
        paths_named_in("| the watch loop | `src/watch.rs` | `--flag` | `src/**/tests.rs` |"),
        vec!["src/watch.rs".to_owned()]
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    assert!(!root.join("src/watch.rs").exists());
}
