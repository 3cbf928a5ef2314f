//! YAML 1.1 scalars as kubectl reads them.
//!
//! kubectl (through sigs.k8s.io/yaml and go-yaml v2) resolves plain scalars with YAML 1.1
//! rules, our parser with YAML 1.2 ones. They differ on a few forms: `0755` is the octal 493
//! for kubectl and the string "0755" for YAML 1.2, `1_000` is 1000, `0800` (not octal) is the
//! decimal 800, and `yes`/`no`/`on`/`off`/`y`/`n` are booleans. Challenge manifests mount
//! scripts with `defaultMode: 0755` all the time, so such plain scalars are given kubectl's
//! meaning where the Pod field is an integer (or a boolean). Elsewhere, and when quoted, they
//! stay strings as YAML 1.2 reads them (kubectl would refuse a number in a string field).
//! Integral floats (`1e3`, `420.0`) become integers in integer fields, as kubectl's JSON does.

use std::collections::HashSet;

use serde_json::{Number, Value};

/// Pod fields (by key, anywhere in the Pod) typed as integers (or int-or-string ports).
const INT_KEYS: &[&str] = &[
    "activeDeadlineSeconds",
    "containerPort",
    "defaultMode",
    "failureThreshold",
    "fsGroup",
    "hostPort",
    "initialDelaySeconds",
    "maxSkew",
    "minDomains",
    "mode",
    "periodSeconds",
    "port",
    "priority",
    "runAsGroup",
    "runAsUser",
    "seconds",
    "successThreshold",
    "terminationGracePeriodSeconds",
    "timeoutSeconds",
    "tolerationSeconds",
    "weight",
];

/// Pod fields (by key) typed as booleans.
const BOOL_KEYS: &[&str] = &[
    "allowPrivilegeEscalation",
    "automountServiceAccountToken",
    "enableServiceLinks",
    "hostIPC",
    "hostNetwork",
    "hostPID",
    "hostUsers",
    "optional",
    "privileged",
    "readOnly",
    "readOnlyRootFilesystem",
    "runAsNonRoot",
    "setHostnameAsFQDN",
    "shareProcessNamespace",
    "stdin",
    "stdinOnce",
    "tty",
];

/// Maps whose keys are free-form names, not Pod fields.
const FREE_FORM_KEYS: &[&str] = &["labels", "annotations", "nodeSelector", "limits", "requests"];

/// Whether YAML 1.1 reads the plain scalar `text` as a number or boolean where YAML 1.2 reads
/// a string. Cheap: called on every plain scalar of the manifest.
pub(super) fn differs_from_yaml12(text: &str) -> bool {
    let Some(first) = text.bytes().next() else {
        return false;
    };
    if first.is_ascii_digit() || matches!(first, b'+' | b'-' | b'.') {
        let digits = text.strip_prefix(['+', '-']).unwrap_or(text);
        let legacy_octal = digits.len() > 1 && digits.starts_with('0') && digits.bytes().all(|b| b.is_ascii_digit());
        (legacy_octal || text.contains('_')) && int(text).is_some()
    } else {
        bool11(text).is_some() && !matches!(text, "true" | "True" | "TRUE" | "false" | "False" | "FALSE")
    }
}

/// Gives plain scalars in `plain` (see [`differs_from_yaml12`]) and integral floats kubectl's
/// meaning in the integer and boolean fields of `value`.
pub(super) fn coerce(value: &mut Value, plain: &HashSet<String>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map.iter_mut() {
                if FREE_FORM_KEYS.contains(&key.as_str()) {
                    continue;
                }
                if INT_KEYS.contains(&key.as_str()) {
                    coerce_int(child, plain);
                } else if BOOL_KEYS.contains(&key.as_str()) {
                    if let Value::String(text) = child
                        && plain.contains(text.as_str())
                        && let Some(b) = bool11(text)
                    {
                        *child = Value::Bool(b);
                    }
                } else {
                    coerce(child, plain);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|item| coerce(item, plain)),
        _ => {}
    }
}

fn coerce_int(value: &mut Value, plain: &HashSet<String>) {
    let converted = match value {
        Value::String(text) if plain.contains(text.as_str()) => int(text),
        Value::Number(n) if n.is_f64() => n.as_f64().and_then(integral),
        _ => None,
    };
    if let Some(n) = converted {
        *value = Value::Number(Number::from(n));
    }
}

/// go-yaml v2's reading of a plain scalar as an integer: underscores removed, then Go's
/// `strconv.ParseInt(s, 0, 64)` (sign, `0x`/`0o`/`0b` prefixes, a leading `0` for octal), else
/// a YAML float that happens to be integral (`0800` is 800).
pub(super) fn int(text: &str) -> Option<i64> {
    let plain: String = text.chars().filter(|c| *c != '_').collect();
    go_parse_int(&plain).or_else(|| yaml_float(&plain).and_then(integral))
}

