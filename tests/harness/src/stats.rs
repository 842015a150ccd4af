//! Summaries of timed samples, shared by the benchmarks.

use std::time::Duration;

/// Nearest-rank percentile `p` (0 to 100) of sorted samples (zero for none).
pub fn percentile(sorted: &[Duration], p: usize) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (p * sorted.len()).div_ceil(100).max(1);
    sorted[rank.min(sorted.len()) - 1]
}

/// `d` in whole milliseconds, e.g. `1006 ms`.
pub fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let samples: Vec<Duration> = (1..=10).map(Duration::from_millis).collect();
        assert_eq!(percentile(&samples, 50), Duration::from_millis(5));
        assert_eq!(percentile(&samples, 99), Duration::from_millis(10));
        assert_eq!(percentile(&samples, 0), Duration::from_millis(1));
        assert_eq!(percentile(&[], 50), Duration::ZERO);
        assert_eq!(ms(Duration::from_micros(1_006_400)), "1006 ms");
    }
}
