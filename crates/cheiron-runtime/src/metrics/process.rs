//! The standard `process_*` metrics of Prometheus' client libraries, read from `/proc/self` at
//! each scrape: resident and virtual memory (alert on `process_resident_memory_bytes` against
//! the container's memory limit), CPU seconds, open and maximum file descriptors, threads and
//! the start time. Unprefixed, as every exporter names them, so dashboards and alerts written
//! for them work as they are. Outside Linux (no `/proc`) nothing is exported.

use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeMetric},
    metrics::{counter::ConstCounter, gauge::ConstGauge},
};

/// Clock ticks per second of `/proc/*/stat` times (`USER_HZ`): 100 on every Linux
/// architecture cheiron is built for (the kernel's ABI, not `CONFIG_HZ`).
const TICKS_PER_SECOND: f64 = 100.0;

/// Collects the `process_*` metrics on each scrape.
#[derive(Debug, Default)]
pub struct ProcessCollector;

/// One reading of `/proc/self`.
#[derive(Debug, Default, PartialEq)]
struct Sample {
    resident_bytes: Option<i64>,
    virtual_bytes: Option<i64>,
    threads: Option<i64>,
    cpu_seconds: Option<f64>,
    start_time_seconds: Option<f64>,
    open_fds: Option<i64>,
    max_fds: Option<i64>,
}

impl Sample {
    fn read() -> Self {
        let file = |path: &str| std::fs::read_to_string(path).ok();
        let status = file("/proc/self/status").unwrap_or_default();
        let stat = file("/proc/self/stat").and_then(|s| parse_stat(&s));
        let boot_time = file("/proc/stat").and_then(|s| parse_boot_time(&s));
        Self {
            resident_bytes: status_kib(&status, "VmRSS:").map(|k| k * 1024),
            virtual_bytes: status_kib(&status, "VmSize:").map(|k| k * 1024),
            threads: status_kib(&status, "Threads:"),
            cpu_seconds: stat.map(|s| (s.user_ticks + s.system_ticks) as f64 / TICKS_PER_SECOND),
            start_time_seconds: stat
                .zip(boot_time)
                .map(|(s, boot)| boot as f64 + s.start_ticks as f64 / TICKS_PER_SECOND),
            open_fds: std::fs::read_dir("/proc/self/fd")
                .ok()
                .map(|entries| entries.count() as i64),
            max_fds: file("/proc/self/limits").and_then(|s| parse_max_open_files(&s)),
        }
    }
}

/// The number after `key` on its line of `/proc/self/status` (kB for the `Vm*` lines).
fn status_kib(status: &str, key: &str) -> Option<i64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix(key))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

/// The times of `/proc/self/stat`, in clock ticks.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Stat {
    user_ticks: u64,
    system_ticks: u64,
    start_ticks: u64,
}

/// Fields 14 (utime), 15 (stime) and 22 (starttime) of `/proc/self/stat`, counted after the
/// command name in parentheses (which may itself hold spaces and parentheses).
fn parse_stat(stat: &str) -> Option<Stat> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    // Field 3 (state) is the first one after the name.
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3)?.parse().ok();
    Some(Stat {
        user_ticks: field(14)?,
        system_ticks: field(15)?,
        start_ticks: field(22)?,
    })
}

/// `btime` of `/proc/stat`: the boot time in seconds since the Unix epoch.
fn parse_boot_time(stat: &str) -> Option<u64> {
    stat.lines()
        .find_map(|line| line.strip_prefix("btime "))
        .and_then(|n| n.trim().parse().ok())
}

/// The soft limit of `Max open files` in `/proc/self/limits`.
fn parse_max_open_files(limits: &str) -> Option<i64> {
    limits
        .lines()
        .find_map(|line| line.strip_prefix("Max open files"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let sample = Sample::read();
        let gauges = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                sample.resident_bytes,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                sample.virtual_bytes,
            ),
            ("process_open_fds", "Open file descriptors", sample.open_fds),
            (
                "process_max_fds",
                "Maximum number of open file descriptors (soft limit)",
                sample.max_fds,
            ),
            ("process_threads", "OS threads", sample.threads),
        ];
        for (name, help, value) in gauges {
            if let Some(value) = value {
                let gauge = ConstGauge::new(value);
                gauge.encode(encoder.encode_descriptor(
                    name,
                    help,
                    None,
                    gauge.metric_type(),
                )?)?;
            }
        }
        if let Some(start) = sample.start_time_seconds {
            let gauge = ConstGauge::new(start);
            gauge.encode(encoder.encode_descriptor(
                "process_start_time_seconds",
                "Start time of the process since the Unix epoch in seconds",
                None,
                gauge.metric_type(),
            )?)?;
        }
        if let Some(cpu) = sample.cpu_seconds {
            let counter = ConstCounter::new(cpu);
            counter.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds",
                None,
                counter.metric_type(),
            )?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_a_command_name_with_spaces_and_parentheses() {
        let stat = "4242 (tokio (rt) x) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 75 0 0 20 0 \
                    12 0 98765 123456789 2000 18446744073709551615";
        assert_eq!(
            parse_stat(stat),
            Some(Stat {
                user_ticks: 250,
                system_ticks: 75,
                start_ticks: 98765
            })
        );
        assert_eq!(parse_stat("4242 (truncated) S 1"), None);
    }

    #[test]
    fn status_limits_and_boot_time_are_read_by_their_keys() {
        let status = "Name:\tcheiron\nVmSize:\t  123456 kB\nVmRSS:\t   20480 kB\nThreads:\t7\n";
        assert_eq!(status_kib(status, "VmRSS:"), Some(20480));
        assert_eq!(status_kib(status, "VmSize:"), Some(123456));
        assert_eq!(status_kib(status, "Threads:"), Some(7));
        assert_eq!(status_kib(status, "VmSwap:"), None);
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1048576              1048576              files\n";
        assert_eq!(parse_max_open_files(limits), Some(1_048_576));
        assert_eq!(
            parse_boot_time("cpu  1 2 3\nbtime 1795000000\nprocesses 9\n"),
            Some(1_795_000_000)
        );
    }

    #[test]
    fn this_process_is_read_from_proc() {
        let sample = Sample::read();
        assert!(sample.resident_bytes.unwrap() > 1024 * 1024, "{sample:?}");
        assert!(sample.virtual_bytes.unwrap() >= sample.resident_bytes.unwrap());
        assert!(sample.open_fds.unwrap() >= 3);
        assert!(sample.max_fds.unwrap() >= sample.open_fds.unwrap());
        assert!(sample.threads.unwrap() >= 1);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let start = sample.start_time_seconds.unwrap();
        assert!(
            start <= now + 1.0 && start > now - 3600.0,
            "{start} vs {now}"
        );
    }
}
