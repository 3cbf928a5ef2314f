//! Memory and CPU time of a process as Linux reports them in `/proc/<pid>/status` (`VmRSS`,
//! `VmHWM`, ...) and `/proc/<pid>/stat`, and the machine's busy CPU time (`/proc/stat`).

use std::time::Duration;

/// Ticks per second of the times in `/proc/<pid>/stat` and `/proc/stat` (`USER_HZ`, fixed at
/// 100 in Linux's user-space ABI).
const USER_HZ: u64 = 100;

/// Which process to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Process {
    /// The calling process (`/proc/self`).
    This,
    Pid(u32),
}

/// A `kB` field of the process's status, in KiB; `None` if the process or field is missing.
pub fn status_kib(process: Process, field: &str) -> Option<u64> {
    let path = match process {
        Process::This => "/proc/self/status".to_owned(),
        Process::Pid(pid) => format!("/proc/{pid}/status"),
    };
    field_kib(&std::fs::read_to_string(path).ok()?, field)
}

/// Peak resident set size of this process so far (`VmHWM`), in KiB.
pub fn peak_rss_kib() -> Option<u64> {
    status_kib(Process::This, "VmHWM")
}

/// `field`'s value in the text of a status file (`VmRSS:\t  123456 kB`).
pub fn field_kib(status: &str, field: &str) -> Option<u64> {
    status.lines().find_map(|line| {
        let value = line.strip_prefix(field)?.strip_prefix(':')?;
        value.split_whitespace().next()?.parse().ok()
    })
}

/// CPU time (user + system, all threads) the process has used so far; `None` if it is gone.
pub fn cpu_time(pid: u32) -> Option<Duration> {
    stat_cpu_time(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// The same with the CPU time of the children it has reaped (runc for a containerd shim, the
/// CNI plugins for containerd, iptables for kube-router); `None` if it is gone.
pub fn cpu_time_with_children(pid: u32) -> Option<Duration> {
    stat_times(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?, 4)
}

/// utime + stime (fields 14 and 15) of a stat line.
pub fn stat_cpu_time(stat: &str) -> Option<Duration> {
    stat_times(stat, 2)
}

/// The sum of `count` times from utime (field 14; then stime, cutime, cstime). Fields are counted
/// from the last `)`: the command name (field 2) may hold spaces and parentheses.
fn stat_times(stat: &str, count: usize) -> Option<Duration> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let ticks: Vec<u64> = after_name
        .split_whitespace()
        .skip(14 - 3)
        .take(count)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    (ticks.len() == count).then(|| duration_of(ticks.iter().sum()))
}

/// Busy CPU time of the machine since boot, niced processes left out: `/proc/stat`'s first line.
pub fn machine_busy() -> Option<Duration> {
    busy_of(std::fs::read_to_string("/proc/stat").ok()?.lines().next()?)
}

/// user + system + irq + softirq + steal of a `cpu  user nice system idle iowait irq softirq
/// steal ...` line.
fn busy_of(line: &str) -> Option<Duration> {
    let ticks: Vec<u64> = line
        .strip_prefix("cpu ")?
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    let busy = [0, 2, 5, 6, 7]
        .iter()
        .map(|&i| ticks.get(i).copied())
        .sum::<Option<u64>>()?;
    Some(duration_of(busy))
}

/// A time in `USER_HZ` ticks, as `/proc` gives it.
fn duration_of(ticks: u64) -> Duration {
    Duration::from_millis(ticks * 1000 / USER_HZ)
}

/// `12.3 MiB (12.9 MB)`, or `unknown`.
pub fn kib_text(kib: Option<u64>) -> String {
    kib.map(|kib| format!("{:.1} MiB ({:.1} MB)", kib as f64 / 1024.0, kib as f64 * 1.024 / 1000.0))
        .unwrap_or_else(|| "unknown".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_is_found_by_its_exact_name() {
        let status = "Name:\tetcd\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\nVmRSSX:\t 1 kB\n";
        assert_eq!(field_kib(status, "VmRSS"), Some(102_400));
        assert_eq!(field_kib(status, "VmHWM"), Some(204_800));
        assert_eq!(field_kib(status, "VmSwap"), None);
        assert_eq!(kib_text(Some(102_400)), "100.0 MiB (104.9 MB)");
        assert_eq!(kib_text(None), "unknown");
    }

    #[test]
    fn cpu_time_is_utime_plus_stime_whatever_the_command_name() {
        let stat = "4242 (kube) (x y)) S 1 4242 4242 0 -1 4194560 900 0 0 0 2345 655 100 50 20 0 12 0 77 0";
        assert_eq!(stat_cpu_time(stat), Some(Duration::from_millis(30_000)));
        // With the reaped children's cutime and cstime.
        assert_eq!(stat_times(stat, 4), Some(Duration::from_millis(31_500)));
        assert_eq!(stat_cpu_time("4242 (truncated) S 1 2"), None);
        assert_eq!(
            stat_times("4242 (short) S 1 4242 4242 0 -1 4194560 900 0 0 0 2345 655 1", 4),
            None
        );
    }

    #[test]
    fn the_machine_is_busy_with_all_but_niced_idle_and_waiting_time() {
        // user nice system idle iowait irq softirq steal guest guest_nice
        let line = "cpu  100 5000 20 90000 300 3 4 1 0 0";
        assert_eq!(busy_of(line), Some(Duration::from_millis((100 + 20 + 3 + 4 + 1) * 10)));
        assert_eq!(busy_of("cpu0 1 2 3 4 5 6 7 8"), None);
        assert_eq!(busy_of("cpu  1 2 3"), None);
    }

    #[test]
    fn this_process_has_used_cpu() {
        // Spins until its CPU time has grown by 20 ms: on a busy machine wall time says nothing.
        let used = || cpu_time(std::process::id()).unwrap_or_default();
        let (before, give_up) = (used(), std::time::Instant::now() + Duration::from_secs(20));
        while used() < before + Duration::from_millis(20) && std::time::Instant::now() < give_up {}
        assert!(used() >= before + Duration::from_millis(20));
    }

    #[test]
    fn this_process_has_a_peak() {
        assert!(peak_rss_kib().is_some_and(|kib| kib > 0));
    }
}
