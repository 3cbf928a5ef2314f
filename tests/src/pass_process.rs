//! One reconcile pass in a child process that does nothing else, as in a Lambda, so that its
//! peak RSS is the pass's own and not the benchmark's: a benchmark runs its own executable
//! again with [`PassRequest::to_args`], and that process, seeing [`PASS_FLAG`], runs
//! [`run_pass_here`] over counting clients and prints the [`PassReport`].

use std::fmt;
use std::time::{Duration, Instant};

use stack_core::{PassError, Reconciler, Summary, run_pass};

use crate::api::kube_config;
use crate::bench_fixture::value_after;
use crate::counting::{CallTally, CallsByKind, dynamodb_counting_by_operation, kube_counting_by_kind};
use crate::env::TestEnv;
use crate::proc_status::{kib_text, peak_rss_kib};
use crate::reconciler::{reconciler_config, stacks_over};

/// The flag that makes a benchmark executable run one pass instead of the benchmark.
pub const PASS_FLAG: &str = "--pass";
/// The Lambda's longest possible invocation.
pub const PASS_BUDGET: Duration = Duration::from_secs(900);

#[derive(Debug, thiserror::Error)]
pub enum PassProcessError {
    #[error("{PASS_FLAG}: {0}")]
    Usage(String),
    #[error("running the pass process: {0}")]
    Spawn(#[source] std::io::Error),
    #[error("{label} failed: {status}")]
    Failed {
        label: String,
        status: std::process::ExitStatus,
    },
    #[error("kubernetes client: {0}")]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    Pass(#[from] PassError),
}

/// What the child process is asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PassRequest {
    /// Names the pass in the report (`pass 2 (nothing to do)`).
    pub label: String,
    pub namespace: String,
    pub table: String,
    /// `expired,drift,orphans` the pass should do; anything else is reported.
    pub expect: Option<String>,
    /// Variables of the reconciler's configuration (`STACK_ORPHAN_GRACE`, `STACK_NODE_ROLE`, ...).
    pub overrides: Vec<(String, String)>,
}

impl PassRequest {
    pub fn new(label: &str, namespace: &str, table: &str) -> Self {
        Self {
            label: label.to_owned(),
            namespace: namespace.to_owned(),
            table: table.to_owned(),
            expect: None,
            overrides: Vec::new(),
        }
    }

    pub fn expect(mut self, expired: usize, drift: usize, orphans: usize) -> Self {
        self.expect = Some(format!("{expired},{drift},{orphans}"));
        self
    }

    pub fn set(mut self, name: &str, value: &str) -> Self {
        self.overrides.push((name.to_owned(), value.to_owned()));
        self
    }

    /// The child's command line.
    pub fn to_args(&self) -> Vec<String> {
        let mut args = vec![
            PASS_FLAG.to_owned(),
            self.label.clone(),
            "--namespace".to_owned(),
            self.namespace.clone(),
            "--table".to_owned(),
            self.table.clone(),
        ];
        if let Some(expect) = &self.expect {
            args.extend(["--expect".to_owned(), expect.clone()]);
        }
        for (name, value) in &self.overrides {
            args.extend(["--set".to_owned(), format!("{name}={value}")]);
        }
        args
    }

    /// The request in a command line (without the program name); `None` without [`PASS_FLAG`].
    pub fn from_args(args: &[String]) -> Option<Result<Self, PassProcessError>> {
        let label = value_after(args, PASS_FLAG)?;
        let required =
            |flag: &str| value_after(args, flag).ok_or_else(|| PassProcessError::Usage(format!("needs {flag}")));
        let parsed = (|| {
            let mut request = Self::new(&label, &required("--namespace")?, &required("--table")?);
            request.expect = value_after(args, "--expect");
            for (i, _) in args.iter().enumerate().filter(|(_, a)| *a == "--set") {
                let setting = args.get(i + 1).and_then(|s| s.split_once('='));
                let (name, value) =
                    setting.ok_or_else(|| PassProcessError::Usage("--set needs NAME=VALUE".to_owned()))?;
                request = request.set(name, value);
            }
            Ok(request)
        })();
        Some(parsed)
    }
}

