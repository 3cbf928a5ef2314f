//! Timings of `validate`, printed rather than asserted.

use std::time::{Duration, Instant};

use super::run;
use crate::validate::ValidationPolicy;
use crate::validate::bounded_yaml::MAX_DEPTH;

/// A realistic two-container pod with an init container, probes, env and volumes.
pub(super) const TYPICAL: &str = r#"apiVersion: v1
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
  - {name: cfg, configMap: {name: web-cfg, defaultMode: 0644}}
  tolerations:
  - {key: dedicated, operator: Equal, value: ctf, effect: NoSchedule}
"#;

const LIMIT: usize = ValidationPolicy::DEFAULT_MAX_MANIFEST_BYTES;

#[test]
fn typical_manifest_is_accepted() {
    let hardened = run(TYPICAL).unwrap();
    assert_eq!(hardened.requested_cpu_milli, 700);
    assert_eq!(hardened.requested_memory_bytes, 320 << 20);
}

const HEAD: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: wide\n";

fn container(name: &str, port: u32, extra: &str) -> String {
    format!(
        "  - name: {name}\n    image: registry.example.com/ctf/{name}:1\n    ports: [{{containerPort: {port}}}]\n    resources: {{limits: {{cpu: 100m, memory: 64Mi}}}}\n{extra}"
    )
}

/// Appends `item(i)` while the manifest stays under `budget` bytes.
fn fill(mut text: String, budget: usize, item: impl Fn(usize) -> String) -> String {
    for i in 0.. {
        let next = item(i);
        if text.len() + next.len() > budget {
            break;
        }
        text.push_str(&next);
    }
    text
}

