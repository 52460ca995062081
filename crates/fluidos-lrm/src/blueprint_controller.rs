//! ServiceBlueprint controller: one Service flavor per valid blueprint, and a
//! status saying what became of it (fetch → validate/build → apply → status).

use std::sync::Arc;

use fluidos_api::flavor::ServiceFlavor;
use fluidos_api::service_blueprint::{ServiceBlueprint, ServiceBlueprintStatus};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use crate::context::Context;
use crate::error::{Error, Step};
use crate::service::{self, Invalid};

/// The condition type this controller maintains.
pub const READY: &str = "Ready";
/// Reason of `Ready=True`.
pub const PUBLISHED: &str = "FlavorPublished";

/// The status a blueprint should have (pure): `Ready` with `observedGeneration`,
/// keeping `lastTransitionTime` while the condition's status is unchanged.
pub(crate) fn desired_status(
    previous: Option<&ServiceBlueprintStatus>,
    generation: Option<i64>,
    outcome: Result<(&str, &ServiceFlavor), &Invalid>,
    now: Timestamp,
) -> ServiceBlueprintStatus {
    let (status, reason, message, flavors) = match outcome {
        Ok((flavor, sf)) => (
            "True",
            PUBLISHED.to_owned(),
            format!("Service flavor {flavor} is published"),
            vec![sf.clone()],
        ),
        Err(invalid) => (
            "False",
            invalid.reason().to_owned(),
            invalid.message(),
            Vec::new(),
        ),
    };
    let before = previous
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == READY));
    let last_transition_time = match before {
        Some(b) if b.status == status => b.last_transition_time.clone(),
        _ => Time(now),
    };
    ServiceBlueprintStatus {
        service_flavors: Some(flavors),
        conditions: Some(vec![Condition {
            type_: READY.to_owned(),
            status: status.to_owned(),
            reason,
            message,
            observed_generation: generation,
            last_transition_time,
        }]),
        observed_generation: generation,
    }
}

fn ready_condition(s: Option<&ServiceBlueprintStatus>) -> Option<&Condition> {
    s?.conditions.as_ref()?.iter().find(|c| c.type_ == READY)
}

/// Reconciles one blueprint.
#[tracing::instrument(skip_all, fields(blueprint = %bp.name_any()))]
pub(crate) async fn reconcile(
    bp: Arc<ServiceBlueprint>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    ctx.caches_ready().await;
    let name = bp.name_any();
    let built = service::build(&bp, &ctx.publisher);
    let mut next = None;
    if let Ok(d) = &built {
        next = ctx.ensure(&d.flavor, false).await?.ledger.next_expiry;
    }
    // An invalid blueprint's old flavor is retired by the lifecycle controller.
    let outcome = match &built {
        Ok(d) => Ok((d.flavor.name.as_str(), &d.service)),
        Err(e) => Err(e),
    };
    let status = desired_status(
        bp.status.as_ref(),
        bp.meta().generation,
        outcome,
        Timestamp::now(),
    );
    if bp.status.as_ref() != Some(&status) {
        let api: Api<ServiceBlueprint> = Api::namespaced(ctx.client.clone(), ctx.namespace());
        api.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status})),
        )
        .await
        .map_err(Error::kube(Step::WriteBlueprintStatus))?;
        let before = ready_condition(bp.status.as_ref());
        let after = ready_condition(Some(&status));
        let changed = |b: &Condition, a: &Condition| {
            (&b.status, &b.reason, &b.message, b.observed_generation)
                != (&a.status, &a.reason, &a.message, a.observed_generation)
        };
        if let (Err(invalid), Some(a)) = (&built, after)
            && before.is_none_or(|b| changed(b, a))
        {
            tracing::warn!(
                blueprint = name,
                reason = invalid.reason(),
                "{}",
                invalid.message()
            );
            ctx.event(
                EventType::Warning,
                invalid.reason(),
                "Validate",
                invalid.message(),
                bp.object_ref(&()),
                None,
            );
        }
    }
    Ok(next.map_or_else(Action::await_change, Action::requeue))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sf() -> ServiceFlavor {
        ServiceFlavor {
            name: "db".into(),
            ..Default::default()
        }
    }

    #[test]
    fn status_keeps_transition_time_and_reports_generation() {
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let t1: Timestamp = "2026-01-01T00:05:00Z".parse().unwrap();
        let s0 = desired_status(None, Some(1), Ok(("fl", &sf())), t0);
        let c = &s0.conditions.as_ref().unwrap()[0];
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", PUBLISHED));
        assert_eq!(c.observed_generation, Some(1));
        assert_eq!(s0.observed_generation, Some(1));
        assert_eq!(s0.service_flavors, Some(vec![sf()]));

        // Same outcome later, new generation: transition time kept.
        let s1 = desired_status(Some(&s0), Some(2), Ok(("fl", &sf())), t1);
        let c1 = &s1.conditions.as_ref().unwrap()[0];
        assert_eq!(c1.last_transition_time, Time(t0));
        assert_eq!(c1.observed_generation, Some(2));

        // Turning invalid: new transition time, no flavors, reason and message.
        let bad = Invalid::UnknownCategory {
            category: "toaster".into(),
        };
        let s2 = desired_status(Some(&s1), Some(3), Err(&bad), t1);
        let c2 = &s2.conditions.as_ref().unwrap()[0];
        assert_eq!(
            (c2.status.as_str(), c2.reason.as_str()),
            ("False", "UnknownCategory")
        );
        assert!(c2.message.contains("toaster"));
        assert_eq!(c2.last_transition_time, Time(t1));
        assert_eq!(s2.service_flavors, Some(vec![]));
    }
}
