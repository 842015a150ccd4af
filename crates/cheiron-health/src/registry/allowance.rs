//! Docker Hub's pull allowance, read from the `ratelimit-*` headers of a `HEAD` of the
//! `ratelimitpreview/test` manifest (a HEAD is not counted as a pull).
//!
//! ```text
//!   ratelimit-limit: 100;w=21600      ratelimit-remaining: 76;w=21600
//!   └─► Allowance::Limited { limit: 100, remaining: 76, window: Some(6h) }
//! ```

use std::time::Duration;

use cheiron_core::health::Allowance;

/// The scope of the token whose manifest `HEAD` carries the allowance.
pub const ALLOWANCE_SCOPE: &str = "repository:ratelimitpreview/test:pull";

/// The manifest whose `HEAD` carries the allowance, under `https://{host}`.
pub const ALLOWANCE_PATH: &str = "/v2/ratelimitpreview/test/manifests/latest";

/// The allowance from the two header values: neither → [`Allowance::Unlimited`], both well
/// formed → [`Allowance::Limited`], anything else (one missing, not a number, a bad window)
/// → `None`, i.e. unknown.
pub fn parse(limit: Option<&[u8]>, remaining: Option<&[u8]>) -> Option<Allowance> {
    match (limit, remaining) {
        (None, None) => Some(Allowance::Unlimited),
        (Some(limit), Some(remaining)) => {
            let (limit, limit_window) = quota(limit)?;
            let (remaining, remaining_window) = quota(remaining)?;
            Some(Allowance::Limited {
                limit,
                remaining,
                window: limit_window.or(remaining_window),
            })
        }
        _ => None,
    }
}

/// `100;w=21600` → `(100, Some(6h))`; `100` → `(100, None)`. Parameters other than `w` are
/// ignored.
fn quota(value: &[u8]) -> Option<(u64, Option<Duration>)> {
    let value = std::str::from_utf8(value).ok()?;
    let mut parts = value.split(';');
    let count = number(parts.next()?)?;
    let mut window = None;
    for param in parts {
        let (name, seconds) = param.split_once('=')?;
        if name.trim().eq_ignore_ascii_case("w") {
            if window.is_some() {
                return None;
            }
            window = Some(Duration::from_secs(number(seconds)?));
        }
    }
    Some((count, window))
}

fn number(text: &str) -> Option<u64> {
    let text = text.trim();
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(limit: Option<&str>, remaining: Option<&str>) -> Option<Allowance> {
        parse(limit.map(str::as_bytes), remaining.map(str::as_bytes))
    }

    #[test]
    fn both_headers_with_window_are_limited() {
        assert_eq!(
            of(Some("100;w=21600"), Some("76;w=21600")),
            Some(Allowance::Limited {
                limit: 100,
                remaining: 76,
                window: Some(Duration::from_secs(21600)),
            })
        );
        assert_eq!(
            of(Some(" 200 ; w = 60 "), Some("0")),
            Some(Allowance::Limited {
                limit: 200,
                remaining: 0,
                window: Some(Duration::from_secs(60)),
            })
        );
    }

    #[test]
    fn without_window_the_window_is_unknown() {
        assert_eq!(
            of(Some("100"), Some("99;comment=x")),
            Some(Allowance::Limited {
                limit: 100,
                remaining: 99,
                window: None,
            })
        );
    }

    #[test]
    fn no_headers_is_unlimited() {
        assert_eq!(of(None, None), Some(Allowance::Unlimited));
    }

    #[test]
    fn malformed_or_half_missing_headers_are_unknown() {
        for (limit, remaining) in [
            (Some("100;w=21600"), None),
            (None, Some("76;w=21600")),
            (Some("lots"), Some("76")),
            (Some("-1"), Some("76")),
            (Some("+100"), Some("76")),
            (Some(""), Some("76")),
            (Some("100;w=six hours"), Some("76")),
            (Some("100;w"), Some("76")),
            (Some("100;w=1;w=2"), Some("76")),
            (Some("100"), Some("99999999999999999999999")),
        ] {
            assert_eq!(of(limit, remaining), None, "{limit:?} {remaining:?}");
        }
        assert_eq!(parse(Some(b"\xff100"), Some(b"1")), None);
    }
}
