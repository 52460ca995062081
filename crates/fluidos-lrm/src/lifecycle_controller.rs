//! Lifecycle controller: retires the flavors whose source is gone.
//!
//! A controller keyed by Node or ServiceBlueprint never runs once its object
//! left the cache, so retirement is decided per Flavor instead: a managed
//! flavor whose node is gone, unlabelled or recreated, or whose blueprint is
//! gone or invalid, is deleted, unless its ledger has live entries; then it
//! stays, unsellable (`availability: false`) and pinned by the ledger
//! finalizer, until the ledger empties.

use std::sync::Arc;
use std::time::Duration;

use fluidos_api::Flavor;
use fluidos_api::common::FlavorTypeIdentifier;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;

use crate::context::{Context, flavor_ref, has_finalizer, ledger_view};
use crate::error::Error;
use crate::names;
use crate::owner::SourceKind;
use crate::service;

/// Whether a flavor's source still wants it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Source {
    /// Not a flavor this crate derives from a Node or ServiceBlueprint.
    NotOurs,
    /// The source exists and still yields this flavor.
    Alive,
    /// The source is gone or yields no (or another) flavor; why.
    Gone(String),
}

/// Decides from the caches whether `f`'s source still wants it (no I/O).
pub(crate) fn source_of(f: &Flavor, ctx: &Context) -> Source {
    let domain = &ctx.publisher.identity.domain;
    for o in f.owner_references() {
        match SourceKind::of(o) {
            Some(SourceKind::Node) => {
                let expected = names::flavor_name(domain, FlavorTypeIdentifier::K8Slice, &o.uid);
                return match ctx.nodes.get(&ObjectRef::new(&o.name)) {
                    None => Source::Gone(format!(
                        "node {} is gone or no longer labelled {}=true",
                        o.name, ctx.publisher.node_resource_label
                    )),
                    Some(n) if n.uid().as_deref() != Some(o.uid.as_str()) => {
                        Source::Gone(format!("node {} was recreated", o.name))
                    }
                    Some(n) if !ctx.publisher.selects(&n) => Source::Gone(format!(
                        "node {} is no longer labelled {}=true",
                        o.name, ctx.publisher.node_resource_label
                    )),
                    Some(_) if f.name_any() != expected => {
                        Source::Gone(format!("node {} now publishes flavor {expected}", o.name))
                    }
                    Some(_) => Source::Alive,
                };
            }
            Some(SourceKind::ServiceBlueprint) => {
                let key = ObjectRef::new(&o.name).within(ctx.namespace());
                return match ctx.blueprints.get(&key) {
                    None => Source::Gone(format!("service blueprint {} is gone", o.name)),
                    Some(b) if b.uid().as_deref() != Some(o.uid.as_str()) => {
                        Source::Gone(format!("service blueprint {} was recreated", o.name))
                    }
                    Some(b) => match service::build(&b, &ctx.publisher) {
                        Err(invalid) => Source::Gone(format!(
                            "service blueprint {} is invalid: {}",
                            o.name,
                            invalid.message()
                        )),
                        Ok(d) if d.flavor.name != f.name_any() => Source::Gone(format!(
                            "service blueprint {} now publishes flavor {}",
                            o.name, d.flavor.name
                        )),
                        Ok(_) => Source::Alive,
                    },
                };
            }
            None => {}
        }
    }
    Source::NotOurs
}

fn owner_ref(f: &Flavor, ns: &str) -> Option<ObjectReference> {
    f.owner_references().first().map(|o| ObjectReference {
        api_version: Some(o.api_version.clone()),
        kind: Some(o.kind.clone()),
        name: Some(o.name.clone()),
        uid: Some(o.uid.clone()),
        namespace: SourceKind::of(o)
            .is_none_or(SourceKind::is_namespaced)
            .then(|| ns.to_owned()),
        ..Default::default()
    })
}

/// Retires the flavor if its source is gone.
#[tracing::instrument(skip_all, fields(flavor = %flavor.name_any()))]
pub(crate) async fn reconcile(flavor: Arc<Flavor>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.caches_ready().await;
    let why = match source_of(&flavor, &ctx) {
        Source::NotOurs | Source::Alive => return Ok(Action::await_change()),
        Source::Gone(why) => why,
    };
    let name = flavor.name_any();
    let ns = ctx.namespace().to_owned();
    let regarding = flavor_ref(&ns, &name, flavor.uid());
    let view = ledger_view(Some(&flavor), Timestamp::now())?;
    if view.live {
        if ctx.withdraw(&flavor).await? {
            tracing::info!(flavor = name, reason = why, committed = %view.committed,
                "source gone; flavor kept unavailable while its ledger has live entries");
            ctx.event(
                EventType::Normal,
                "FlavorWithdrawn",
                "Withdraw",
                format!(
                    "Flavor {name} made unavailable: {why}; it is kept until its live holds and sales end"
                ),
                regarding,
                owner_ref(&flavor, &ns),
            );
        }
        return Ok(view
            .next_expiry
            .map_or_else(Action::await_change, Action::requeue));
    }
    if flavor.metadata.deletion_timestamp.is_some() {
        ctx.remove_finalizer(&flavor).await?;
        return Ok(Action::await_change());
    }
    if ctx.delete_flavor(&flavor).await? {
        tracing::info!(flavor = name, reason = why, "flavor deleted");
        ctx.event(
            EventType::Normal,
            "FlavorDeleted",
            "Delete",
            format!("Flavor {name} deleted: {why}"),
            regarding,
            owner_ref(&flavor, &ns),
        );
    }
    // With our finalizer still on it, the flavor is now terminating; the
    // update that says so brings it back here to release the finalizer.
    if has_finalizer(&flavor) {
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    Ok(Action::await_change())
}