/// Runs the running executable again as the pass process and waits for it; its output goes
/// straight to ours.
pub fn spawn_pass(request: &PassRequest) -> Result<(), PassProcessError> {
    let exe = std::env::current_exe().map_err(PassProcessError::Spawn)?;
    let status = std::process::Command::new(exe)
        .args(request.to_args())
        .status()
        .map_err(PassProcessError::Spawn)?;
    if status.success() {
        Ok(())
    } else {
        Err(PassProcessError::Failed {
            label: request.label.clone(),
            status,
        })
    }
}

/// The pass process's work: one pass as the Lambda runs it, over clients counting calls by kind.
pub async fn run_pass_here(env: &TestEnv, request: &PassRequest) -> Result<PassReport, PassProcessError> {
    let calls = CallsByKind::default();
    let kube = kube_counting_by_kind(kube_config(env).await, &calls)?;
    let dynamodb = dynamodb_counting_by_operation(&env.dynamodb, &calls);
    let overrides: Vec<(&str, &str)> = request
        .overrides
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let config = reconciler_config(&request.namespace, &request.table, &overrides);
    let reconciler = Reconciler::new(stacks_over(config, kube, dynamodb));
    let before = calls.snapshot();
    let started = Instant::now();
    let summary = run_pass(&reconciler, Instant::now() + PASS_BUDGET).await?;
    Ok(PassReport {
        label: request.label.clone(),
        elapsed: started.elapsed(),
        calls: calls.snapshot().since(&before),
        peak_rss_kib: peak_rss_kib(),
        summary,
        expected: request.expect.clone(),
    })
}

/// What one pass took and did.
#[derive(Debug, Clone)]
pub struct PassReport {
    pub label: String,
    pub elapsed: Duration,
    pub calls: CallTally,
    /// Of the whole pass process.
    pub peak_rss_kib: Option<u64>,
    pub summary: Summary,
    pub expected: Option<String>,
}

impl PassReport {
    /// `expired,drift,orphans`, as [`PassRequest::expect`] writes them.
    pub fn work_done(&self) -> String {
        format!(
            "{},{},{}",
            self.summary.counts.expired, self.summary.counts.drift, self.summary.counts.orphans
        )
    }
}

impl fmt::Display for PassReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let calls = &self.calls;
        writeln!(f, "{}: {:.3}s", self.label, self.elapsed.as_secs_f64())?;
        writeln!(
            f,
            "  kubernetes calls: {} (list {}, delete {}, other {})",
            calls.kube_total(),
            calls.kube_get,
            calls.kube_delete,
            calls.kube_other
        )?;
        let operations: Vec<String> = calls.dynamodb.iter().map(|(op, n)| format!("{op} {n}")).collect();
        writeln!(
            f,
            "  dynamodb calls: {} ({})",
            calls.dynamodb_total(),
            operations.join(", ")
        )?;
        writeln!(
            f,
            "  list/query calls: {} (kubernetes {}, dynamodb {})",
            calls.lists_and_queries(),
            calls.kube_get,
            calls.dynamodb_queries()
        )?;
        writeln!(f, "  peak RSS of the pass process: {}", kib_text(self.peak_rss_kib))?;
        write!(
            f,
            "  summary: {}",
            serde_json::to_string(&self.summary).unwrap_or_default()
        )?;
        if let Some(expected) = self.expected.as_ref().filter(|e| **e != self.work_done()) {
            write!(
                f,
                "\n  WARNING: the pass did not do the expected work (expired,drift,orphans = {}, expected {expected})",
                self.work_done()
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_survives_the_command_line() {
        let request = PassRequest::new("pass 2 (nothing to do)", "ns-1", "table-1")
            .expect(0, 0, 0)
            .set("STACK_NODE_ROLE", "scale-1")
            .set("STACK_ORPHAN_GRACE", "1s");
        let mut args = vec!["--stacks".to_owned(), "10".to_owned()];
        args.extend(request.to_args());
        let parsed = PassRequest::from_args(&args).map(|r| r.map_err(|e| e.to_string()));
        assert_eq!(parsed, Some(Ok(request)));
        assert!(PassRequest::from_args(&["--stacks".to_owned(), "10".to_owned()]).is_none());
    }

    #[test]
    fn a_request_without_its_table_is_refused() {
        let args: Vec<String> = ["--pass", "p", "--namespace", "n"].map(str::to_owned).to_vec();
        let refused = PassRequest::from_args(&args).and_then(Result::err);
        assert!(refused.is_some_and(|e| e.to_string().contains("--table")));
    }
}
