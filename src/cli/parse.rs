//! The parsers of the command line's numeric values: seconds, counts, stream counts and
//! byte sizes, each refusing what would make its limit meaningless (a timeout of zero).

use std::time::Duration;

/// Parses `5`, `0.5` or `5s` as a duration in seconds.
pub(super) fn parse_seconds(text: &str) -> Result<Duration, String> {
    let number = text.strip_suffix('s').unwrap_or(text);
    number
        .parse::<f64>()
        .ok()
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .ok_or_else(|| format!("{text:?} is not a number of seconds"))
}

/// [`parse_seconds`], above zero: a timeout of zero would refuse everything.
pub(super) fn parse_timeout(text: &str) -> Result<Duration, String> {
    match parse_seconds(text)? {
        zero if zero.is_zero() => Err("a timeout must be above zero".to_owned()),
        duration => Ok(duration),
    }
}

/// Parses a count of at least 1.
pub(super) fn parse_count(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("must be at least 1".to_owned()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("{text:?} is not a whole number")),
    }
}

/// Parses a number of HTTP/2 streams, at least 1.
pub(super) fn parse_streams(text: &str) -> Result<u32, String> {
    let count = parse_count(text)?;
    u32::try_from(count).map_err(|_| format!("{text:?} is too large"))
}

/// Parses `1048576`, `1024Ki`, `64Mi` or `1Gi` (an optional `B` after the suffix) as bytes.
pub(super) fn parse_bytes(text: &str) -> Result<usize, String> {
    let trimmed = text.strip_suffix('B').unwrap_or(text);
    let (number, unit) = [("Gi", 1usize << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)]
        .into_iter()
        .find_map(|(suffix, unit)| trimmed.strip_suffix(suffix).map(|n| (n, unit)))
        .unwrap_or((trimmed, 1));
    number
        .trim()
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
        .ok_or_else(|| format!("{text:?} is not a number of bytes (e.g. 67108864 or 64Mi)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shutdown_delay_accepts_plain_fractional_and_suffixed_seconds() {
        assert_eq!(parse_seconds("5"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_seconds("0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_seconds("2s"), Ok(Duration::from_secs(2)));
        assert!(parse_seconds("soon").is_err());
        assert!(parse_seconds("-1").is_err());
    }

    #[test]
    fn sizes_take_binary_suffixes() {
        assert_eq!(parse_bytes("1024"), Ok(1024));
        assert_eq!(parse_bytes("16Ki"), Ok(16 * 1024));
        assert_eq!(parse_bytes("64Mi"), Ok(64 * 1024 * 1024));
        assert_eq!(parse_bytes("64MiB"), Ok(64 * 1024 * 1024));
        assert_eq!(parse_bytes("1Gi"), Ok(1 << 30));
        assert!(parse_bytes("64M").is_err());
        assert!(parse_bytes("lots").is_err());
        assert!(parse_bytes("99999999999999999999Gi").is_err());
    }

    #[test]
    fn zero_timeouts_and_counts_are_refused() {
        assert!(parse_timeout("0").is_err());
        assert_eq!(parse_timeout("0.5"), Ok(Duration::from_millis(500)));
        assert!(parse_count("0").is_err());
        assert_eq!(parse_count("7"), Ok(7));
        assert!(parse_streams("5000000000").is_err());
    }
}
