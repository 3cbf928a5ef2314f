//! The admin kubeconfig `up` wrote, read for where the apiserver is and rewritten to reach it
//! another way (through a proxy, or at an address where nothing listens).

use std::net::SocketAddr;
use std::path::Path;

use kube::config::Kubeconfig;

use super::{EnvError, EnvSettings};

fn read(settings: &EnvSettings) -> Result<Kubeconfig, EnvError> {
    Kubeconfig::read_from(&settings.kubeconfig)
        .map_err(|e| EnvError::Kubeconfig(format!("{}: {e}", settings.kubeconfig.display())))
}

/// The apiserver's `host:port` (the environment's is an IP address).
pub fn apiserver_addr(settings: &EnvSettings) -> Result<SocketAddr, EnvError> {
    let kubeconfig = read(settings)?;
    let server = kubeconfig
        .clusters
        .iter()
        .find_map(|named| named.cluster.as_ref()?.server.clone())
        .ok_or_else(|| EnvError::Kubeconfig("no cluster with a server".into()))?;
    let authority = server
        .trim_start_matches("https://")
        .trim_start_matches("http://")
        .trim_end_matches('/');
    authority
        .parse()
        .map_err(|e| EnvError::Kubeconfig(format!("server {server}: {e}")))
}

/// Writes to `path` the admin kubeconfig with every cluster's server at `addr` (same TLS
/// name and credentials: the apiserver's certificate is for 127.0.0.1).
pub fn write_with_server(settings: &EnvSettings, addr: SocketAddr, path: &Path) -> Result<(), EnvError> {
    let mut kubeconfig = read(settings)?;
    for named in &mut kubeconfig.clusters {
        if let Some(cluster) = named.cluster.as_mut() {
            cluster.server = Some(format!("https://{addr}"));
        }
    }
    let text = serde_yaml::to_string(&kubeconfig).map_err(|e| EnvError::Kubeconfig(e.to_string()))?;
    std::fs::write(path, text).map_err(|source| EnvError::Write {
        path: path.to_owned(),
        source,
    })
}
