//! `WWW-Authenticate` challenges (RFC 7235 §4.1): which scheme a registry asks for, and for
//! Bearer, where its token service is.
//!
//! ```text
//!   WWW-Authenticate: Basic realm="x", Bearer realm="https://auth.example.com/token",service="reg"
//!                     └─ challenge ──┘  └─ challenge: scheme, then auth-params ──────────────────┘
//! ```
//!
//! The grammar is parsed in full (quoted strings with `\"` escapes, unquoted tokens, token68,
//! empty list elements, several challenges in one value, several values); anything else is an
//! error, never a guess and never a panic. Bearer is chosen when offered, else Basic.

/// One challenge: a scheme and its parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Challenge {
    /// The scheme as written (`Basic`, `bearer`, `Negotiate`…); compared case-insensitively.
    pub scheme: String,
    /// The auth-params, names lowercased (they are case-insensitive), in order.
    pub params: Vec<(String, String)>,
    /// A token68 in place of the params (`Negotiate YIIB…`), when given.
    pub token68: Option<String>,
}

impl Challenge {
    /// The value of the parameter `name` (lowercase).
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What the registry asks for, as the check uses it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Auth {
    /// `Basic`: send the credential to the registry itself.
    Basic,
    /// `Bearer`: ask the token service at `realm` for a token with the credential.
    Bearer {
        /// The token service's URL, as the registry wrote it (not yet checked to be https).
        realm: String,
        /// The `service` parameter, passed on to the token service.
        service: Option<String>,
    },
}

/// Why a `WWW-Authenticate` header could not be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChallengeError {
    /// Not RFC 7235 syntax; says at which byte.
    #[error("malformed WWW-Authenticate header at byte {at}: {what}")]
    Malformed {
        /// The byte offset in the header value.
        at: usize,
        /// What was expected there.
        what: &'static str,
    },
    /// A parameter given twice in one challenge (RFC 7235 §2.1 forbids it).
    #[error("WWW-Authenticate parameter {0:?} given twice in one challenge")]
    Duplicate(String),
    /// A header value that is not visible ASCII.
    #[error("WWW-Authenticate header is not visible ASCII")]
    NotAscii,
    /// No `WWW-Authenticate` header at all.
    #[error("no WWW-Authenticate header")]
    Missing,
    /// Only schemes other than Basic and Bearer.
    #[error("WWW-Authenticate offers neither Basic nor Bearer")]
    NoUsableScheme,
    /// A Bearer challenge without `realm`.
    #[error("WWW-Authenticate Bearer challenge without a realm")]
    NoRealm,
}

/// Parses one `WWW-Authenticate` header value into its challenges.
pub fn parse(value: &str) -> Result<Vec<Challenge>, ChallengeError> {
    let mut cursor = Cursor {
        bytes: value.as_bytes(),
        at: 0,
    };
    let mut challenges = Vec::new();
    loop {
        cursor.skip_list_separators();
        if cursor.done() {
            return Ok(challenges);
        }
        challenges.push(cursor.challenge()?);
        // A challenge ends at the end or at a comma.
        cursor.skip_ows();
        if !cursor.done() && cursor.peek() != Some(b',') {
            return Err(cursor.malformed("a comma between challenges"));
        }
    }
}

/// Chooses from all `WWW-Authenticate` values of one answer: Bearer if any challenge offers
/// it, else Basic. Any malformed value is an error.
pub fn choose<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> Result<Auth, ChallengeError> {
    let mut challenges = Vec::new();
    let mut any = false;
    for value in values {
        any = true;
        let text = std::str::from_utf8(value).map_err(|_| ChallengeError::NotAscii)?;
        if !text
            .bytes()
            .all(|b| b == b'\t' || (b' '..=b'~').contains(&b))
        {
            return Err(ChallengeError::NotAscii);
        }
        challenges.extend(parse(text)?);
    }
    if !any {
        return Err(ChallengeError::Missing);
    }
    let scheme = |name: &str| {
        challenges
            .iter()
            .find(|c| c.scheme.eq_ignore_ascii_case(name))
    };
    if let Some(bearer) = scheme("Bearer") {
        let realm = bearer.param("realm").ok_or(ChallengeError::NoRealm)?;
        return Ok(Auth::Bearer {
            realm: realm.to_owned(),
            service: bearer.param("service").map(str::to_owned),
        });
    }
    if scheme("Basic").is_some() {
        return Ok(Auth::Basic);
    }
    Err(ChallengeError::NoUsableScheme)
}

struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn done(&self) -> bool {
        self.at >= self.bytes.len()
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn malformed(&self, what: &'static str) -> ChallengeError {
        ChallengeError::Malformed { at: self.at, what }
    }

    fn skip_ows(&mut self) -> usize {
        let start = self.at;
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.at += 1;
        }
        self.at - start
    }

    /// Empty list elements are allowed (RFC 7230 §7): `, ,Basic`.
    fn skip_list_separators(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b',')) {
            self.at += 1;
        }
    }

    fn token(&mut self) -> Option<&'a str> {
        let start = self.at;
        while self.peek().is_some_and(is_tchar) {
            self.at += 1;
        }
        (self.at > start)
            .then(|| std::str::from_utf8(&self.bytes[start..self.at]).ok())
            .flatten()
    }

    fn challenge(&mut self) -> Result<Challenge, ChallengeError> {
        let scheme = self
            .token()
            .ok_or_else(|| self.malformed("an auth-scheme"))?
            .to_owned();
        let mut challenge = Challenge {
            scheme,
            params: Vec::new(),
            token68: None,
        };
        let spaces = self.skip_ows();
        if self.done() || self.peek() == Some(b',') {
            return Ok(challenge);
        }
        if spaces == 0 {
            return Err(self.malformed("a space after the auth-scheme"));
        }
        if let Some(token68) = self.token68() {
            challenge.token68 = Some(token68);
            return Ok(challenge);
        }
        loop {
            let (name, value) = self.param()?;
            if challenge.param(&name).is_some() {
                return Err(ChallengeError::Duplicate(name));
            }
            challenge.params.push((name, value));
            // After a param: the end, or a comma and then another param or the next challenge.
            self.skip_ows();
            if self.done() {
                return Ok(challenge);
            }
            if self.peek() != Some(b',') {
                return Err(self.malformed("a comma after an auth-param"));
            }
            let comma = self.at;
            self.skip_list_separators();
            if self.done() || !self.starts_param() {
                // The next challenge (or trailing commas): leave it to the caller.
                self.at = comma;
                return Ok(challenge);
            }
        }
    }

    /// Whether a `name =` starts here (else a new challenge does).
    fn starts_param(&mut self) -> bool {
        let start = self.at;
        let is_param = self.token().is_some() && {
            self.skip_ows();
            self.peek() == Some(b'=')
        };
        self.at = start;
        is_param
    }

    /// A token68 up to the end or a comma, or nothing (and the cursor unmoved).
    fn token68(&mut self) -> Option<String> {
        let start = self.at;
        while self.peek().is_some_and(is_token68_char) {
            self.at += 1;
        }
        let chars_end = self.at;
        while self.peek() == Some(b'=') {
            self.at += 1;
        }
        self.skip_ows();
        if chars_end > start && (self.done() || self.peek() == Some(b',')) {
            let text = std::str::from_utf8(&self.bytes[start..chars_end]).ok()?;
            let equals = self.bytes[chars_end..]
                .iter()
                .take_while(|b| **b == b'=')
                .count();
            return Some(format!("{text}{}", "=".repeat(equals)));
        }
        self.at = start;
        None
    }

    fn param(&mut self) -> Result<(String, String), ChallengeError> {
        let name = self
            .token()
            .ok_or_else(|| self.malformed("an auth-param name"))?
            .to_ascii_lowercase();
        self.skip_ows();
        if self.peek() != Some(b'=') {
            return Err(self.malformed("'=' after an auth-param name"));
        }
        self.at += 1;
        self.skip_ows();
        let value = if self.peek() == Some(b'"') {
            self.quoted()?
        } else {
            self.token()
                .ok_or_else(|| self.malformed("a token or a quoted string"))?
                .to_owned()
        };
        Ok((name, value))
    }

    /// A quoted-string, unescaped; the cursor is on the opening quote.
    fn quoted(&mut self) -> Result<String, ChallengeError> {
        self.at += 1;
        let mut value = Vec::new();
        loop {
            match self.peek() {
                None => return Err(self.malformed("a closing quote")),
                Some(b'"') => {
                    self.at += 1;
                    return String::from_utf8(value).map_err(|_| ChallengeError::NotAscii);
                }
                Some(b'\\') => {
                    self.at += 1;
                    match self.peek() {
                        Some(b) if b == b'\t' || b >= b' ' && b != 0x7f => value.push(b),
                        _ => return Err(self.malformed("a character after '\\'")),
                    }
                    self.at += 1;
                }
                Some(b) if b == b'\t' || b >= b' ' && b != 0x7f => {
                    value.push(b);
                    self.at += 1;
                }
                Some(_) => return Err(self.malformed("a visible character in a quoted string")),
            }
        }
    }
}