/// Wide, deep and alias-heavy manifests just under the manifest limit (256 KiB) or the node
/// budget, each realistic enough to pass the YAML layer so every later step does its work
/// too, with the verdict each must get ("accepted" or part of the refusal).
pub(super) fn generated_inputs() -> Vec<(String, String, &'static str)> {
    let env_entry = |i: usize| format!("    - {{name: VAR_{i}, value: \"value number {i} of a long list\"}}\n");
    let mut inputs = Vec::new();
    let pod_with = |spec_tail: &str| format!("{HEAD}spec:\n  containers:\n{}{spec_tail}", container("web", 80, ""));
    let with_metadata = |field: &str, entries: String| {
        format!(
            "{HEAD}  {field}:\n{entries}spec:\n  containers:\n{}",
            container("web", 80, "")
        )
    };

    // The typical pod's FLAG entry plus 511: the default bound of 512.
    let env_at_bound: String = (0..511).map(env_entry).collect();
    inputs.push((
        "512 env vars (the bound)".into(),
        TYPICAL.replace("    - {name: MODE, value: ctf}\n", &env_at_bound),
        "accepted",
    ));

    let big_env = fill(
        format!("{HEAD}spec:\n  containers:\n{}    env:\n", container("web", 80, "")),
        LIMIT - 64,
        env_entry,
    );
    inputs.push(("256 KiB of env".into(), big_env, "nodes"));

    // 128 annotations `{key}{i}` of one value, quoted.
    let annotations = |key: &str, value: &str| {
        let map: String = (0..128).map(|i| format!("    {key}{i}: \"{value}\"\n")).collect();
        with_metadata("annotations", map)
    };
    inputs.push((
        "128 annotations of 2 KB".into(),
        annotations("note-", &"n".repeat(1990)),
        "accepted",
    ));
    inputs.push((
        "128 annotations of escapes".into(),
        annotations("q", &"\\u00e9\\t\\x41\\n".repeat(100)),
        "accepted",
    ));
    let many_labels = fill(String::new(), LIMIT - 400, |i| format!("    label-{i}: value-{i}\n"));
    inputs.push((
        "256 KiB of labels".into(),
        with_metadata("labels", many_labels),
        "more than the 128",
    ));
    let counted_labels: String = (0..129).map(|i| format!("    l{i}: v\n")).collect();
    inputs.push((
        "129 labels".into(),
        with_metadata("labels", counted_labels),
        "more than the 128",
    ));

    let script = "echo flag; ".repeat((LIMIT - 600) / 11);
    inputs.push((
        "250 KB command string".into(),
        pod_with("").replace(
            "    resources:",
            &format!("    command: [sh, -c, \"{script}\"]\n    resources:"),
        ),
        "accepted",
    ));
    let args: String = (0..19_900).map(|i| format!("a{i},")).collect();
    inputs.push((
        "args up to the node budget".into(),
        pod_with("").replace("    resources:", &format!("    args: [{args}]\n    resources:")),
        "accepted",
    ));

    let item = |i: usize| format!("      - {{key: k{i}, path: p/{i}, mode: 0644}}\n");
    let items: String = (0..2_700).map(item).collect();
    inputs.push((
        "configMap items up to the node budget".into(),
        pod_with("  volumes:\n  - name: cfg\n    configMap:\n      name: cfg\n      defaultMode: 0755\n      items:\n")
            + &items,
        "accepted",
    ));
    let items = fill(
        pod_with("  volumes:\n  - name: cfg\n    configMap:\n      name: cfg\n      items:\n"),
        LIMIT - 64,
        item,
    );
    inputs.push(("256 KiB of configMap items".into(), items, "nodes"));

    let mut eight = format!("{HEAD}spec:\n  containers:\n");
    for c in 0..8 {
        let env: String = (0..64).map(env_entry).collect();
        let probes = "    livenessProbe: {tcpSocket: {port: 80}, periodSeconds: 10}\n    readinessProbe: {httpGet: {path: /, port: 80}}\n";
        eight.push_str(&container(
            &format!("c{c}"),
            80 + c,
            &format!("    env:\n{env}{probes}"),
        ));
    }
    inputs.push(("8 containers x 64 env, probes".into(), eight, "accepted"));

    let anchored: String = (0..512).map(env_entry).collect();
    let mut aliases = format!("{HEAD}spec:\n  containers:\n");
    for c in 0..8 {
        let env = if c == 0 {
            format!("    env: &env\n{anchored}")
        } else {
            "    env: *env\n".into()
        };
        aliases.push_str(&container(&format!("c{c}"), 80 + c, &env));
    }
    inputs.push((
        "512-entry env aliased 8x".into(),
        aliases,
        "nodes (after alias expansion)",
    ));

    let merged = fill(
        format!("{HEAD}spec:\n  containers:\n{}    env:\n", container("web", 80, "")),
        LIMIT - 64,
        |i| format!("    - {{<<: {{name: V{i}}}, value: v}}\n"),
    );
    inputs.push(("256 KiB of merge keys".into(), merged, "nodes"));

    let alias_budget = {
        let block: String = (0..900).map(|i| format!("{{k{i}: v}}, ")).collect();
        let refs = vec!["*b"; 120].join(", ");
        format!("{HEAD}  annotations: &b [{block}]\nspec: [{refs}]\n")
    };
    inputs.push((
        "aliases up to the node budget".into(),
        alias_budget,
        "nodes (after alias expansion)",
    ));

    let deep_valid = {
        let open = "[".repeat(MAX_DEPTH - 6);
        let close = "]".repeat(MAX_DEPTH - 6);
        let args = fill(String::new(), LIMIT - 2000, |i| format!("{open}{i}{close}, "));
        pod_with("").replace("    resources:", &format!("    args: [{args}]\n    resources:"))
    };
    inputs.push(("256 KiB of args nested to the limit".into(), deep_valid, "nodes"));

    let flow_deep = {
        let mut s = format!("{HEAD}spec: ") + &"{a: ".repeat(MAX_DEPTH - 4) + "[";
        s = fill(s, LIMIT - 64, |_| "{b: c}, ".into());
        s + "]" + &"}".repeat(MAX_DEPTH - 4) + "\n"
    };
    inputs.push(("256 KiB of flow maps nested to the limit".into(), flow_deep, "nodes"));

    let octal = fill(pod_with("  volumes:\n"), LIMIT - 64, |i| {
        format!(
            "  - {{name: v{i}, configMap: {{name: cfg, defaultMode: 0{:o}}}}}\n",
            i % 512
        )
    });
    inputs.push(("256 KiB of volumes with octal modes".into(), octal, "nodes"));

    for (name, yaml, problem) in crate::validate::bounded_yaml::tests::hostile_inputs() {
        inputs.push((name.to_owned(), yaml, problem));
    }
    inputs
}

/// CPU time of this thread (Linux `schedstat`), falling back to wall time elsewhere.
fn thread_cpu() -> Option<Duration> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let nanos: u64 = text.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(nanos))
}

/// Per-call CPU and wall time of `run(yaml)`, over enough calls for about 0.2 s.
fn measure(yaml: &str) -> (Duration, Duration) {
    let once = Instant::now();
    let _ = std::hint::black_box(run(yaml));
    let calls = (Duration::from_millis(200).as_nanos() / once.elapsed().as_nanos().max(1)).clamp(3, 5000) as u32;
    let (cpu, wall) = (thread_cpu(), Instant::now());
    for _ in 0..calls {
        let _ = std::hint::black_box(run(std::hint::black_box(yaml)));
    }
    let wall = wall.elapsed();
    let cpu = thread_cpu().zip(cpu).map_or(wall, |(after, before)| after - before);
    (cpu / calls, wall / calls)
}

fn verdict(yaml: &str) -> String {
    let verdict = run(yaml).map_or_else(|r| r.to_string(), |_| "accepted".to_owned());
    verdict.chars().take(70).collect()
}

