//! CPU cost of keeping a manifest: hardening is the validator's, this measures what the store
//! adds per create (compress and size it) and per stack read (decompress it), for manifests at
//! the validator's limits: 256 KiB with an env list shared through an alias (about 520 KB once
//! hardened), compressible text and noise. Pure CPU, no environment needed.
//!
//! `cargo run --release -p stack-tests --bin bench-manifest -- [--runs 50]`

use std::time::{Duration, Instant};

use stack_core::{Config, Protocol, StackId, StoredManifest, TargetPort, validate};
use stack_tests::manifests::{ENV_VALUE_BYTES, alias_env_pod, noise, prose};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let runs = match args.iter().position(|a| a == "--runs") {
        Some(i) => args.get(i + 1).ok_or("--runs needs a number")?.parse()?,
        None => 50,
    };
    let config = Config::from_lookup(|name| (name == "API_KEY").then(|| "bench".to_owned()))?;
    let policy = config.validation.clone();
    let ports = [TargetPort {
        container_port: 80,
        protocol: Protocol::Tcp,
    }];
    for (name, manifest) in [
        ("prose", alias_env_pod(|i| prose(ENV_VALUE_BYTES, i))),
        ("noise", alias_env_pod(|i| noise(ENV_VALUE_BYTES, i as u64 + 1))),
    ] {
        let hardened = validate(&manifest, &ports, &StackId::generate(), &policy)?.yaml;
        let mut encode = Vec::with_capacity(runs);
        let mut decode = Vec::with_capacity(runs);
        let mut stored = None;
        for _ in 0..runs {
            let started = Instant::now();
            let manifest = StoredManifest::encode(&hardened)?;
            encode.push(started.elapsed());
            let started = Instant::now();
            let text = manifest.text()?;
            decode.push(started.elapsed());
            assert_eq!(text, hardened);
            stored = Some(manifest.item_bytes());
        }
        println!(
            "{name}: input {} B, hardened {} B, stored item {} B; encode median {:.2} ms max {:.2} ms; \
             decode median {:.2} ms max {:.2} ms ({runs} runs)",
            manifest.len(),
            hardened.len(),
            stored.unwrap_or_default(),
            median_ms(&mut encode),
            max_ms(&encode),
            median_ms(&mut decode),
            max_ms(&decode),
        );
    }
    Ok(())
}

fn median_ms(samples: &mut [Duration]) -> f64 {
    samples.sort();
    samples.get(samples.len() / 2).map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

fn max_ms(samples: &[Duration]) -> f64 {
    samples.iter().max().map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}
