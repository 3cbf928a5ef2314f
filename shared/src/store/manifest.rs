//! How a stack's manifest is kept in its item (pk=`MANIFEST`): zstd-compressed, as a binary
//! `pod_spec`. Items written before compression hold it as a plain string and still read.
//!
//! Hardened YAML is larger than the JSON or YAML a client sends (aliases are expanded, every
//! forced field is spelled out), and DynamoDB refuses items over 400 KB. zstd's window spans
//! a whole manifest, so what aliases repeat is stored once and even incompressible text at
//! the validator's limits fits; what does not is refused by [`StoredManifest::encode`]
//! before anything is created.

use std::io::Read;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;

use super::StoreError;

/// DynamoDB's item size limit: names and values of every attribute together.
pub const MAX_ITEM_BYTES: usize = 400 * 1024;
/// Longest hardened manifest kept. A Stack carrying it serializes to at most about twice
/// this (JSON escapes), so every response holding one stays far below Lambda's 6 MB.
pub(crate) const MAX_MANIFEST_TEXT_BYTES: usize = 1024 * 1024;

/// The attribute holding the manifest.
pub(crate) const MANIFEST_ATTR: &str = "pod_spec";
/// What the other attributes of a manifest item take: `pk`=`MANIFEST`, `sk`=stack id
/// (`stack-` + 16 hex) and the manifest attribute's name.
const ITEM_OVERHEAD_BYTES: usize = "pk".len() + "MANIFEST".len() + "sk".len() + 22 + MANIFEST_ATTR.len();
/// zstd's default level: a few milliseconds for the largest manifest.
const LEVEL: i32 = 3;

/// A manifest that cannot be kept (a client error: the manifest is too large).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnstorableManifest {
    #[error("manifest is {bytes} bytes once hardened, more than the {max} bytes a stack can keep")]
    TooLong { bytes: usize, max: usize },
    #[error(
        "manifest is {bytes} bytes once hardened and stored as {stored} bytes (compressed), \
         more than the {max} bytes a stored item can hold"
    )]
    TooLarge { bytes: usize, stored: usize, max: usize },
}

/// A manifest ready to be written, known to fit in its item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredManifest {
    value: Stored,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Stored {
    Compressed(Vec<u8>),
    /// Only if compression itself failed (out of memory): the format read before compression.
    Plain(String),
}

impl StoredManifest {
    /// Compresses `yaml` and checks that its item fits.
    pub fn encode(yaml: &str) -> Result<Self, UnstorableManifest> {
        let bytes = yaml.len();
        if bytes > MAX_MANIFEST_TEXT_BYTES {
            return Err(UnstorableManifest::TooLong {
                bytes,
                max: MAX_MANIFEST_TEXT_BYTES,
            });
        }
        let value = match zstd::bulk::compress(yaml.as_bytes(), LEVEL) {
            Ok(compressed) => Stored::Compressed(compressed),
            Err(err) => {
                tracing::warn!(error = %err, "manifest compression failed; storing it plain");
                Stored::Plain(yaml.to_owned())
            }
        };
        let manifest = Self { value };
        let stored = manifest.item_bytes();
        if stored > MAX_ITEM_BYTES {
            return Err(UnstorableManifest::TooLarge {
                bytes,
                stored,
                max: MAX_ITEM_BYTES,
            });
        }
        Ok(manifest)
    }

    /// Size of the whole manifest item as DynamoDB counts it.
    pub fn item_bytes(&self) -> usize {
        ITEM_OVERHEAD_BYTES
            + match &self.value {
                Stored::Compressed(bytes) => bytes.len(),
                Stored::Plain(text) => text.len(),
            }
    }

    /// The manifest text back, as a read decodes it.
    pub fn text(&self) -> Result<String, StoreError> {
        decode(&self.attribute())
    }

