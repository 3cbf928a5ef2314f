//! Manifests for tests and benchmarks: a tiny challenge of which thousands fit on a few
//! simulated nodes, and large manifests for the storage and list-size tests, at the validator's
//! limits (256 KiB of text, twice that once aliases are expanded) and growing when hardened.

use aws_sdk_dynamodb::types::AttributeValue;
use stack_core::{Protocol, StackId, Store, TargetPort};

use crate::reconciler::stored_key;

/// A small challenge (10m CPU, 16Mi: requests default to the limits), so that thousands fit on
/// a few simulated nodes.
pub const BENCH_POD: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: bench
  labels:
    challenge: bench
spec:
  containers:
    - name: app
      image: registry.example/ctf/app:1
      ports:
        - containerPort: 1337
      resources:
        limits:
          cpu: 10m
          memory: 16Mi
"#;
/// The port [`BENCH_POD`] exposes.
pub const BENCH_PORT: TargetPort = TargetPort {
    container_port: 1337,
    protocol: Protocol::Tcp,
};
/// [`BENCH_POD`]'s requests.
pub const BENCH_POD_CPU_MILLI: u64 = 10;
pub const BENCH_POD_MEMORY_MIB: u64 = 16;

/// Env variables in [`alias_env_pod`].
pub const ENV_ENTRIES: usize = 26;
/// Length of each variable's value: 26 values of 10,000 bytes fill the 256 KiB manifest, and
/// the alias doubles them to just under the 512 KiB expansion budget.
pub const ENV_VALUE_BYTES: usize = 10_000;

pub use stack_core::noise;

/// Text like a config file: compresses well.
pub fn prose(len: usize, seed: usize) -> String {
    let mut text = String::with_capacity(len + 64);
    let mut line = 0;
    while text.len() < len {
        text.push_str(&format!("option_{seed}_{line} = enabled; timeout = {} ms; ", line * 7));
        line += 1;
    }
    text.truncate(len);
    text
}

/// A valid pod exposing TCP 80 whose two containers share one env list through a YAML alias:
/// [`ENV_ENTRIES`] variables with the values `value(i)`.
pub fn alias_env_pod(value: impl Fn(usize) -> String) -> String {
    let mut yaml = String::from(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: big\nspec:\n  containers:\n    - name: app\n      \
         image: nginx:1.27\n      ports:\n        - containerPort: 80\n      resources:\n        limits: \
         {cpu: 100m, memory: 64Mi}\n      env: &env\n",
    );
    for i in 0..ENV_ENTRIES {
        yaml.push_str(&format!("        - name: V{i:02}\n          value: \"{}\"\n", value(i)));
    }
    yaml.push_str(
        "    - name: sidecar\n      image: nginx:1.27\n      resources:\n        limits: {cpu: 100m, memory: \
         64Mi}\n      env: *env\n",
    );
    yaml
}

/// Overwrites the manifest of `id` as items were written before compression (a plain string).
pub async fn put_plain_manifest(store: &Store, id: &StackId, text: &str) -> Result<(), String> {
    let mut item = stored_key("MANIFEST", id);
    item.insert("pod_spec".to_owned(), AttributeValue::S(text.to_owned()));
    store
        .client()
        .put_item()
        .table_name(store.table())
        .set_item(Some(item))
        .send()
        .await
        .map(|_| ())
        .map_err(|e| format!("{}", aws_smithy_types::error::display::DisplayErrorContext(&e)))
}
