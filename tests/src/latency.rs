//! Percentiles of measured durations.

use std::time::Duration;

/// The `p`th percentile (nearest rank, rounded down) of durations sorted ascending; zero when
/// there are none.
pub fn percentile(sorted: &[Duration], p: usize) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

/// The median of unsorted durations.
pub fn median(samples: &[Duration]) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    percentile(&sorted, 50)
}

/// `p50/p95/p99/max s` of durations sorted ascending (`-` when there are none).
pub fn spread(sorted: &[Duration]) -> String {
    let s = |d: Duration| format!("{:.2}", d.as_secs_f64());
    match sorted.last() {
        Some(max) => format!(
            "{}/{}/{}/{} s",
            s(percentile(sorted, 50)),
            s(percentile(sorted, 95)),
            s(percentile(sorted, 99)),
            s(*max)
        ),
        None => "-".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let ms = |n: u64| Duration::from_millis(n);
        let sorted: Vec<Duration> = (1..=100).map(ms).collect();
        assert_eq!(percentile(&sorted, 50), ms(51));
        assert_eq!(percentile(&sorted, 99), ms(100));
        assert_eq!(percentile(&sorted, 100), ms(100));
        assert_eq!(percentile(&[], 50), Duration::ZERO);
        assert_eq!(median(&[ms(9), ms(1), ms(5)]), ms(5));
        assert_eq!(spread(&sorted), "0.05/0.10/0.10/0.10 s");
        assert_eq!(spread(&[]), "-");
    }
}
