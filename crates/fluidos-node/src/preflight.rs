//! Startup check that every FLUIDOS CRD is installed and Established.
//!
//! Without it, controllers fail later with opaque watch errors ("the server
//! could not find the requested resource"), one per kind, in a loop.

use std::fmt;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{Api, Client, ResourceExt};

/// Why the cluster is not ready for this node.
#[derive(Debug, thiserror::Error)]
pub enum PreflightError {
    /// Some CRDs are absent or not yet Established.
    #[error(
        "the FLUIDOS CustomResourceDefinitions are not all installed ({}); apply the ones shipped in \
         deploy/crds/ (kubectl apply --server-side -f deploy/crds/), wait for them to be Established, then start the node again",
        describe(.missing, .not_established)
    )]
    CrdsNotReady {
        /// CRD names that do not exist.
        missing: Vec<String>,
        /// CRD names that exist but are not Established.
        not_established: Vec<String>,
    },
    /// The API server refused or failed a request.
    #[error("checking CustomResourceDefinition {name}: {source}{}", forbidden_hint(.source))]
    Kube {
        /// The CRD being read.
        name: String,
        /// The underlying error.
        #[source]
        source: kube::Error,
    },
}

fn describe(missing: &[String], not_established: &[String]) -> String {
    let mut parts = Vec::new();
    if !missing.is_empty() {
        parts.push(format!("missing: {}", missing.join(", ")));
    }
    if !not_established.is_empty() {
        parts.push(format!("not Established: {}", not_established.join(", ")));
    }
    parts.join("; ")
}

fn forbidden_hint(e: &kube::Error) -> &'static str {
    match e {
        kube::Error::Api(status) if status.is_forbidden() => {
            " (the node's identity needs get on customresourcedefinitions.apiextensions.k8s.io)"
        }
        _ => "",
    }
}

/// What the API server has for one expected CRD.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrdState {
    /// Present and serving.
    Established,
    /// Present, but the API server is not serving it (yet).
    NotEstablished,
    /// Absent.
    Missing,
}

impl fmt::Display for CrdState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CrdState::Established => "Established",
            CrdState::NotEstablished => "not Established",
            CrdState::Missing => "missing",
        })
    }
}

/// Classifies what a GET of the CRD returned.
pub fn crd_state(crd: Option<&CustomResourceDefinition>) -> CrdState {
    let Some(crd) = crd else {
        return CrdState::Missing;
    };
    let established = crd
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Established" && c.status == "True");
    if established {
        CrdState::Established
    } else {
        CrdState::NotEstablished
    }
}

/// Turns per-CRD states into the preflight verdict.
pub fn verdict<'a>(
    states: impl IntoIterator<Item = (&'a str, CrdState)>,
) -> Result<(), PreflightError> {
    let mut missing = Vec::new();
    let mut not_established = Vec::new();
    for (name, state) in states {
        match state {
            CrdState::Established => {}
            CrdState::NotEstablished => not_established.push(name.to_owned()),
            CrdState::Missing => missing.push(name.to_owned()),
        }
    }
    if missing.is_empty() && not_established.is_empty() {
        Ok(())
    } else {
        Err(PreflightError::CrdsNotReady {
            missing,
            not_established,
        })
    }
}

/// Checks that every CRD in [`fluidos_api::crds`] is installed and Established.
pub async fn check(client: &Client) -> Result<(), PreflightError> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut states = Vec::new();
    for expected in fluidos_api::crds() {
        let name = expected.name_any();
        let found = api
            .get_opt(&name)
            .await
            .map_err(|source| PreflightError::Kube {
                name: name.clone(),
                source,
            })?;
        let state = crd_state(found.as_ref());
        tracing::debug!(crd = %name, %state, "preflight");
        states.push((name, state));
    }
    verdict(states.iter().map(|(n, s)| (n.as_str(), *s)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
        CustomResourceDefinitionCondition, CustomResourceDefinitionStatus,
    };

    fn with_condition(type_: &str, status: &str) -> CustomResourceDefinition {
        CustomResourceDefinition {
            status: Some(CustomResourceDefinitionStatus {
                conditions: Some(vec![CustomResourceDefinitionCondition {
                    type_: type_.into(),
                    status: status.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn established_needs_the_condition_true() {
        assert_eq!(crd_state(None), CrdState::Missing);
        assert_eq!(
            crd_state(Some(&CustomResourceDefinition::default())),
            CrdState::NotEstablished
        );
        assert_eq!(
            crd_state(Some(&with_condition("NamesAccepted", "True"))),
            CrdState::NotEstablished
        );
        assert_eq!(
            crd_state(Some(&with_condition("Established", "False"))),
            CrdState::NotEstablished
        );
        assert_eq!(
            crd_state(Some(&with_condition("Established", "True"))),
            CrdState::Established
        );
    }

    #[test]
    fn verdict_lists_every_problem_and_the_fix() {
        assert!(verdict([("a.x", CrdState::Established)]).is_ok());
        let err = verdict([
            ("flavors.nodecore.fluidos.eu", CrdState::Missing),
            ("solvers.nodecore.fluidos.eu", CrdState::Established),
            ("contracts.reservation.fluidos.eu", CrdState::Missing),
            ("brokers.network.fluidos.eu", CrdState::NotEstablished),
        ])
        .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains(
                "missing: flavors.nodecore.fluidos.eu, contracts.reservation.fluidos.eu; \
                 not Established: brokers.network.fluidos.eu"
            ),
            "{msg}"
        );
        assert!(msg.contains("deploy/crds/"), "{msg}");
        assert!(!msg.contains("solvers"), "{msg}");
    }

    #[test]
    fn every_expected_crd_has_a_name() {
        let names: Vec<String> = fluidos_api::crds().iter().map(|c| c.name_any()).collect();
        assert_eq!(names.len(), 11);
        assert!(
            names.iter().all(|n| n.ends_with(".fluidos.eu")),
            "{names:?}"
        );
    }
}