    pub(crate) fn attribute(&self) -> AttributeValue {
        match &self.value {
            Stored::Compressed(bytes) => AttributeValue::B(Blob::new(bytes.clone())),
            Stored::Plain(text) => AttributeValue::S(text.clone()),
        }
    }
}

/// The manifest text of a stored attribute: compressed (binary) or, as written before
/// compression, plain (string).
pub(crate) fn decode(value: &AttributeValue) -> Result<String, StoreError> {
    match value {
        AttributeValue::S(plain) => Ok(plain.clone()),
        AttributeValue::B(blob) => {
            let mut text = Vec::new();
            // Bounded: a corrupted item cannot make us inflate without end.
            let limit = u64::try_from(MAX_MANIFEST_TEXT_BYTES).unwrap_or(u64::MAX) + 1;
            zstd::stream::read::Decoder::with_buffer(blob.as_ref())
                .and_then(|decoder| decoder.take(limit).read_to_end(&mut text))
                .map_err(|e| StoreError::Malformed(format!("manifest does not decompress: {e}")))?;
            if text.len() > MAX_MANIFEST_TEXT_BYTES {
                return Err(StoreError::Malformed("manifest inflates past its limit".into()));
            }
            String::from_utf8(text).map_err(|_| StoreError::Malformed("manifest is not UTF-8".into()))
        }
        _ => Err(StoreError::Malformed(
            "manifest attribute is neither string nor binary".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_fixture::noise;

    #[test]
    fn compressed_manifest_reads_back_identical() {
        let yaml = "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: \"é ✓\"\n".repeat(500);
        let stored = StoredManifest::encode(&yaml).unwrap();
        assert!(stored.item_bytes() < yaml.len() / 10, "{} bytes", stored.item_bytes());
        assert_eq!(decode(&stored.attribute()).unwrap(), yaml);
    }

    #[test]
    fn what_aliases_repeat_is_stored_once_even_far_apart() {
        let block = noise(300 * 1024, 2);
        let yaml = format!("a: {block}\nb: {block}\n");
        let stored = StoredManifest::encode(&yaml).unwrap();
        assert!(stored.item_bytes() < block.len(), "{} bytes", stored.item_bytes());
        assert_eq!(decode(&stored.attribute()).unwrap(), yaml);
    }

    #[test]
    fn plain_manifests_written_before_compression_still_read() {
        let yaml = "kind: Pod\n";
        assert_eq!(decode(&AttributeValue::S(yaml.into())).unwrap(), yaml);
    }

    #[test]
    fn item_size_counts_every_attribute() {
        let stored = StoredManifest::encode("").unwrap();
        let id = "stack-0123456789abcdef";
        let names_and_values = ["pk", "MANIFEST", "sk", id, MANIFEST_ATTR].concat().len();
        let AttributeValue::B(blob) = stored.attribute() else {
            panic!("not compressed")
        };
        assert_eq!(stored.item_bytes(), names_and_values + blob.as_ref().len());
    }

    #[test]
    fn too_long_or_incompressible_manifests_are_refused() {
        let long = "a".repeat(MAX_MANIFEST_TEXT_BYTES + 1);
        assert!(matches!(
            StoredManifest::encode(&long),
            Err(UnstorableManifest::TooLong { .. })
        ));
        let noise = noise(MAX_MANIFEST_TEXT_BYTES, 1);
        let refused = StoredManifest::encode(&noise).unwrap_err();
        assert!(
            matches!(refused, UnstorableManifest::TooLarge { stored, .. } if stored > MAX_ITEM_BYTES),
            "{refused}"
        );
    }

    #[test]
    fn corrupted_items_are_malformed_not_panics() {
        let garbage = AttributeValue::B(Blob::new(vec![0x28, 0xb5, 0x2f, 0xfd, 1, 2, 3]));
        assert!(matches!(decode(&garbage), Err(StoreError::Malformed(_))));
        assert!(matches!(
            decode(&AttributeValue::N("1".into())),
            Err(StoreError::Malformed(_))
        ));
    }
}