/// RFC 7230 §3.2.6 tchar.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// RFC 7235 §2.1 token68 (without its trailing `=`s).
fn is_token68_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~+/".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn one(value: &str) -> Result<Auth, ChallengeError> {
        choose([value.as_bytes()])
    }

    fn bearer(realm: &str, service: Option<&str>) -> Auth {
        Auth::Bearer {
            realm: realm.to_owned(),
            service: service.map(str::to_owned),
        }
    }

    #[test]
    fn basic_alone_and_in_any_case_is_basic() {
        assert_eq!(one("Basic"), Ok(Auth::Basic));
        assert_eq!(one(r#"Basic realm="Registry Realm""#), Ok(Auth::Basic));
        assert_eq!(one(r#"bAsIc realm="x", charset="UTF-8""#), Ok(Auth::Basic));
    }

    #[test]
    fn bearer_gives_realm_and_service() {
        assert_eq!(
            one(r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io""#),
            Ok(bearer(
                "https://auth.docker.io/token",
                Some("registry.docker.io")
            ))
        );
        assert_eq!(
            one(r#"BEARER Realm = "https://a/t" , SERVICE=reg.example"#),
            Ok(bearer("https://a/t", Some("reg.example")))
        );
        assert_eq!(
            one(r#"Bearer realm="https://a""#),
            Ok(bearer("https://a", None))
        );
    }

    #[test]
    fn bearer_is_preferred_over_basic_in_one_value_or_across_values() {
        assert_eq!(
            one(r#"Basic realm="x", Bearer realm="https://a",service="b""#),
            Ok(bearer("https://a", Some("b")))
        );
        assert_eq!(
            choose([
                &b"Basic realm=\"x\""[..],
                &b"Bearer realm=\"https://a\",scope=\"repository:x:pull\""[..],
            ]),
            Ok(bearer("https://a", None))
        );
        assert_eq!(
            one(r#"Negotiate YIIBhg==, Basic realm="x""#),
            Ok(Auth::Basic)
        );
    }

    #[test]
    fn quoted_strings_unescape_and_keep_commas_and_equals() {
        let challenges =
            parse(r#"Bearer realm="https://a/t?x=1,y=\"2\"\\", service="s p""#).unwrap_or_default();
        assert_eq!(challenges.len(), 1);
        assert_eq!(
            challenges[0].param("realm"),
            Some(r#"https://a/t?x=1,y="2"\"#)
        );
        assert_eq!(challenges[0].param("service"), Some("s p"));
    }

    #[test]
    fn several_challenges_with_params_and_empty_elements_split_right() {
        let challenges =
            parse(r#" , Basic realm="x",, Newauth realm="y", title=t , Bearer realm="z""#)
                .unwrap_or_default();
        let schemes: Vec<_> = challenges.iter().map(|c| c.scheme.as_str()).collect();
        assert_eq!(schemes, ["Basic", "Newauth", "Bearer"]);
        assert_eq!(challenges[1].param("title"), Some("t"));
        assert_eq!(challenges[2].param("realm"), Some("z"));
    }

    #[test]
    fn token68_is_a_challenge_of_its_own() {
        let challenges = parse("Negotiate a+b/c==, Basic").unwrap_or_default();
        assert_eq!(challenges.len(), 2);
        assert_eq!(challenges[0].token68.as_deref(), Some("a+b/c=="));
        assert_eq!(challenges[1].scheme, "Basic");
    }

    #[test]
    fn malformed_values_are_errors() {
        for bad in [
            r#"Bearer realm="https://a"#,      // unterminated quote
            r#"Bearer realm=https://a"#,       // ':' and '/' are not tchar
            r#"Bearer realm="a" service="b""#, // missing comma
            r#"Bearer realm="#,                // no value
            r#"Bearer realm= , service="b""#,  // empty value
            r#"Basic"x""#,                     // no space after the scheme
            r#"Bearer realm="a",realm="b""#,   // duplicate
            r#"Bearer realm="a\"#,             // dangling escape
            "=Bearer",                         // no scheme
            "Bearer realm=\"a\u{7f}\"",        // DEL in a quoted string
            "Bearer realm=\"caf\u{e9}\"",      // not ASCII
        ] {
            assert!(one(bad).is_err(), "{bad:?} was accepted: {:?}", one(bad));
        }
    }

    #[test]
    fn unusable_answers_are_errors() {
        assert_eq!(choose(Vec::<&[u8]>::new()), Err(ChallengeError::Missing));
        assert_eq!(one(""), Err(ChallengeError::NoUsableScheme));
        assert_eq!(
            one("Digest realm=\"x\", nonce=\"y\""),
            Err(ChallengeError::NoUsableScheme)
        );
        assert_eq!(one("Bearer service=\"x\""), Err(ChallengeError::NoRealm));
        assert_eq!(one("Bearer"), Err(ChallengeError::NoRealm));
        assert_eq!(choose([&b"Basic \xff"[..]]), Err(ChallengeError::NotAscii));
    }

    fn quote(value: &str) -> String {
        let mut out = String::from("\"");
        for c in value.chars() {
            if c == '"' || c == '\\' {
                out.push('\\');
            }
            out.push(c);
        }
        out.push('"');
        out
    }

    proptest! {
        #[test]
        fn arbitrary_input_never_panics(value in any::<String>()) {
            let _ = choose([value.as_bytes()]);
        }

        #[test]
        fn arbitrary_header_like_input_never_panics(value in r#"[ \t,="\\A-Za-z0-9/:.+~-]{0,60}"#) {
            let _ = choose([value.as_bytes()]);
        }

        #[test]
        fn quoted_realm_and_service_round_trip(
            realm in "[ -~]{1,40}",
            service in "[ -~]{0,40}",
            first in prop::bool::ANY,
        ) {
            let bearer_value = format!("Bearer realm={}, service={}", quote(&realm), quote(&service));
            let value = if first {
                format!("{bearer_value}, Basic realm=\"x\"")
            } else {
                format!("Basic realm=\"x\", {bearer_value}")
            };
            prop_assert_eq!(
                choose([value.as_bytes()]),
                Ok(Auth::Bearer { realm, service: Some(service) })
            );
        }
    }
}
