//! Kubernetes' name rules, as the apiserver applies them (`k8s.io/apimachinery`'s
//! validation): for the validator's labels and annotations and the configuration's names.

/// A DNS label (RFC 1123): `[a-z0-9-]`, alphanumeric at both ends, not empty. The 63-character
/// limit is the caller's: a subdomain's parts do not have it.
pub(crate) fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// A DNS subdomain (RFC 1123): dot-separated labels, at most 253 characters.
pub(crate) fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// A qualified name (label and annotation keys, taint keys): `[subdomain/]name`.
pub(crate) fn is_qualified_name(key: &str) -> bool {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    prefix.is_none_or(is_dns_subdomain) && !name.is_empty() && is_label_value(name)
}

/// A label value: at most 63 of `[A-Za-z0-9._-]`, alphanumeric at both ends (empty allowed).
pub(crate) fn is_label_value(value: &str) -> bool {
    value.is_empty()
        || (value.len() <= 63
            && value
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            && value.as_bytes()[0].is_ascii_alphanumeric()
            && value.as_bytes()[value.len() - 1].is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_apiservers_rules() {
        assert!(is_dns_subdomain("gvisor") && is_dns_subdomain("sandbox.example.com"));
        assert!(!is_dns_subdomain("Gvisor") && !is_dns_subdomain("a..b") && !is_dns_subdomain("-a"));
        assert!(!is_dns_subdomain(&"a".repeat(254)));
        assert!(is_qualified_name("app") && is_qualified_name("example.com/stacks"));
        assert!(!is_qualified_name("a/b/c") && !is_qualified_name("example.com/") && !is_qualified_name("/x"));
        assert!(!is_qualified_name(&format!("x/{}", "a".repeat(64))));
        assert!(is_label_value("") && is_label_value("v1.2_3") && !is_label_value("-v") && !is_label_value("v!"));
    }
}
