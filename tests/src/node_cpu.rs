//! CPU time the components of a stack's start use on the real nodes (the kubelets, containerd
//! with its shims and runc, the NetworkPolicy enforcer, kube-apiserver, the API process), and
//! the whole machine's, per started pod: what makes the benchmarks' figures compare across
//! machines. A component's figure counts the children it reaped (containerd's CNI plugins,
//! kube-router's iptables); the machine's counts every process but niced ones (a build running
//! beside the benchmark at `nice 19`).

use std::time::Duration;

use crate::env::EnvSettings;
use crate::env::processes::Component;
use crate::env::real_nodes;
use crate::proc_status::{cpu_time_with_children, machine_busy};

/// CPU time each component, and the machine, has used so far.
pub struct CpuUse {
    components: Vec<(String, u32, Duration)>,
    machine: Duration,
}

impl CpuUse {
    pub fn now(settings: &EnvSettings, api_pid: u32) -> Self {
        let mut processes = vec![("stack-api".to_owned(), api_pid)];
        processes.extend(
            Component::find(settings, "kube-apiserver")
                .ok()
                .map(|c| ("kube-apiserver".to_owned(), c.pid())),
        );
        for node in 1..=settings.real_nodes {
            for part in ["kubelet", "containerd", "kube-router"] {
                let name = format!("{}-{part}", real_nodes::node_name(node));
                if let Ok(component) = Component::find(settings, &name) {
                    processes.push((part.to_owned(), component.pid()));
                }
            }
        }
        Self {
            components: processes
                .into_iter()
                .map(|(name, pid)| (name, pid, cpu_time_with_children(pid).unwrap_or_default()))
                .collect(),
            machine: machine_busy().unwrap_or_default(),
        }
    }

    /// CPU ms per started pod by component since [`CpuUse::now`], the nodes' components summed;
    /// `shims`: what the pods' containerd shims (with the runc processes they ran) used.
    pub fn per_pod(&self, pods: usize, shims: Duration) -> String {
        let mut by_part: Vec<(String, Duration)> = Vec::new();
        for (name, pid, before) in &self.components {
            let spent = cpu_time_with_children(*pid).unwrap_or(*before).saturating_sub(*before);
            match by_part.iter_mut().find(|(n, _)| n == name) {
                Some((_, total)) => *total += spent,
                None => by_part.push((name.clone(), spent)),
            }
        }
        if shims > Duration::ZERO {
            by_part.push(("shims+runc".to_owned(), shims));
        }
        if let Some(busy) = machine_busy() {
            by_part.push(("whole machine".to_owned(), busy.saturating_sub(self.machine)));
        }
        let per_pod = |d: Duration| d.as_secs_f64() * 1000.0 / pods.max(1) as f64;
        let parts: Vec<String> = by_part
            .iter()
            .map(|(name, spent)| format!("{name} {:.0}", per_pod(*spent)))
            .collect();
        parts.join(", ")
    }
}

/// CPU of every containerd shim running now, with the children it reaped (runc), and of
/// gVisor's sandboxes and gofers (the Sentry runs the challenge's own processes).
pub fn shim_cpu() -> Duration {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Duration::ZERO;
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| is_runtime_process(&String::from_utf8_lossy(&c)))
        })
        .filter_map(cpu_time_with_children)
        .sum()
}

fn is_runtime_process(cmdline: &str) -> bool {
    cmdline.contains("containerd-shim-runc-v2")
        || cmdline.contains("containerd-shim-runsc-v1")
        || cmdline.starts_with("runsc-sandbox")
        || cmdline.starts_with("runsc-gofer")
}
