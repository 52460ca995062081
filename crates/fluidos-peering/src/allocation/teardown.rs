//! Unpeering, pure: when a consumer's K8Slice Allocation is deleted (its
//! Solver was, or the user deleted it) or its Contract ended, what to delete
//! next, in `liqoctl unpeer`'s order (`liqo-peering.md` §2.5), and what is
//! still left.
//!
//! Per Contract: its ResourceSlice (Liqo then removes the VirtualNode and the
//! virtual Node), waited for until both are gone. Only when no other slice of
//! the same provider is left: unauthenticate, deleting the control-plane
//! Identity here and the Tenant on the provider (while the Contract's
//! credentials still work: once the provider revoked them, its Tenant of
//! this consumer stays there, granting nothing, until the provider's
//! `tenant_cleanup` drains and removes it), and the nonce Secrets of both
//! sides. The tenant namespaces stay, as `liqoctl unpeer` leaves them by
//! default.

/// Finalizer of a consumer K8Slice Allocation whose peering this node drives.
pub const FINALIZER: &str = "fluidos.eu/peering-consumer";

/// Annotation of a consumer Allocation naming the provider it peers with,
/// written with the finalizer.
pub const PROVIDER_ANNOTATION: &str = "fluidos.eu/peering-provider";

/// Go-style message of an Allocation whose peering was taken down.
pub const MSG_RELEASED: &str = "Contract ended, peering released";

/// What the executor observed for a teardown.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TeardownView {
    /// This Contract's ResourceSlice exists.
    pub slice: bool,
    /// The virtual Node named after the slice exists.
    pub node: bool,
    /// Other ResourceSlices for the same provider.
    pub other_slices: OtherSlices,
    /// The control-plane Identity for the provider exists.
    pub identity: bool,
    /// The signed-nonce Secret exists.
    pub signed_nonce: bool,
    /// The Contract (and so credentials for the provider) is still there.
    pub remote: bool,
    /// Networking objects for the provider are here (GatewayClient,
    /// PublicKey, Configuration).
    pub network: bool,
}

/// The other ResourceSlices of the same provider.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OtherSlices {
    /// None: this was the last Contract with the provider.
    #[default]
    None,
    /// Only slices being deleted: wait for them, so that the last of
    /// several Contracts ending at once unauthenticates (and not before
    /// Liqo has removed their replicas with the authentication).
    Terminating,
    /// Some in use: the authentication stays.
    Live,
}

/// A deletion the executor makes (a missing object counts as deleted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TeardownEffect {
    /// This Contract's ResourceSlice.
    DeleteResourceSlice,
    /// The control-plane Identity (here).
    DeleteIdentity,
    /// The signed-nonce Secret (here).
    DeleteSignedNonce,
    /// Our Tenant and nonce Secret on the provider.
    DeleteRemoteAuthentication,
    /// The GatewayClient, PublicKey and Configuration for the provider (here).
    DeleteNetwork,
    /// Our GatewayServer, PublicKey and Configuration on the provider.
    DeleteRemoteNetwork,
}

/// The decision of one teardown reconcile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Teardown {
    /// Deletions, in order.
    pub effects: Vec<TeardownEffect>,
    /// `None` when everything is gone (the finalizer may go), else what is
    /// still left, for the status message.
    pub left: Option<String>,
}

