//! Memory of a process as Linux reports it in `/proc/<pid>/status` (`VmRSS`, `VmHWM`, ...).

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
    fn this_process_has_a_peak() {
        assert!(peak_rss_kib().is_some_and(|kib| kib > 0));
    }
}
