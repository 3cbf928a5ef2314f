//! Timings of `validate`, printed rather than asserted.

use super::run;

/// A realistic two-container pod with an init container, probes, env and volumes.
const TYPICAL: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: web-challenge
  labels: {app: web, app.kubernetes.io/name: web}
spec:
  containers:
  - name: web
    image: registry.example.com/ctf/web:1.4
    ports:
    - containerPort: 80
    env:
    - name: FLAG
      valueFrom: {secretKeyRef: {name: flag, key: flag}}
    - {name: MODE, value: ctf}
    resources:
      requests: {cpu: 250m, memory: 128Mi}
      limits: {cpu: 500m, memory: 256Mi}
    readinessProbe:
      httpGet: {path: /healthz, port: 80}
    volumeMounts:
    - {name: tmp, mountPath: /tmp}
    - {name: cfg, mountPath: /etc/app.ini, subPath: app.ini}
  - name: db
    image: redis:7
    ports: [{containerPort: 6379}]
    resources: {limits: {cpu: 200m, memory: 64Mi}}
  initContainers:
  - name: setup
    image: busybox:1.36
    command: [sh, -c, "echo ok"]
    resources: {limits: {cpu: 100m, memory: 16Mi}}
  volumes:
  - {name: tmp, emptyDir: {sizeLimit: 100Mi}}
  - {name: cfg, configMap: {name: web-cfg}}
  tolerations:
  - {key: dedicated, operator: Equal, value: ctf, effect: NoSchedule}
"#;

#[test]
fn typical_manifest_is_accepted() {
    let hardened = run(TYPICAL).unwrap();
    assert_eq!(hardened.requested_cpu_milli, 700);
    assert_eq!(hardened.requested_memory_bytes, 320 << 20);
}

/// Benchmark, not a check: prints the time `validate` takes per manifest.
/// `cargo test -p stack-core --release --lib validate::tests::bench -- --ignored --nocapture`
#[test]
#[ignore = "benchmark; prints timings"]
fn bench_validation() {
    let many_env: String = (0..1500)
        .map(|i| format!("    - {{name: VAR_{i}, value: \"value {i}\"}}\n"))
        .collect();
    let big = TYPICAL.replace("    - {name: MODE, value: ctf}\n", &many_env);
    let mut inputs: Vec<(&str, String, u32)> = vec![
        ("typical pod", TYPICAL.to_owned(), 2000),
        ("pod with 1500 env vars", big, 50),
    ];
    for (name, yaml, _) in super::bounded_yaml::tests::hostile_inputs() {
        inputs.push((name, yaml, 10));
    }
    inputs.push(("manifest over the limit", "a".repeat(300 * 1024), 1000));
    for (name, yaml, iterations) in inputs {
        let verdict = run(&yaml)
            .map(|_| "accepted".to_owned())
            .unwrap_or_else(|r| r.to_string());
        let started = std::time::Instant::now();
        for _ in 0..iterations {
            let _ = std::hint::black_box(run(std::hint::black_box(&yaml)));
        }
        let per_call = started.elapsed() / iterations;
        let verdict: String = verdict.chars().take(80).collect();
        eprintln!("{name:<34} {:>7} B {:>10.1?}/call  {verdict}", yaml.len(), per_call);
    }
}
