//! The manifest as a typed Pod: `apiVersion: v1`, `kind: Pod`, no `status`, and no field the Pod
//! schema does not know. k8s-openapi silently ignores unknown fields, so the typed Pod is encoded
//! again and compared with the input: any input key missing from it was dropped, i.e. unknown.

use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;

use super::Rejection;

/// Reads the Pod out of the parsed manifest.
pub(super) fn read_pod(raw: &Value) -> Result<Pod, Rejection> {
    let object = raw
        .as_object()
        .ok_or_else(|| Rejection::new("manifest", "must be a YAML mapping describing a Pod"))?;
    expect_string(object.get("apiVersion"), "apiVersion", "v1")?;
    expect_string(object.get("kind"), "kind", "Pod")?;
    if object.get("status").is_some_and(|status| !status.is_null()) {
        return Err(Rejection::forbidden("status"));
    }
    let pod: Pod = serde_path_to_error::deserialize(raw).map_err(|err| {
        let path = err.path().to_string();
        let path = if path == "." { "manifest".to_owned() } else { path };
        Rejection::new(path, err.into_inner().to_string())
    })?;
    let typed =
        serde_json::to_value(&pod).map_err(|err| Rejection::new("manifest", format!("cannot be encoded: {err}")))?;
    let mut path = String::new();
    if first_unknown_field(raw, &typed, &mut path) {
        return Err(Rejection::new(path, "is not a field of a Pod"));
    }
    Ok(pod)
}

fn expect_string(value: Option<&Value>, field: &str, wanted: &str) -> Result<(), Rejection> {
    match value {
        Some(Value::String(got)) if got == wanted => Ok(()),
        None | Some(Value::Null) => Err(Rejection::required(field)),
        Some(_) => Err(Rejection::new(field, format!("must be {wanted}"))),
    }
}

/// Finds the first key of `raw` absent from `typed`, leaving its path in `path`. A key whose
/// value is null is unset, as Kubernetes reads it, and is skipped.
fn first_unknown_field(raw: &Value, typed: &Value, path: &mut String) -> bool {
    match (raw, typed) {
        (Value::Object(raw), Value::Object(typed)) => {
            for (key, raw_value) in raw.iter().filter(|(_, v)| !v.is_null()) {
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
                match typed.get(key) {
                    None => return true,
                    Some(typed_value) if first_unknown_field(raw_value, typed_value, path) => {
                        return true;
                    }
                    Some(_) => path.truncate(len),
                }
            }
            false
        }
        (Value::Array(raw), Value::Array(typed)) => {
            for (index, (raw_item, typed_item)) in raw.iter().zip(typed).enumerate() {
                let len = path.len();
                path.push_str(&format!("[{index}]"));
                if first_unknown_field(raw_item, typed_item, path) {
                    return true;
                }
                path.truncate(len);
            }
            false
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(spec: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": spec})
    }

    #[test]
    fn known_fields_pass() {
        let raw = pod(json!({"containers": [{"name": "a", "image": "nginx", "ports": [{"containerPort": 80}]}]}));
        let read = read_pod(&raw).unwrap();
        assert_eq!(read.spec.unwrap().containers[0].image.as_deref(), Some("nginx"));
    }

    #[test]
    fn top_level_rules() {
        let cases = [
            (json!("just text"), "manifest must be a YAML mapping describing a Pod"),
            (json!({"kind": "Pod"}), "apiVersion is required"),
            (json!({"apiVersion": "apps/v1", "kind": "Pod"}), "apiVersion must be v1"),
            (json!({"apiVersion": "v1", "kind": "Deployment"}), "kind must be Pod"),
            (
                json!({"apiVersion": "v1", "kind": "Pod", "status": {"phase": "Running"}}),
                "status is forbidden",
            ),
        ];
        for (raw, message) in cases {
            assert_eq!(read_pod(&raw).unwrap_err().to_string(), message);
        }
    }

    #[test]
    fn unknown_fields_are_named() {
        let cases = [
            (json!({"apiVersion": "v1", "kind": "Pod", "extra": 1}), "extra"),
            (
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"nmae": "x"}}),
                "metadata.nmae",
            ),
            (
                pod(json!({"containers": [{"name": "a"}, {"name": "b", "imagee": "x"}]})),
                "spec.containers[1].imagee",
            ),
            (
                pod(json!({"containers": [{"name": "a", "ports": [{"containerPort": 1, "hostport": 2}]}]})),
                "spec.containers[0].ports[0].hostport",
            ),
            (pod(json!({"containers": [], "Volumes": []})), "spec.Volumes"),
            (pod(json!({"containers": [], "<<": {"a": 1}})), "spec.<<"),
        ];
        for (raw, path) in cases {
            let r = read_pod(&raw).unwrap_err();
            assert_eq!((r.path.as_str(), r.problem.as_str()), (path, "is not a field of a Pod"));
        }
    }

    #[test]
    fn null_values_are_unset() {
        let raw = pod(json!({"containers": [{"name": "a", "securityContext": null}], "unknownButNull": null}));
        assert!(
            read_pod(&raw).unwrap().spec.unwrap().containers[0]
                .security_context
                .is_none()
        );
    }

    #[test]
    fn type_errors_carry_the_path() {
        let raw = pod(json!({"containers": [{"name": "a", "ports": [{"containerPort": "http"}]}]}));
        let r = read_pod(&raw).unwrap_err();
        assert_eq!(r.path, "spec.containers[0].ports[0].containerPort");
        assert!(r.problem.contains("invalid type"), "{r}");
    }
}