/// Benchmark, not a check: prints the CPU time `validate` takes per manifest, and the worst
/// case over the generated set and over typical refusals.
/// `cargo test -p stack-core --release --lib validate::tests::bench -- --ignored --nocapture`
#[test]
#[ignore = "benchmark; prints timings"]
fn bench_validation() {
    let mut inputs: Vec<(String, String)> = vec![("typical pod".into(), TYPICAL.to_owned())];
    inputs.extend(generated_inputs().into_iter().map(|(name, yaml, _)| (name, yaml)));
    inputs.push(("manifest over the limit".into(), "a".repeat(300 * 1024)));
    let mut worst = (Duration::ZERO, String::new());
    for (name, yaml) in &inputs {
        let (cpu, wall) = measure(yaml);
        eprintln!(
            "{name:<38} {:>7} B  cpu {:>9.2?}  wall {:>9.2?}  {}",
            yaml.len(),
            cpu,
            wall,
            verdict(yaml)
        );
        if cpu > worst.0 {
            worst = (cpu, name.clone());
        }
    }
    eprintln!(
        "WORST CASE over {} inputs: {:.2?} CPU per call ({})",
        inputs.len(),
        worst.0,
        worst.1
    );

    // Typical refusals: the typical pod with one rule broken.
    let refusals = [
        (
            "securityContext",
            "  tolerations:",
            "  securityContext: {runAsUser: 0}\n  tolerations:",
        ),
        (
            "hostPath",
            "  - {name: tmp, emptyDir: {sizeLimit: 100Mi}}",
            "  - {name: tmp, hostPath: {path: /}}",
        ),
        (
            "unshared secret",
            "{name: flag, key: flag}",
            "{name: registry-creds, key: x}",
        ),
        (
            "annotation",
            "  labels:",
            "  annotations: {iam.amazonaws.com/role: admin}\n  labels:",
        ),
        ("node-local image", "redis:7", "localhost:5000/redis"),
        ("cpu no node holds", "cpu: 200m", "cpu: \"100000\""),
        ("unknown field", "    image: redis:7", "    imagee: redis:7"),
        (
            "yaml tag",
            "    image: redis:7",
            "    image: redis:7\n    workingDir: !!binary aGk=",
        ),
    ];
    let mut worst = (Duration::ZERO, "");
    for (name, from, to) in refusals {
        let yaml = TYPICAL.replace(from, to);
        let (cpu, _) = measure(&yaml);
        eprintln!("refusal: {name:<28} cpu {cpu:>9.2?}  {}", verdict(&yaml));
        if cpu > worst.0 {
            worst = (cpu, name);
        }
    }
    eprintln!("WORST TYPICAL REFUSAL: {:.2?} CPU per call ({})", worst.0, worst.1);
}

/// Every generated input gets its verdict, so the benchmark measures what it claims to.
#[test]
fn generated_inputs_get_their_verdicts() {
    let mut wrong = Vec::new();
    for (name, yaml, want) in generated_inputs() {
        match (run(&yaml), want) {
            (Ok(_), "accepted") => assert!(yaml.len() <= LIMIT, "{name}"),
            (Ok(_), want) => wrong.push(format!("{name}: accepted, expected a refusal containing {want:?}")),
            (Err(r), want) if !r.to_string().contains(want) => wrong.push(format!("{name}: {r}")),
            (Err(_), _) => {}
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// Where the time of the accepted generated inputs goes, step by step.
#[test]
#[ignore = "benchmark; prints timings"]
fn bench_stages() {
    use crate::validate::bounded_yaml::MAX_NODES;
    use crate::validate::{bounded_yaml, nesting, schema, yaml11};
    for (name, yaml, _) in generated_inputs().iter().filter(|(_, y, _)| run(y).is_ok()) {
        let time = |f: &dyn Fn()| {
            let (before, calls) = (thread_cpu().unwrap_or_default(), 20);
            for _ in 0..calls {
                f();
            }
            (thread_cpu().unwrap_or_default() - before) / calls
        };
        let first_pass = time(&|| {
            let _ = std::hint::black_box(nesting::check_depth(yaml, MAX_DEPTH, MAX_NODES));
        });
        let parse = time(&|| {
            let _ = std::hint::black_box(bounded_yaml::read(yaml, LIMIT));
        });
        let (mut raw, scan) = bounded_yaml::read(yaml, LIMIT).expect("accepted");
        yaml11::coerce(&mut raw, &scan.plain_yaml11);
        let schema = time(&|| {
            let _ = std::hint::black_box(schema::read_pod(&raw));
        });
        let pod = schema::read_pod(&raw).expect("accepted");
        let output = time(&|| {
            let _ = std::hint::black_box(serde_yaml::to_string(&pod));
        });
        let total = time(&|| {
            let _ = std::hint::black_box(run(yaml));
        });
        eprintln!(
            "{name:<38} total {total:>8.2?}  first pass {first_pass:>8.2?}  parse (with first pass) {parse:>8.2?}  schema {schema:>8.2?}  output yaml {output:>8.2?}"
        );
    }
}
