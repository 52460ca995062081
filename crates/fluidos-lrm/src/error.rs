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
    #[error("{step}: {source}")]
    Kube {
        /// The request that failed ([`Step`]).
        step: Step,
        /// The API error.
        #[source]
        source: kube::Error,
    },
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

/// The API request a reconcile step makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Server-side apply of a flavor.
    ApplyFlavor,
    /// Re-reading a flavor after a conflict.
    ReadFlavor,
    /// Releasing the ledger finalizer.
    RemoveFinalizer,
    /// Deleting a retired flavor.
    DeleteFlavor,
    /// Making a flavor unavailable.
    WithdrawFlavor,
    /// Writing a ServiceBlueprint's status.
    WriteBlueprintStatus,
}

impl Step {
    /// snake_case name (the `reason` label of the failure metric).
    pub fn as_str(self) -> &'static str {
        match self {
            Step::ApplyFlavor => "apply_flavor",
            Step::ReadFlavor => "read_flavor",
            Step::RemoveFinalizer => "remove_finalizer",
            Step::DeleteFlavor => "delete_flavor",
            Step::WithdrawFlavor => "withdraw_flavor",
            Step::WriteBlueprintStatus => "write_blueprint_status",
        }
    }
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Error {
    /// Wraps an API error of `step` (for `map_err`).
    pub fn kube(step: Step) -> impl FnOnce(kube::Error) -> Error {
        move |source| Error::Kube { step, source }
    }

    /// True when the API server refused the write because our view was stale.
    pub fn is_conflict(&self) -> bool {
        use fluidos_controller::ReconcileError;
        self.api_error()
            .is_some_and(fluidos_controller::api_error::is_conflict)
    }
}

impl fluidos_controller::ReconcileError for Error {
    fn step(&self) -> &'static str {
        match self {
            Error::Kube { step, .. } => step.as_str(),
            Error::Build(_) => "build_flavor",
            Error::Ledger { .. } => "read_ledger",
            Error::Config(_) => "config",
            Error::Json { .. } => "serialize",
        }
    }

    fn api_error(&self) -> Option<&kube::Error> {
        match self {
            Error::Kube { source, .. } => Some(source),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fluidos_controller::ReconcileError;

    #[test]
    fn steps_and_conflicts() {
        let conflict = kube::Error::Api(
            kube::core::Status::failure("stale", "Conflict")
                .with_code(409)
                .boxed(),
        );
        let e = Error::kube(Step::ApplyFlavor)(conflict);
        assert!(e.is_conflict());
        assert_eq!(e.step(), "apply_flavor");
        assert!(e.to_string().starts_with("apply_flavor: "), "{e}");
        let ledger = Error::Ledger {
            flavor: "f".into(),
            message: "bad".into(),
        };
        assert!(!ledger.is_conflict());
        assert_eq!(ledger.step(), "read_ledger");
    }
}
