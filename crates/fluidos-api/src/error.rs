//! Decoding errors that name the field they are about.

/// A raw payload or discriminator that could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct DecodeError {
    /// Dotted path of the offending field, e.g. `spec.flavorType.typeData.characteristics.cpu`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl DecodeError {
    /// An error about `field`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        DecodeError {
            field: field.into(),
            message: message.into(),
        }
    }
}