fn go_parse_int(s: &str) -> Option<i64> {
    let (negative, unsigned) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let lower = unsigned.to_ascii_lowercase();
    let (radix, digits) = if let Some(rest) = lower.strip_prefix("0x") {
        (16, rest)
    } else if let Some(rest) = lower.strip_prefix("0o") {
        (8, rest)
    } else if let Some(rest) = lower.strip_prefix("0b") {
        (2, rest)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, &lower[1..])
    } else {
        (10, lower.as_str())
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let magnitude = i128::from_str_radix(digits, radix).ok()?;
    i64::try_from(if negative { -magnitude } else { magnitude }).ok()
}

/// go-yaml v2's float pattern: `[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?`.
fn yaml_float(s: &str) -> Option<f64> {
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(at) => (&body[..at], Some(&body[at + 1..])),
        None => (body, None),
    };
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok = match mantissa.split_once('.') {
        Some(("", frac)) => digits(frac),
        Some((int, frac)) => digits(int) && (frac.is_empty() || digits(frac)),
        None => digits(mantissa),
    };
    let exponent_ok = exponent.is_none_or(|e| digits(e.strip_prefix(['+', '-']).unwrap_or(e)));
    if !(mantissa_ok && exponent_ok) {
        return None;
    }
    s.parse::<f64>().ok().filter(|f| f.is_finite())
}

fn integral(f: f64) -> Option<i64> {
    // 2^63 as f64; the range check keeps the cast exact.
    (f.fract() == 0.0 && f.abs() < 9.223_372_036_854_776e18).then_some(f as i64)
}

/// go-yaml v2's booleans.
fn bool11(text: &str) -> Option<bool> {
    match text {
        "y" | "Y" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" | "true" | "True" | "TRUE" => Some(true),
        "n" | "N" | "no" | "No" | "NO" | "off" | "Off" | "OFF" | "false" | "False" | "FALSE" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn integers_read_like_go_yaml_v2() {
        let rows = [
            ("0755", Some(493)),
            ("0644", Some(420)),
            ("0400", Some(256)),
            ("+0755", Some(493)),
            ("-010", Some(-8)),
            ("0o755", Some(493)),
            ("0x1ED", Some(493)),
            ("0b111101101", Some(493)),
            ("1_000", Some(1000)),
            ("0_755", Some(493)),
            ("0800", Some(800)),
            ("09", Some(9)),
            ("1e3", Some(1000)),
            ("420.0", Some(420)),
            ("0", Some(0)),
            ("1.5", None),
            ("0x", None),
            ("07a", None),
            ("abc", None),
            ("", None),
            ("99999999999999999999", None),
        ];
        for (text, want) in rows {
            assert_eq!(int(text), want, "{text}");
        }
    }

    #[test]
    fn only_forms_yaml_1_2_reads_as_strings_are_noted() {
        for text in ["0755", "+0644", "1_000", "0800", "yes", "No", "on", "OFF", "y", "N"] {
            assert!(differs_from_yaml12(text), "{text}");
        }
        for text in [
            "755", "0", "0x1F", "0o755", "1.5", "true", "False", "null", "web", "0.5", "08a", "_1",
        ] {
            assert!(!differs_from_yaml12(text), "{text}");
        }
    }

    #[test]
    fn coercion_touches_only_typed_fields_of_plain_scalars() {
        let plain: HashSet<String> = ["0755", "0555", "yes", "1_000"].iter().map(|s| s.to_string()).collect();
        let mut pod = json!({
            "metadata": {"labels": {"mode": "0755"}, "annotations": {"port": "0755"}},
            "spec": {
                "volumes": [{"configMap": {"name": "c", "defaultMode": "0755", "optional": "yes",
                    "items": [{"key": "k", "path": "p", "mode": "0555"}]}},
                    {"secret": {"secretName": "s", "defaultMode": "0644"}}],
                "containers": [{"env": [{"name": "MODE", "value": "0755"}], "tty": "yes",
                    "livenessProbe": {"periodSeconds": 1e1, "httpGet": {"port": "1_000"}}}],
            }
        });
        coerce(&mut pod, &plain);
        assert_eq!(pod["metadata"]["labels"]["mode"], "0755");
        assert_eq!(pod["metadata"]["annotations"]["port"], "0755");
        let volume = &pod["spec"]["volumes"][0]["configMap"];
        assert_eq!(
            (&volume["defaultMode"], &volume["optional"]),
            (&json!(493), &json!(true))
        );
        assert_eq!(volume["items"][0]["mode"], 365);
        // Quoted in the manifest (not in `plain`): left to the schema, which refuses it.
        assert_eq!(pod["spec"]["volumes"][1]["secret"]["defaultMode"], "0644");
        let container = &pod["spec"]["containers"][0];
        assert_eq!(container["env"][0]["value"], "0755");
        assert_eq!(container["tty"], true);
        assert_eq!(container["livenessProbe"]["periodSeconds"], 10);
        assert_eq!(container["livenessProbe"]["httpGet"]["port"], 1000);
    }
}
