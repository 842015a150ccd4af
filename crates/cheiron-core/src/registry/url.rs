//! The part of Go's `net/url.Parse` the kubelet's keyring relies on: how a key or an image name
//! written as `https://…` splits into host and path, and which strings fail to parse (the kubelet
//! skips such a key). Go 1.24 semantics, the toolchain of the kubelets this is checked against.

/// A parsed `https://` or `http://` URL: only the fields the keyring reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Url {
    /// `url.Host`: host and optional `:port`, percent-decoded.
    pub(crate) host: String,
    /// `url.Path`: percent-decoded, without query and fragment.
    pub(crate) path: String,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Host,
    Zone,
    Path,
    UserPassword,
    Fragment,
}

/// Parses `raw`, which starts with a scheme and `//` (the kubelet adds `https://` when missing).
/// The error is Go's message, close enough to tell a user why the kubelet ignores the key.
pub(crate) fn parse(raw: &str) -> Result<Url, String> {
    if raw.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return Err("net/url: invalid control character in URL".to_owned());
    }
    let (before_fragment, fragment) = raw.split_once('#').unwrap_or((raw, ""));
    let Some((_scheme, rest)) = before_fragment.split_once(':') else {
        return Err("missing protocol scheme".to_owned());
    };
    let rest = if rest.ends_with('?') && rest.matches('?').count() == 1 {
        &rest[..rest.len() - 1]
    } else {
        rest.split_once('?').map_or(rest, |(path, _query)| path)
    };
    let (host, path) = match rest.strip_prefix("//") {
        Some(after) => {
            let (authority, path) = match after.find('/') {
                Some(i) => after.split_at(i),
                None => (after, ""),
            };
            (parse_authority(authority)?, path)
        }
        None => (String::new(), rest),
    };
    let path = unescape(path, Mode::Path)?;
    unescape(fragment, Mode::Fragment)?;
    Ok(Url { host, path })
}

fn parse_authority(authority: &str) -> Result<String, String> {
    let Some(at) = authority.rfind('@') else {
        return parse_host(authority);
    };
    let host = parse_host(&authority[at + 1..])?;
    let userinfo = &authority[..at];
    if !userinfo.chars().all(valid_userinfo_char) {
        return Err("net/url: invalid userinfo".to_owned());
    }
    match userinfo.split_once(':') {
        Some((user, password)) => {
            unescape(user, Mode::UserPassword)?;
            unescape(password, Mode::UserPassword)?;
        }
        None => {
            unescape(userinfo, Mode::UserPassword)?;
        }
    }
    Ok(host)
}

fn valid_userinfo_char(c: char) -> bool {
    c.is_ascii_alphanumeric()
        || matches!(
            c,
            '-' | '.'
                | '_'
                | ':'
                | '~'
                | '!'
                | '$'
                | '&'
                | '\''
                | '('
                | ')'
                | '*'
                | '+'
                | ','
                | ';'
                | '='
                | '%'
                | '@'
        )
}

fn parse_host(host: &str) -> Result<String, String> {
    if host.starts_with('[') {
        let Some(close) = host.rfind(']') else {
            return Err("missing ']' in host".to_owned());
        };
        let colon_port = &host[close + 1..];
        if !valid_optional_port(colon_port) {
            return Err(format!("invalid port {colon_port:?} after host"));
        }
        if let Some(zone) = host[..close].find("%25") {
            let address = unescape(&host[..zone], Mode::Host)?;
            let zone_part = unescape(&host[zone..close], Mode::Zone)?;
            let tail = unescape(&host[close..], Mode::Host)?;
            return Ok(address + &zone_part + &tail);
        }
    } else if let Some(colon) = host.rfind(':') {
        let colon_port = &host[colon..];
        if !valid_optional_port(colon_port) {
            return Err(format!("invalid port {colon_port:?} after host"));
        }
    }
    unescape(host, Mode::Host)
}

fn valid_optional_port(port: &str) -> bool {
    match port.strip_prefix(':') {
        None => port.is_empty(),
        Some(digits) => digits.bytes().all(|b| b.is_ascii_digit()),
    }
}

