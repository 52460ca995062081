//! Which finalizers on an object are this node's, pure: the uninstall
//! lifts only those, and only once the controller that would have lifted
//! each (after its teardown) is gone or did not finish in time.

/// A finalizer this node puts on its own objects, and what its controller
/// does before lifting it (what may be left when the uninstall lifts it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ours {
    /// The finalizer.
    pub name: &'static str,
    /// What its controller tears down first.
    pub teardown: &'static str,
}

/// Every finalizer this node sets.
pub const OURS: [Ours; 4] = [
    Ours {
        name: fluidos_peering::allocation::teardown::FINALIZER,
        teardown: "the Liqo peering with the provider (ResourceSlice, virtual node, Identity, the Tenant on the provider)",
    },
    Ours {
        name: fluidos_service_allocation::PROVIDER_FINALIZER,
        teardown: "the sold service's namespace and workload on this cluster",
    },
    Ours {
        name: fluidos_service_allocation::CONSUMER_FINALIZER,
        teardown: "the delivered endpoints and credentials Secret on this cluster",
    },
    Ours {
        name: fluidos_lrm::names::LEDGER_FINALIZER,
        teardown: "the local resource manager's record of the capacity this Flavor sold",
    },
];

/// An object's finalizers with this node's taken out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stripped {
    /// The finalizers that stay (other controllers').
    pub kept: Vec<String>,
    /// Ours that were there, in the object's order.
    pub lifted: Vec<Ours>,
}

/// `finalizers` without this node's; `None` when none of them is ours.
pub fn strip(finalizers: &[String]) -> Option<Stripped> {
    let ours = |f: &str| OURS.iter().copied().find(|o| o.name == f);
    let lifted: Vec<Ours> = finalizers.iter().filter_map(|f| ours(f)).collect();
    if lifted.is_empty() {
        return None;
    }
    let kept = finalizers
        .iter()
        .filter(|f| ours(f).is_none())
        .cloned()
        .collect();
    Some(Stripped { kept, lifted })
}

/// The Event note for an object whose finalizers the uninstall lifted:
/// what each would have torn down, and why it did not happen.
pub fn note(lifted: &[Ours], why: &str) -> String {
    let what: Vec<&str> = lifted.iter().map(|o| o.teardown).collect();
    format!(
        "fluidos-node uninstall lifted {}: {why}; what it guards may be left: {}",
        lifted.iter().map(|o| o.name).collect::<Vec<_>>().join(", "),
        what.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn only_our_finalizers_are_lifted_and_others_keep_their_order() {
        let before = names(&[
            "liqo.io/something",
            fluidos_peering::allocation::teardown::FINALIZER,
            "foregroundDeletion",
            fluidos_lrm::names::LEDGER_FINALIZER,
        ]);
        let s = strip(&before).unwrap();
        assert_eq!(s.kept, names(&["liqo.io/something", "foregroundDeletion"]));
        assert_eq!(s.lifted, vec![OURS[0], OURS[3]]);
    }

    #[test]
    fn an_object_without_ours_is_left_alone() {
        assert_eq!(strip(&[]), None);
        assert_eq!(strip(&names(&["kubernetes", "liqo.io/x"])), None);
    }

    #[test]
    fn the_note_names_each_finalizer_and_what_may_be_left() {
        let n = note(&[OURS[1]], "the teardown did not finish in 120s");
        assert!(
            n.contains(fluidos_service_allocation::PROVIDER_FINALIZER),
            "{n}"
        );
        assert!(n.contains("did not finish in 120s"), "{n}");
        assert!(n.contains("namespace and workload"), "{n}");
    }
}
