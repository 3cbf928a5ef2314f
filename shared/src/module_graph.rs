//! Keeps the crate's modules a graph without cycles, in the layers a reader can name: each
//! top-level module may use only modules of a lower layer (or of its own, without a cycle).
//! The check reads the `crate::` paths of the code (comments aside), as a reviewer would.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Bottom first.
const LAYERS: &[&[&str]] = &[
    // What everything speaks: the domain types, the deadlines, the dashboard's data.
    &[
        "model",
        "deadlines",
        "history",
        "telemetry",
        "test_fixture",
        "kube_names",
        "late_writes",
        "quantity",
        "tenancy",
    ],
    // Settings and the clients' plumbing.
    &["config", "aws", "eks", "init_error"],
    // The manifest's rules, and the two stores of truth: DynamoDB and the cluster.
    &["validate", "store", "cluster"],
    // The one rule of a stack's life and its one removal path; the images kept on the nodes.
    &["lifecycle", "prepull"],
    // What the API does with stacks.
    &["stacks"],
    // What the reconciler does with all of them.
    &["reconcile"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

/// Top-level module → the top-level modules its code names through `crate::`.
fn uses(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut pending = vec![src.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).expect("read src") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                pending.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let relative = path.strip_prefix(src).expect("under src");
            let first = relative.components().next().expect("a component");
            let module = first.as_os_str().to_string_lossy().trim_end_matches(".rs").to_owned();
            if module == "lib" || module == "module_graph" {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("read source");
            let used = graph.entry(module.clone()).or_default();
            for line in text.lines() {
                let code = line.split("//").next().unwrap_or_default();
                for (at, _) in code.match_indices("crate::") {
                    let name: String = code[at + "crate::".len()..]
                        .chars()
                        .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                        .collect();
                    if !name.is_empty() && name != module {
                        used.insert(name);
                    }
                }
            }
        }
    }
    graph
}

/// What breaks the layering: a module using one of a higher layer, or a module in none.
fn breaches(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut wrong = Vec::new();
    for (module, used) in graph {
        let Some(layer) = layer_of(module) else {
            wrong.push(format!("{module} is in no layer of module_graph::LAYERS"));
            continue;
        };
        for other in used {
            match layer_of(other) {
                Some(other_layer) if other_layer <= layer => {}
                _ => wrong.push(format!("{module} (layer {layer}) uses {other}")),
            }
        }
    }
    wrong
}

/// The modules on a cycle: what is left once every module that uses nothing left is removed.
fn on_cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut left = graph.clone();
    loop {
        let free: Vec<String> = left
            .iter()
            .filter(|(_, used)| used.iter().all(|u| !left.contains_key(u)))
            .map(|(module, _)| module.clone())
            .collect();
        if free.is_empty() {
            return left.into_keys().collect();
        }
        for module in free {
            left.remove(&module);
        }
    }
}

fn crate_graph() -> BTreeMap<String, BTreeSet<String>> {
    uses(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
}

#[test]
fn every_module_uses_only_lower_layers() {
    let wrong = breaches(&crate_graph());
    assert!(wrong.is_empty(), "module layering broken:\n{}", wrong.join("\n"));
}

#[test]
fn the_modules_form_no_cycle() {
    assert_eq!(on_cycles(&crate_graph()), Vec::<String>::new());
}

#[test]
fn the_check_sees_a_cycle_and_a_layer_breach() {
    let dir = std::env::temp_dir().join(format!("module-graph-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("store")).expect("temp dir");
    std::fs::write(
        dir.join("model.rs"),
        "use crate::store::Store; // crate::cluster in a comment\n",
    )
    .expect("write");
    std::fs::write(
        dir.join("store/mod.rs"),
        "pub fn f() -> crate::model::StackId { todo!() }\n",
    )
    .expect("write");
    let graph = uses(&dir);
    std::fs::remove_dir_all(&dir).expect("remove temp dir");
    assert_eq!(graph["model"], BTreeSet::from(["store".to_owned()]));
    assert_eq!(on_cycles(&graph), ["model", "store"]);
    assert_eq!(breaches(&graph), ["model (layer 0) uses store"]);
}