/// Go's `shouldEscape` for hosts: what may appear in a host unescaped.
fn host_byte_allowed(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'-' | b'_'
                | b'.'
                | b'~'
                | b'!'
                | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
                | b':'
                | b'['
                | b']'
                | b'<'
                | b'>'
                | b'"'
        )
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Go's `unescape`: checks every escape (and, in a host, every byte), then decodes `%XX`.
fn unescape(s: &str, mode: Mode) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%' {
            let escape =
                || String::from_utf8_lossy(&bytes[i..(i + 3).min(bytes.len())]).into_owned();
            let (Some(hi), Some(lo)) = (
                bytes.get(i + 1).copied().and_then(hex),
                bytes.get(i + 2).copied().and_then(hex),
            ) else {
                return Err(format!("invalid URL escape {:?}", escape()));
            };
            let value = hi << 4 | lo;
            let is_percent = value == b'%';
            if mode == Mode::Host && hi < 8 && !is_percent {
                return Err(format!("invalid URL escape {:?}", escape()));
            }
            if mode == Mode::Zone && !is_percent && value != b' ' && !host_byte_allowed(value) {
                return Err(format!("invalid URL escape {:?}", escape()));
            }
            out.push(value);
            i += 3;
            continue;
        }
        if matches!(mode, Mode::Host | Mode::Zone) && b < 0x80 && !host_byte_allowed(b) {
            return Err(format!(
                "invalid character {:?} in host name",
                char::from(b).to_string()
            ));
        }
        out.push(b);
        i += 1;
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// Go's `net.SplitHostPort`; on error the keyring keeps the whole host and an empty port.
pub(crate) fn split_host_port(hostport: &str) -> (&str, &str) {
    split_host_port_strict(hostport).unwrap_or((hostport, ""))
}

fn split_host_port_strict(hostport: &str) -> Option<(&str, &str)> {
    let last_colon = hostport.rfind(':')?;
    let (host, tail_from) = if hostport.starts_with('[') {
        let end = hostport.find(']')?;
        if end + 1 != last_colon {
            return None;
        }
        (&hostport[1..end], end + 1)
    } else {
        let host = &hostport[..last_colon];
        if host.contains(':') {
            return None;
        }
        (host, 0)
    };
    let head_from = usize::from(hostport.starts_with('['));
    if hostport[head_from..].contains('[') || hostport[tail_from..].contains(']') {
        return None;
    }
    Some((host, &hostport[last_colon + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(raw: &str) -> Url {
        parse(raw).unwrap_or_else(|e| Url {
            host: format!("error: {e}"),
            path: String::new(),
        })
    }

    #[test]
    fn splits_host_and_path_like_go() {
        let cases = [
            ("https://index.docker.io/v1/", "index.docker.io", "/v1/"),
            ("https://index.docker.io/v1", "index.docker.io", "/v1"),
            ("https://ghcr.io", "ghcr.io", ""),
            ("https://user:pw@ghcr.io:443/a?b#c", "ghcr.io:443", "/a"),
            ("https://host/a%20b", "host", "/a b"),
            ("https://[::1]:5000/x", "[::1]:5000", "/x"),
            ("https://oci://ghcr.io", "oci:", "//ghcr.io"),
            ("https://*.example.com", "*.example.com", ""),
            ("https://host/a?", "host", "/a"),
        ];
        for (raw, host, path) in cases {
            let parsed = url(raw);
            assert_eq!(
                (parsed.host.as_str(), parsed.path.as_str()),
                (host, path),
                "{raw}"
            );
        }
    }

    #[test]
    fn rejects_what_go_rejects() {
        for raw in [
            "https://ghcr io",
            "https://ghcr.io:abc",
            "https://ghcr.io/%zz",
            "https://gh%41cr.io",
            "https://[::1",
            "https://ghcr.io\n",
            "https://ghcr.io#%",
            "https://a b@ghcr.io",
            "https://ghcr.io\\x",
        ] {
            assert!(parse(raw).is_err(), "{raw} should not parse");
        }
    }

    #[test]
    fn splits_ports_like_net_split_host_port() {
        assert_eq!(split_host_port("host:5000"), ("host", "5000"));
        assert_eq!(split_host_port("host"), ("host", ""));
        assert_eq!(split_host_port("host:"), ("host", ""));
        assert_eq!(split_host_port("[::1]:5000"), ("::1", "5000"));
        assert_eq!(split_host_port("[::1]"), ("[::1]", ""));
        assert_eq!(split_host_port("a:b:5000"), ("a:b:5000", ""));
    }
}
