//! Go's `path/filepath.Match` on Unix, which the kubelet applies to each dot-separated part of
//! a key's host (`*.example.com`): `*` any run and `?` one character (neither crossing `/`),
//! `[a-z]` / `[^a-z]` classes, `\` escapes. A malformed pattern matches nothing.

/// True when `name` matches `pattern` as `filepath.Match` decides (an error counts as no match).
pub(crate) fn matches(pattern: &str, name: &str) -> bool {
    let mut pattern = pattern;
    let mut name = name;
    'pattern: while !pattern.is_empty() {
        let (star, chunk, rest) = scan_chunk(pattern);
        pattern = rest;
        if star && chunk.is_empty() {
            return !name.contains('/');
        }
        match match_chunk(chunk, name) {
            Err(BadPattern) => return false,
            Ok(Some(left)) if left.is_empty() || !pattern.is_empty() => {
                name = left;
                continue;
            }
            Ok(_) => {}
        }
        if star {
            for (i, c) in name.char_indices() {
                if c == '/' {
                    break;
                }
                // Go steps byte by byte; starting inside a character can never match a
                // chunk that is valid UTF-8, so stepping by characters is the same.
                let after = &name[i + c.len_utf8()..];
                match match_chunk(chunk, after) {
                    Err(BadPattern) => return false,
                    Ok(Some(left)) => {
                        if pattern.is_empty() && !left.is_empty() {
                            continue;
                        }
                        name = left;
                        continue 'pattern;
                    }
                    Ok(None) => {}
                }
            }
        }
        return false;
    }
    name.is_empty()
}

struct BadPattern;

fn scan_chunk(pattern: &str) -> (bool, &str, &str) {
    let trimmed = pattern.trim_start_matches('*');
    let star = trimmed.len() != pattern.len();
    let bytes = trimmed.as_bytes();
    let mut in_range = false;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if i + 1 < bytes.len() => i += 1,
            b'[' => in_range = true,
            b']' => in_range = false,
            b'*' if !in_range => return (star, &trimmed[..i], &trimmed[i..]),
            _ => {}
        }
        i += 1;
    }
    (star, trimmed, "")
}

/// Matches one chunk at the start of `s`: `Ok(Some(rest))` on a match, `Ok(None)` on a
/// mismatch, `Err` when the chunk is malformed (checked even after a mismatch, as Go does).
fn match_chunk<'a>(chunk: &str, s: &'a str) -> Result<Option<&'a str>, BadPattern> {
    let mut chunk = chunk;
    let mut s = s;
    let mut failed = false;
    while let Some(first) = chunk.chars().next() {
        failed = failed || s.is_empty();
        match first {
            '[' => {
                let mut r = '\0';
                if !failed {
                    let mut chars = s.chars();
                    r = chars.next().unwrap_or('\0');
                    s = chars.as_str();
                }
                chunk = &chunk[1..];
                let negated = chunk.starts_with('^');
                if negated {
                    chunk = &chunk[1..];
                }
                let mut matched = false;
                let mut ranges = 0;
                loop {
                    if chunk.starts_with(']') && ranges > 0 {
                        chunk = &chunk[1..];
                        break;
                    }
                    let (lo, rest) = get_escaped(chunk)?;
                    chunk = rest;
                    let mut hi = lo;
                    if let Some(after_dash) = chunk.strip_prefix('-') {
                        let (high, rest) = get_escaped(after_dash)?;
                        hi = high;
                        chunk = rest;
                    }
                    matched = matched || (lo <= r && r <= hi);
                    ranges += 1;
                }
                failed = failed || matched == negated;
            }
            '?' => {
                if !failed {
                    let mut chars = s.chars();
                    failed = chars.next() == Some('/');
                    s = chars.as_str();
                }
                chunk = &chunk[1..];
            }
            _ => {
                let literal_chunk = if first == '\\' {
                    let rest = &chunk[1..];
                    if rest.is_empty() {
                        return Err(BadPattern);
                    }
                    rest
                } else {
                    chunk
                };
                let mut chars = literal_chunk.chars();
                let literal = chars.next().unwrap_or('\0');
                if !failed {
                    let mut name_chars = s.chars();
                    failed = name_chars.next() != Some(literal);
                    s = name_chars.as_str();
                }
                chunk = chars.as_str();
            }
        }
    }
    Ok(if failed { None } else { Some(s) })
}

/// One possibly escaped character of a class; Go's `getEsc`.
fn get_escaped(chunk: &str) -> Result<(char, &str), BadPattern> {
    let mut chars = chunk.chars();
    let mut c = chars.next().ok_or(BadPattern)?;
    if c == '-' || c == ']' {
        return Err(BadPattern);
    }
    if c == '\\' {
        c = chars.next().ok_or(BadPattern)?;
    }
    let rest = chars.as_str();
    if rest.is_empty() {
        return Err(BadPattern);
    }
    Ok((c, rest))
}

#[cfg(test)]
mod tests {
    use super::matches;

    /// Cases from Go's `path/filepath` match tests that can occur in a host part.
    #[test]
    fn matches_like_go_filepath_match() {
        let cases = [
            ("abc", "abc", true),
            ("*", "abc", true),
            ("*c", "abc", true),
            ("a*", "a", true),
            ("a*", "abc", true),
            ("a*", "ab/c", false),
            ("a*/b", "abc/b", true),
            ("a*b*c*d*e*/f", "axbxcxdxe/f", true),
            ("a*b?c*x", "abxbbxdbxebxczzx", true),
            ("a*b?c*x", "abxbbxdbxebxczzy", false),
            ("ab[c]", "abc", true),
            ("ab[b-d]", "abc", true),
            ("ab[e-g]", "abc", false),
            ("ab[^c]", "abc", false),
            ("ab[^b-d]", "abc", false),
            ("ab[^e-g]", "abc", true),
            ("a\\*b", "a*b", true),
            ("a\\*b", "ab", false),
            ("a?b", "a☺b", true),
            ("a[^a]b", "a☺b", true),
            ("a???b", "a☺b", false),
            ("a[^a][^a][^a]b", "a☺b", false),
            ("[a-ζ]*", "α", true),
            ("*[a-ζ]", "A", false),
            ("a?b", "a/b", false),
            ("a*b", "a/b", false),
            ("[\\]a]", "]", true),
            ("[\\-]", "-", true),
            ("[x\\-]", "x", true),
            ("[x\\-]", "-", true),
            ("[x\\-]", "z", false),
            ("[\\-x]", "x", true),
            ("[\\-x]", "a", false),
            ("[]a]", "]", false),
            ("[-]", "-", false),
            ("[x-]", "x", false),
            ("[-x]", "x", false),
            ("\\", "a", false),
            ("[a-b-c]", "a", false),
            ("[", "a", false),
            ("[^", "a", false),
            ("[^bc", "a", false),
            ("a[", "a", false),
            ("a[", "ab", false),
            ("a[", "x", false),
            ("a/b[", "x", false),
            ("*x", "xxx", true),
        ];
        for (pattern, name, expected) in cases {
            assert_eq!(
                matches(pattern, name),
                expected,
                "{pattern:?} against {name:?}"
            );
        }
    }
}
