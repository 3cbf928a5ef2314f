//! Outages on demand: stop (SIGSTOP) and continue (SIGCONT) a process of the local
//! environment, as a hung apiserver or DynamoDB looks to its clients: connections are
//! accepted by the kernel, nothing is answered.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{EnvError, EnvSettings};

/// A component of the environment, by the name `up` gives it (`kube-apiserver`, `dynamodb`, ...).
#[derive(Debug, Clone)]
pub struct Component {
    name: String,
    pid: u32,
}

impl Component {
    pub fn find(settings: &EnvSettings, name: &str) -> Result<Self, EnvError> {
        let state_dir = settings
            .state_dir
            .clone()
            .ok_or_else(|| EnvError::NotConfigured("STACK_ENV_STATE_DIR is not set".into()))?;
        let path = pid_file(&state_dir, name);
        let text = std::fs::read_to_string(&path).map_err(|source| EnvError::Read {
            path: path.clone(),
            source,
        })?;
        let pid = text
            .split_whitespace()
            .next()
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| EnvError::NotConfigured(format!("{} holds no pid", path.display())))?;
        Ok(Self {
            name: name.to_owned(),
            pid,
        })
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The value of the process's `--name=value` flag, from its command line.
    pub fn flag(&self, name: &str) -> Option<String> {
        let cmdline = std::fs::read(format!("/proc/{}/cmdline", self.pid)).ok()?;
        let prefix = format!("--{name}=");
        cmdline
            .split(|b| *b == 0)
            .filter_map(|arg| std::str::from_utf8(arg).ok())
            .find_map(|arg| arg.strip_prefix(&prefix).map(str::to_owned))
    }

    /// Stops the process until the returned guard is dropped or continued.
    pub fn pause(&self) -> Result<Paused, EnvError> {
        self.signal("STOP")?;
        Ok(Paused {
            component: self.clone(),
            resumed: false,
        })
    }

    fn signal(&self, signal: &str) -> Result<(), EnvError> {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.pid.to_string()])
            .status()
            .map_err(|source| EnvError::Read {
                path: PathBuf::from("kill"),
                source,
            })?;
        if status.success() {
            Ok(())
        } else {
            Err(EnvError::NotConfigured(format!(
                "kill -{signal} {} ({}) failed",
                self.pid, self.name
            )))
        }
    }
}

/// A stopped component; continued when dropped, so a failing test never leaves it stopped.
#[derive(Debug)]
pub struct Paused {
    component: Component,
    resumed: bool,
}

impl Paused {
    pub fn resume(mut self) -> Result<(), EnvError> {
        self.resumed = true;
        self.component.signal("CONT")
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        if !self.resumed {
            let _ = self.component.signal("CONT");
        }
    }
}

fn pid_file(state_dir: &Path, name: &str) -> PathBuf {
    state_dir.join("pids").join(format!("{name}.pid"))
}
