//! Raw JSON payloads (`runtime.RawExtension` upstream) and their typed decoding.

use serde::de::DeserializeOwned;

use crate::error::DecodeError;

/// A raw JSON payload whose shape a sibling discriminator selects.
///
/// Kept as a `serde_json::Value` so unknown payloads survive a round trip
/// byte for byte; decode it with [`decode`].
pub type RawObject = serde_json::Value;

/// Schema of a raw payload: an object the API server must not prune.
pub fn preserve_unknown_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// Schema of an optional raw payload (the same; optionality lives in `required`).
pub fn preserve_unknown_object_opt(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
    preserve_unknown_object(g)
}

/// Decodes a raw payload into `T`, naming the failing field as `field.<inner path>`.
pub fn decode<T: DeserializeOwned>(field: &str, value: &RawObject) -> Result<T, DecodeError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let inner = e.path().to_string();
        let path = if inner == "." || inner.is_empty() {
            field.to_owned()
        } else {
            format!("{field}.{inner}")
        };
        DecodeError::new(path, e.into_inner().to_string())
    })
}

/// The empty object, the default for raw payloads.
pub fn empty_object() -> RawObject {
    serde_json::Value::Object(serde_json::Map::new())
}
