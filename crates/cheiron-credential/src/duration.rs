//! Go's `time.Duration` text (`5s`, `1h30m`, `1.5h`, `300ms`), the form `metav1.Duration` takes in
//! the kubelet's credential-provider config and in a plugin's response.

use std::time::Duration;

/// Why a duration did not parse. Names the rule broken, never the whole input (a plugin's
/// response is not quoted).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("not a duration like 5s, 10m or 12h0m0s: {0}")]
pub struct DurationError(&'static str);

/// Parses Go's duration syntax: a sequence of decimal numbers, each with an optional fraction
/// and a unit (`ns`, `us`, `µs`, `ms`, `s`, `m`, `h`), optionally signed; `0` alone is zero.
/// A negative duration is refused (neither the kubelet's config nor a cache duration may be).
pub fn parse(text: &str) -> Result<Duration, DurationError> {
    let s = text.strip_prefix('+').unwrap_or(text);
    if s.starts_with('-') {
        return match s.trim_start_matches('-').trim_start_matches(['0', '.']) {
            "" => Ok(Duration::ZERO),
            rest if rest.bytes().all(|b| !b.is_ascii_digit() || b == b'0') => Ok(Duration::ZERO),
            _ => Err(DurationError("negative")),
        };
    }
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(DurationError("empty"));
    }
    let mut rest = s;
    let mut total = 0f64;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or(DurationError("a number without a unit"))?;
        let (number, tail) = rest.split_at(number_end);
        if number.is_empty() || number == "." {
            return Err(DurationError("a unit without a number"));
        }
        let value: f64 = number.parse().map_err(|_| DurationError("a bad number"))?;
        let unit_end = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, next) = tail.split_at(unit_end);
        let seconds = match unit {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(DurationError("an unknown unit")),
        };
        total += value * seconds;
        rest = next;
    }
    // Go's Duration is an int64 of nanoseconds: about 292 years.
    if !total.is_finite() || total > 9.2e9 {
        return Err(DurationError("too long"));
    }
    Ok(Duration::from_secs_f64(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_duration_syntax_is_read_as_go_reads_it() {
        let ok = [
            ("0", 0.0),
            ("5s", 5.0),
            ("12h0m0s", 43200.0),
            ("1h30m", 5400.0),
            ("1.5h", 5400.0),
            ("300ms", 0.3),
            ("2m3.5s", 123.5),
            ("+10s", 10.0),
            ("-0s", 0.0),
        ];
        for (text, seconds) in ok {
            assert_eq!(parse(text).map(|d| d.as_secs_f64()), Ok(seconds), "{text}");
        }
        for bad in ["", "5", "s", "5x", "1h-5m", "-5s", ".s", "1e3s"] {
            assert!(parse(bad).is_err(), "{bad} must be refused");
        }
    }
}
