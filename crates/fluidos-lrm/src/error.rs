//! Errors of the local resource manager.

/// A configuration value [`crate::run`] cannot start with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A min/step flag is not a Kubernetes quantity.
    #[error("--{flag} {value:?} is not a Kubernetes quantity: {message}")]
    Quantity {
        /// Go flag name, e.g. `cpu-min`.
        flag: &'static str,
        /// The value given.
        value: String,
        /// Why it does not parse.
        message: String,
    },
    /// The node identity lacks a domain or node ID.
    #[error("the node identity needs a domain and a nodeID (ConfigMap fluidos-node-identity)")]
    Identity,
    /// The node resource label key is empty.
    #[error("--node-resource-label must not be empty")]
    Label,
    /// The namespace is empty.
    #[error("the flavor namespace must not be empty")]
    Namespace,
}

/// Why a flavor could not be computed from API data (pure builders).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// The object lacks a field every stored object has (name, uid).
    #[error("{kind} has no metadata.{field}")]
    MissingMetadata {
        /// Object kind.
        kind: &'static str,
        /// `name` or `uid`.
        field: &'static str,
    },
    /// A quantity in the object does not parse.
    #[error("{field} {value:?} is not a quantity: {message}")]
    Quantity {
        /// Where the quantity is, e.g. `status.allocatable.cpu`.
        field: String,
        /// The string found.
        value: String,
        /// Why it does not parse.
        message: String,
    },
}

/// Why a reconcile failed; the controllers retry after a delay.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API request failed.
    #[error("kube: {0}")]
    Kube(#[from] kube::Error),
    /// The flavor could not be computed.
    #[error(transparent)]
    Build(#[from] BuildError),
    /// A ledger entry on the flavor does not parse.
    #[error("flavor {flavor}: ledger: {message}")]
    Ledger {
        /// Flavor name.
        flavor: String,
        /// What is wrong.
        message: String,
    },
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A serialization failure (should not happen).
    #[error("serializing {what}: {source}")]
    Json {
        /// What was serialized.
        what: &'static str,
        /// The error.
        #[source]
        source: serde_json::Error,
    },
}

impl Error {
    /// True when the API server refused the write because our view was stale.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Kube(kube::Error::Api(s)) if s.code == 409)
    }
}