/// The next teardown step for the slice `slice` of `provider`.
pub fn teardown(provider: &str, slice: &str, view: &TeardownView) -> Teardown {
    if view.slice {
        return Teardown {
            effects: vec![TeardownEffect::DeleteResourceSlice],
            left: Some(format!(
                "deleting ResourceSlice {slice}; Liqo removes its virtual node"
            )),
        };
    }
    if view.node {
        return Teardown {
            effects: vec![],
            left: Some(format!("waiting for Liqo to remove virtual node {slice}")),
        };
    }
    match view.other_slices {
        // Other Contracts with this provider still use the authentication.
        OtherSlices::Live => {
            return Teardown {
                effects: vec![],
                left: None,
            };
        }
        OtherSlices::Terminating => {
            return Teardown {
                effects: vec![],
                left: Some(format!(
                    "waiting for the other ResourceSlices of {provider} to go"
                )),
            };
        }
        OtherSlices::None => {}
    }
    // liqoctl's order: the Identity here, then the Tenant there.
    let mut effects = Vec::new();
    if view.identity {
        effects.push(TeardownEffect::DeleteIdentity);
    }
    if view.signed_nonce {
        effects.push(TeardownEffect::DeleteSignedNonce);
    }
    if view.remote {
        effects.push(TeardownEffect::DeleteRemoteAuthentication);
    }
    if view.identity || view.signed_nonce {
        return Teardown {
            effects,
            left: Some(format!("unauthenticating from {provider}")),
        };
    }
    // Then liqoctl's network reset: the gateways, then the Configurations,
    // there (one-shot, like the Tenant) and here.
    if view.network {
        if view.remote {
            effects.push(TeardownEffect::DeleteRemoteNetwork);
        }
        effects.push(TeardownEffect::DeleteNetwork);
        return Teardown {
            effects,
            left: Some(format!("disconnecting the network from {provider}")),
        };
    }
    // Nothing local is left; the remote deletions (if any) are one-shot.
    Teardown {
        effects,
        left: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: &str = "prov";
    const S: &str = "contract-f-1234";

    fn peered() -> TeardownView {
        TeardownView {
            slice: true,
            node: true,
            other_slices: OtherSlices::None,
            identity: true,
            signed_nonce: true,
            remote: true,
            network: false,
        }
    }

    #[test]
    fn the_slice_goes_first_and_its_node_is_waited_for() {
        let t = teardown(P, S, &peered());
        assert_eq!(t.effects, [TeardownEffect::DeleteResourceSlice]);
        assert!(t.left.unwrap().contains(S));
        let v = TeardownView {
            slice: false,
            ..peered()
        };
        let t = teardown(P, S, &v);
        assert!(t.effects.is_empty(), "nothing else while the node is there");
        assert!(t.left.unwrap().contains("virtual node"));
    }

    #[test]
    fn authentication_stays_while_other_contracts_use_it() {
        let v = TeardownView {
            slice: false,
            node: false,
            other_slices: OtherSlices::Live,
            ..peered()
        };
        assert_eq!(
            teardown(P, S, &v),
            Teardown {
                effects: vec![],
                left: None
            }
        );
        // Several ending at once: wait, the last one unauthenticates.
        let v = TeardownView {
            other_slices: OtherSlices::Terminating,
            ..v
        };
        let t = teardown(P, S, &v);
        assert!(t.effects.is_empty());
        assert!(t.left.is_some());
    }

    #[test]
    fn the_last_contract_unauthenticates_on_both_sides() {
        let v = TeardownView {
            slice: false,
            node: false,
            ..peered()
        };
        let t = teardown(P, S, &v);
        assert_eq!(
            t.effects,
            [
                TeardownEffect::DeleteIdentity,
                TeardownEffect::DeleteSignedNonce,
                TeardownEffect::DeleteRemoteAuthentication
            ]
        );
        assert!(t.left.is_some());
        // Once gone here, done; a revoked provider is not waited for.
        let gone = TeardownView {
            identity: false,
            signed_nonce: false,
            remote: false,
            ..v
        };
        assert_eq!(
            teardown(P, S, &gone),
            Teardown {
                effects: vec![],
                left: None
            }
        );
        let v = TeardownView { remote: false, ..v };
        assert_eq!(
            teardown(P, S, &v).effects,
            [
                TeardownEffect::DeleteIdentity,
                TeardownEffect::DeleteSignedNonce
            ]
        );
    }

    #[test]
    fn the_network_goes_after_the_authentication_and_stays_for_other_contracts() {
        let v = TeardownView {
            slice: false,
            node: false,
            network: true,
            ..peered()
        };
        let t = teardown(P, S, &v);
        assert_eq!(
            t.effects,
            [
                TeardownEffect::DeleteIdentity,
                TeardownEffect::DeleteSignedNonce,
                TeardownEffect::DeleteRemoteAuthentication
            ],
            "unauthenticate first"
        );
        let unauthenticated = TeardownView {
            identity: false,
            signed_nonce: false,
            ..v
        };
        let t = teardown(P, S, &unauthenticated);
        assert_eq!(
            t.effects,
            [
                TeardownEffect::DeleteRemoteAuthentication,
                TeardownEffect::DeleteRemoteNetwork,
                TeardownEffect::DeleteNetwork
            ]
        );
        assert!(t.left.unwrap().contains("network"));
        // Credentials revoked: only this side's objects.
        let revoked = TeardownView {
            remote: false,
            ..unauthenticated
        };
        assert_eq!(
            teardown(P, S, &revoked).effects,
            [TeardownEffect::DeleteNetwork]
        );
        // Other Contracts with the provider keep the network.
        let shared = TeardownView {
            other_slices: OtherSlices::Live,
            ..v
        };
        assert_eq!(
            teardown(P, S, &shared),
            Teardown {
                effects: vec![],
                left: None
            }
        );
    }
}
