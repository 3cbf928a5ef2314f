//! Position in the list of stacks, handed to clients as an opaque string.
//!
//! Stacks are listed oldest first through the `created_at` index (template.yaml), so a
//! position is the index key of the last stack seen: its `created_at` as stored and its id.
//! The string is base64url of both with a short checksum, so an edited or truncated cursor
//! is refused rather than silently moving the page (a forged one could only start the list
//! elsewhere, which any caller can do anyway).

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jiff::Timestamp;
use sha2::{Digest, Sha256};

use crate::model::StackId;

/// Checksum bytes appended to the position.
const CHECKSUM_BYTES: usize = 8;
/// Longest cursor string accepted (a real one is about 70 characters).
const MAX_CURSOR_CHARS: usize = 256;

/// Key of one stack in creation order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListCursor {
    /// `created_at` exactly as stored (the index's sort key).
    pub(crate) created_at: String,
    pub(crate) stack_id: StackId,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("invalid cursor")]
pub struct InvalidCursor;

impl ListCursor {
    pub(crate) fn new(created_at: String, stack_id: StackId) -> Self {
        Self { created_at, stack_id }
    }

    pub fn stack_id(&self) -> &StackId {
        &self.stack_id
    }

    /// The opaque string handed to clients.
    pub fn encode(&self) -> String {
        let mut bytes = self.payload().into_bytes();
        let checksum = checksum(&bytes);
        bytes.extend_from_slice(&checksum);
        URL_SAFE_NO_PAD.encode(bytes)
    }

    /// Reads back a string made by [`encode`](Self::encode).
    pub fn decode(text: &str) -> Result<Self, InvalidCursor> {
        if text.is_empty() || text.len() > MAX_CURSOR_CHARS {
            return Err(InvalidCursor);
        }
        let bytes = URL_SAFE_NO_PAD.decode(text).map_err(|_| InvalidCursor)?;
        let split = bytes.len().checked_sub(CHECKSUM_BYTES).ok_or(InvalidCursor)?;
        let (payload, sum) = bytes.split_at(split);
        if checksum(payload) != sum {
            return Err(InvalidCursor);
        }
        let payload = std::str::from_utf8(payload).map_err(|_| InvalidCursor)?;
        let (created_at, id) = payload.split_once(' ').ok_or(InvalidCursor)?;
        created_at.parse::<Timestamp>().map_err(|_| InvalidCursor)?;
        Ok(Self {
            created_at: created_at.to_owned(),
            stack_id: id.parse().map_err(|_| InvalidCursor)?,
        })
    }

    fn payload(&self) -> String {
        format!("{} {}", self.created_at, self.stack_id.as_str())
    }
}

fn checksum(payload: &[u8]) -> [u8; CHECKSUM_BYTES] {
    let digest = Sha256::digest(payload);
    let mut sum = [0; CHECKSUM_BYTES];
    sum.copy_from_slice(&digest[..CHECKSUM_BYTES]);
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cursor() -> ListCursor {
        ListCursor::new(
            "2026-11-23T11:00:00.123456789Z".into(),
            "stack-0123456789abcdef".parse().unwrap(),
        )
    }

    #[test]
    fn round_trips_through_an_opaque_url_safe_string() {
        let text = cursor().encode();
        assert!(
            text.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
            "{text}"
        );
        assert!(!text.contains("stack-"), "{text}");
        assert_eq!(ListCursor::decode(&text).unwrap(), cursor());
    }

    #[test]
    fn edited_truncated_or_foreign_cursors_are_refused() {
        let text = cursor().encode();
        let mut edited = text.clone().into_bytes();
        edited[10] = if edited[10] == b'A' { b'B' } else { b'A' };
        let edited = String::from_utf8(edited).unwrap();
        let forged_payload = URL_SAFE_NO_PAD.encode("2026-11-23T11:00:00Z stack-0123456789abcdef");
        for bad in [
            "",
            "!!!",
            "abc",
            &text[..text.len() - 2],
            &edited,
            &forged_payload,
            &"A".repeat(MAX_CURSOR_CHARS + 1),
        ] {
            assert_eq!(ListCursor::decode(bad), Err(InvalidCursor), "{bad:?}");
        }
    }

    #[test]
    fn a_checksummed_payload_must_still_name_a_time_and_a_stack() {
        for payload in [
            "no-space",
            "yesterday stack-0123456789abcdef",
            "2026-11-23T11:00:00Z stack-XYZ",
        ] {
            let mut bytes = payload.as_bytes().to_vec();
            bytes.extend_from_slice(&checksum(payload.as_bytes()));
            assert_eq!(
                ListCursor::decode(&URL_SAFE_NO_PAD.encode(bytes)),
                Err(InvalidCursor),
                "{payload}"
            );
        }
    }
}
