//! Namespace name globs (`team-*`, `ci-??`), as used by cluster managers.

use std::fmt;

use wildmatch::WildMatch;

/// A validated namespace glob: lowercase letters, digits, `-`, `*` (any run) and `?` (one
/// character), at most 63 characters, the same grammar the CRD schema enforces.
#[derive(Clone, Debug)]
pub struct NamespaceGlob {
    source: String,
    matcher: WildMatch,
}

/// A string that is not a namespace glob.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not a namespace glob (lowercase letters, digits, '-', '*' and '?', at most 63 characters, no leading or trailing '-')"
)]
pub struct InvalidGlob(pub String);

impl NamespaceGlob {
    /// Parses a glob, rejecting anything outside the grammar.
    pub fn parse(source: &str) -> Result<Self, InvalidGlob> {
        let allowed =
            |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '*' | '?');
        let valid = !source.is_empty()
            && source.len() <= 63
            && source.chars().all(allowed)
            && !source.starts_with('-')
            && !source.ends_with('-');
        if !valid {
            return Err(InvalidGlob(source.to_owned()));
        }
        Ok(Self {
            source: source.to_owned(),
            matcher: WildMatch::new(source),
        })
    }

    /// True when the glob has no wildcard, so it names exactly one namespace.
    pub fn is_literal(&self) -> bool {
        !self.source.contains(['*', '?'])
    }

    /// True when `namespace` matches.
    pub fn matches(&self, namespace: &str) -> bool {
        self.matcher.matches(namespace)
    }

    /// The glob as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }
}

impl fmt::Display for NamespaceGlob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn star_and_question_mark_match_like_shell_globs() -> Result<(), InvalidGlob> {
        let team = NamespaceGlob::parse("team-*")?;
        assert!(team.matches("team-a"));
        assert!(team.matches("team-"));
        assert!(!team.matches("teams"));
        let ci = NamespaceGlob::parse("ci-??")?;
        assert!(ci.matches("ci-01"));
        assert!(!ci.matches("ci-1"));
        Ok(())
    }

    #[test]
    fn literal_globs_are_recognised() -> Result<(), InvalidGlob> {
        assert!(NamespaceGlob::parse("kube-system")?.is_literal());
        assert!(!NamespaceGlob::parse("kube-*")?.is_literal());
        Ok(())
    }

    #[test]
    fn globs_outside_the_grammar_are_rejected() {
        for bad in [
            "",
            "Team",
            "a/b",
            "[ab]",
            "-x",
            "x-",
            "a b",
            &"a".repeat(64),
        ] {
            assert_eq!(
                NamespaceGlob::parse(bad).err(),
                Some(InvalidGlob(bad.to_owned())),
                "{bad:?}"
            );
        }
    }
}
