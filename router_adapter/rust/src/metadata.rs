//! Per-call metadata: what a caller sends with its calls ([`crate::Client::with_metadata`],
//! [`crate::Client::with_request_id`]) and what the server sends back with its answer
//! ([`ResponseMeta`], [`crate::Error::request_id`]).

use tonic::metadata::{AsciiMetadataKey, AsciiMetadataValue, MetadataMap};
use tonic::Status;

/// The metadata key of the request id: the server takes the caller's (printable ASCII, at most
/// 128 characters) or makes one, logs it with the call and echoes it in the trailing metadata.
pub const REQUEST_ID: &str = "x-request-id";

/// Keys the client does not let a caller set: gRPC's own headers (tonic would drop or override
/// them).
fn reserved(key: &str) -> bool {
    matches!(key, "te" | "content-type" | "user-agent") || key.starts_with("grpc-")
}

/// `key: value` as an ASCII metadata entry, or INVALID_ARGUMENT saying why not.
pub(crate) fn entry(
    key: &str,
    value: &str,
) -> Result<(AsciiMetadataKey, AsciiMetadataValue), Status> {
    let parsed = AsciiMetadataKey::from_bytes(key.as_bytes()).map_err(|_| {
        Status::invalid_argument(format!(
            "metadata key {key:?}: not an ASCII gRPC metadata key (lower-case letters, digits, \
             '-', '_', '.'; binary '-bin' keys are not supported)"
        ))
    })?;
    if reserved(parsed.as_str()) {
        return Err(Status::invalid_argument(format!(
            "metadata key {key:?}: reserved by gRPC (the client sets it itself)"
        )));
    }
    let printable = value.bytes().all(|b| (b' '..=b'~').contains(&b));
    let value = AsciiMetadataValue::try_from(value)
        .ok()
        .filter(|_| printable)
        .ok_or_else(|| {
            Status::invalid_argument(format!(
                "metadata {key:?}: the value is not printable ASCII"
            ))
        })?;
    Ok((parsed, value))
}

/// The `x-request-id` entry of `metadata`, when there is one in ASCII.
pub(crate) fn request_id(metadata: &MetadataMap) -> Option<&str> {
    metadata.get(REQUEST_ID)?.to_str().ok()
}

/// What the server sent with a successful answer besides the message: the response headers and
/// trailers, where the sidecar puts the call's `x-request-id` (the caller's, or the one it made).
#[derive(Debug, Clone, Default)]
pub struct ResponseMeta {
    metadata: MetadataMap,
}

impl ResponseMeta {
    pub(crate) fn new(metadata: MetadataMap) -> ResponseMeta {
        ResponseMeta { metadata }
    }

    /// The request id the server logged the call under and echoed (`x-request-id`).
    pub fn request_id(&self) -> Option<&str> {
        request_id(&self.metadata)
    }

    /// Every entry of the response headers and trailers (without gRPC's own).
    pub fn metadata(&self) -> &MetadataMap {
        &self.metadata
    }
}
