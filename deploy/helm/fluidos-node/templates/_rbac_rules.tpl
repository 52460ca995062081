{{/*
Least-privilege RBAC of every component, derived from the API calls its code
makes (crates/<crate>/src). Each helper renders a YAML map:
  cluster:   rules of the component's ClusterRole (cluster-scoped kinds, and
             namespaced kinds it must reach in namespaces created at run time:
             Liqo tenant namespaces, one namespace per sold service);
  namespace: rules of its Role in the release namespace (everything FLUIDOS);
  default:   rules of its Role in `default` (Events about Nodes land there;
             the API server's address for the identity fallback);
  liqo:      rules of its Role in the Liqo namespace.
A rule's comment names the code that needs it. Any change shows up in
deploy/helm/rbac-grants.txt, which the chart test compares with a rendering.
*/}}

{{/* What every component does at start (crates/fluidos-node/src). */}}
{{- define "fluidos-node.rules.common" -}}
cluster:
  # preflight.rs: every FLUIDOS CRD installed and Established (by name only).
  - apiGroups: [apiextensions.k8s.io]
    resources: [customresourcedefinitions]
    resourceNames:
      {{- include "fluidos-node.crdNames" . | nindent 6 }}
    verbs: [get]
namespace:
  # identity.rs: the node identity.
  - apiGroups: [""]
    resources: [configmaps]
    resourceNames: [fluidos-node-identity]
    verbs: [get]
  # identity.rs: without a node ID in it, the one the node drew for itself
  # (read, or created by a server-side apply, authorized as a create and a
  # patch by name).
  - apiGroups: [""]
    resources: [configmaps]
    resourceNames: [fluidos-node-generated-identity]
    verbs: [get, create, patch]
default:
  {{- if not .Values.common.configMaps.nodeIdentity.ip }}
  # identity.rs: without an identity ip, the API server's address (as Go).
  - apiGroups: [""]
    resources: [endpoints]
    resourceNames: [kubernetes]
    verbs: [get]
  {{- end }}
liqo:
  {{- if and .Values.peering.enabled (not .Values.peering.liqoClusterID) }}
  # identity.rs: this cluster's Liqo ID (get, then a watch by name until Liqo publishes it).
  - apiGroups: [""]
    resources: [configmaps]
    resourceNames: [liqo-clusterid-configmap]
    verbs: [get, list, watch]
  {{- end }}
{{- end -}}

{{/* Events (fluidos-controller/src/events.rs, kube's Recorder: create, then patch a series). */}}
{{- define "fluidos-node.rules.events" -}}
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: [create, patch]
{{- end -}}

{{/*
The REAR key's fingerprint (fluidos-node startup.rs, fluidos-rear-identity
published.rs `publish`): written at every start by the components that hold
the key, for the network manager, which may read no Secret of it
(server-side apply: a patch by name, authorized as a create by name the
first time).
*/}}
{{- define "fluidos-node.rules.rear-fingerprint" -}}
- apiGroups: [""]
  resources: [configmaps]
  resourceNames: [fluidos-node-rear-fingerprint]
  verbs: [create, patch]
{{- end -}}

{{/*
Leader election (--leader-elect; crates/fluidos-node/src/leader_election.rs,
kube-lease-manager): the Lease `fluidos-node-<component>` in the release
namespace. Call with (dict "root" $ "component" "rear-manager").
*/}}
{{- define "fluidos-node.rules.leases" -}}
{{- if .root.Values.leaderElection.enabled }}
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [create]
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  resourceNames: [fluidos-node-{{ .component }}]
  verbs: [get, patch]
{{- end }}
{{- end -}}

{{/* local-resource-manager: crates/fluidos-lrm. */}}
{{- define "fluidos-node.rules.local-resource-manager" -}}
cluster:
  # lib.rs: watches the Nodes (labelled ones become flavors) and all Pods
  # (what is already used on them).
  - apiGroups: [""]
    resources: [nodes, pods]
    verbs: [list, watch]
  # metrics.rs: node usage from metrics-server, when installed.
  - apiGroups: [metrics.k8s.io]
    resources: [nodes]
    verbs: [get]
namespace:
  # context.rs: one Flavor per node and per blueprint (server-side apply,
  # finalizer removal, deletion); lib.rs watches them.
  - apiGroups: [nodecore.fluidos.eu]
    resources: [flavors]
    verbs: [get, list, watch, create, patch, delete]
  # blueprint_controller.rs: reads ServiceBlueprints, writes their status.
  - apiGroups: [nodecore.fluidos.eu]
    resources: [serviceblueprints]
    verbs: [get, list, watch]
  - apiGroups: [nodecore.fluidos.eu]
    resources: [serviceblueprints/status]
    verbs: [patch]
  {{- include "fluidos-node.rules.events" . | nindent 2 }}
  {{- include "fluidos-node.rules.leases" (dict "root" . "component" "local-resource-manager") | nindent 2 }}
default:
  # context.rs: Events about Nodes (cluster-scoped) are recorded in `default`.
  {{- include "fluidos-node.rules.events" . | nindent 2 }}
{{- end -}}

{{/* rear-gateway: crates/fluidos-rear-gateway, the credentials executor of crates/fluidos-peer-access (src/credentials/, "credentials" below) and the provider half of crates/fluidos-service-allocation. */}}
{{- define "fluidos-node.rules.rear-gateway" -}}
cluster:
  # credentials/: a K8Slice buyer's Liqo tenant namespace is created (or
  # claimed) by the gateway; service-allocation provider.rs creates one
  # namespace per sold service (server-side apply), watches the labelled
  # ones and deletes them when the contract ends.
  - apiGroups: [""]
    resources: [namespaces]
    verbs: [get, list, watch, create, patch, delete]
  # credentials/: the peer Role `fluidos-peer` and its RoleBindings in the
  # buyers' tenant namespaces, and the Role `fluidos-peer-network` and its
  # RoleBindings in the Liqo namespace (server-side apply), watched
  # everywhere; revocation deletes the bindings.
  - apiGroups: [rbac.authorization.k8s.io]
    resources: [roles, rolebindings]
    verbs: [list, watch, create, patch, delete]
  # credentials/: granting the peer rules without holding them. `escalate`
  # lets it write the Role `fluidos-peer` (and only that name) with rules it
  # does not hold, `bind` lets it bind that Role. The alternative, holding
  # the peer rules itself in every namespace, would mean cluster-wide
  # create/delete of Secrets. rbac.guardPeerRole adds an admission policy
  # confining both to tenant namespaces and peer accounts.
  - apiGroups: [rbac.authorization.k8s.io]
    resources: [roles]
    resourceNames: [fluidos-peer]
    verbs: [bind, escalate]
  # fluidos-peer-access effective_grant.rs: before a fresh grant is handed
  # out, the API server is asked whether it enforces it yet (the RBAC
  # authorizer lags behind the RoleBinding just written).
  - apiGroups: [authorization.k8s.io]
    resources: [subjectaccessreviews]
    verbs: [create]
  {{- if .Values.peering.enabled }}
  # fluidos-peer-access guard.rs: the peer guard's admission policies
  # (what peers' ShadowPods, Pods and Services may do, the names of the namespaces
  # Liqo makes for them), applied by name and watched by label so that a
  # deleted or edited one is put back at once. The namespaces rights above
  # label peers' namespaces with their Pod Security level.
  - apiGroups: [admissionregistration.k8s.io]
    resources: [validatingadmissionpolicies, validatingadmissionpolicybindings]
    verbs: [list, watch, create]
  - apiGroups: [admissionregistration.k8s.io]
    resources: [validatingadmissionpolicies, validatingadmissionpolicybindings]
    resourceNames: [fluidos-peer-shadowpods, fluidos-peer-pods, fluidos-peer-services, fluidos-peer-volume-claims, fluidos-peer-namespaces, fluidos-peer-secrets, fluidos-peer-ingresses, fluidos-peer-endpoint-slices]
    verbs: [get, patch]
  {{- end }}
  {{- if ne (.Values.rearController.goPeeringGrant | default "off") "off" }}
  # credentials/go_consumer.rs, go_grant.rs (rearController.goPeeringGrant, off by
  # default): unmodified Go consumers' rights. The ClusterRole and the Role
  # `fluidos-go-peer` (in Liqo's namespace) are written with rules the
  # gateway does not hold (`escalate`) and bound to each Go consumer's
  # account (`bind`, a ClusterRoleBinding and a RoleBinding named after the
  # account, deleted at revocation); the admission policy confining them is
  # applied at start and probed with a dry-run Secret creation.
  - apiGroups: [rbac.authorization.k8s.io]
    resources: [roles]
    resourceNames: [fluidos-go-peer]
    verbs: [bind, escalate]
  - apiGroups: [rbac.authorization.k8s.io]
    resources: [clusterroles]
    verbs: [create]
  - apiGroups: [rbac.authorization.k8s.io]
    resources: [clusterroles]
    resourceNames: [fluidos-go-peer]
    verbs: [patch, bind, escalate]
  - apiGroups: [rbac.authorization.k8s.io]
    resources: [clusterrolebindings]
    verbs: [get, create, patch, delete]
  - apiGroups: [admissionregistration.k8s.io]
    resources: [validatingadmissionpolicies, validatingadmissionpolicybindings]
    verbs: [create]
  - apiGroups: [admissionregistration.k8s.io]
    resources: [validatingadmissionpolicies, validatingadmissionpolicybindings]
    resourceNames: [{{ printf "fluidos-go-peer.%s.fluidos.eu" .Release.Namespace }}]
    verbs: [get, patch]
  # The policy's parameters are ServiceAccounts: the API server lets only a
  # writer that may read every ServiceAccount write it.
  - apiGroups: [""]
    resources: [serviceaccounts]
    verbs: [get]
  {{- end }}
  # service-allocation provider.rs: instantiates a sold ServiceBlueprint in
  # the service's own namespace (server-side apply of the kinds in
  # crates/fluidos-blueprint/src/validate.rs ALLOWED_KINDS, nothing else),
  # watches Deployments and StatefulSets for availability, lists the
  # endpoint Service and the Pods, reads and annotates the credentials
  # Secret; service_access.rs hands that Secret to the buyer.
  - apiGroups: [""]
    resources: [configmaps, persistentvolumeclaims, serviceaccounts]
    verbs: [create, patch]
  - apiGroups: [""]
    resources: [services, pods]
    verbs: [list, create, patch]
  - apiGroups: [""]
    resources: [secrets]
    verbs: [get, create, patch]
  - apiGroups: [apps]
    resources: [deployments, statefulsets]
    verbs: [list, watch, create, patch]
  - apiGroups: [apps]
    resources: [replicasets]
    verbs: [create, patch]
  - apiGroups: [batch]
    resources: [jobs, cronjobs]
    verbs: [create, patch]
  - apiGroups: [networking.k8s.io]
    resources: [ingresses]
    verbs: [create, patch]
  {{- if eq (include "fluidos-node.serviceDelivery" .) "liqo" }}
  # service-allocation provider.rs `offload` (serviceDelivery liqo): the
  # NamespaceOffloading `offloading` of a sold service's namespace, read and
  # created (it goes with the namespace).
  - apiGroups: [offloading.liqo.io]
    resources: [namespaceoffloadings]
    verbs: [get, create]
  {{- end }}
namespace:
  # catalog.rs, book.rs: the Flavor watch cache, and the capacity ledger in
  # the Flavor's status (replace with resourceVersion).
  - apiGroups: [nodecore.fluidos.eu]
    resources: [flavors]
    verbs: [get, list, watch]
  - apiGroups: [nodecore.fluidos.eu]
    resources: [flavors/status]
    verbs: [update]
  # reserve.rs, purchase.rs, sweeper.rs: Transactions (the reservations it holds).
  - apiGroups: [reservation.fluidos.eu]
    resources: [transactions]
    verbs: [get, list, create, patch, delete]
  # purchase.rs, contract_end.rs: Contracts sold and ended; the service
  # provider watches them.
  - apiGroups: [reservation.fluidos.eu]
    resources: [contracts]
    verbs: [get, list, watch, create, delete]
  # purchase.rs, contract_end.rs: the provider's Allocation of a sale; the
  # service provider drives it (finalizer, status).
  - apiGroups: [nodecore.fluidos.eu]
    resources: [allocations]
    verbs: [get, list, watch, create, patch, delete, deletecollection]
  - apiGroups: [nodecore.fluidos.eu]
    resources: [allocations/status]
    verbs: [patch]
  # service-allocation provider.rs: the blueprint of a sold service.
  - apiGroups: [nodecore.fluidos.eu]
    resources: [serviceblueprints]
    verbs: [get]
  {{- if eq (include "fluidos-node.serviceDelivery" .) "liqo" }}
  # contract_end.rs `offloading_sellers` (serviceDelivery liqo): the account
  # of a seller of a Service delivered by Liqo is kept while a Reservation
  # buying from it is under way.
  - apiGroups: [reservation.fluidos.eu]
    resources: [reservations]
    verbs: [list]
  {{- end }}
  {{- if has "known" (splitList "," (nospace (.Values.rearController.k8sliceBuyers | default "open"))) }}
  # sale_policy.rs (k8sliceBuyers names `known`): a K8Slice buyer's key must
  # be a KnownCluster's spec.fingerprint here (a watch cache).
  - apiGroups: [network.fluidos.eu]
    resources: [knownclusters]
    verbs: [list, watch]
  {{- end }}
  # credentials/: one ServiceAccount per buyer (`fluidos-peer-<buyer>`),
  # created with its owner on a buyer ID's first sale (claim_account), then
  # applied; a bounded token for it (TokenRequest), revocation;
  # contract_end.rs lists them.
  - apiGroups: [""]
    resources: [serviceaccounts]
    verbs: [get, list, watch, create, patch, delete]
  - apiGroups: [""]
    resources: [serviceaccounts/token]
    verbs: [create]
  # peering_secret.rs: each sold Contract's peering kubeconfig lives in the
  # Secret `peering-credentials-<contract>` here (created at the sale, read
  # on a repeated purchase); contract_end.rs deletes it with the Contract.
  - apiGroups: [""]
    resources: [secrets]
    verbs: [get, create, delete]
  # credentials/: removes the peer grants earlier versions made in the
  # node's namespace (label-selected).
  - apiGroups: [rbac.authorization.k8s.io]
    resources: [roles, rolebindings]
    verbs: [deletecollection]
  {{- include "fluidos-node.rules.rear-fingerprint" . | nindent 2 }}
  {{- include "fluidos-node.rules.events" . | nindent 2 }}
  {{- include "fluidos-node.rules.leases" (dict "root" . "component" "rear-gateway") | nindent 2 }}
liqo:
  {{- if .Values.peering.enabled }}
  # credentials/tenant.rs `grant_liqo_networks`: a K8Slice buyer may read this
  # cluster's CIDRs (the Role `fluidos-peer-network`, for the consumer's
  # Liqo networking phase); the gateway holds what it grants (no
  # `escalate` needed for that Role).
  - apiGroups: [ipam.liqo.io]
    resources: [networks]
    verbs: [get, list]
  {{- end }}
{{- end -}}

{{/* rear-manager: crates/fluidos-consumer, the buyer half of crates/fluidos-service-allocation, crates/fluidos-peering. */}}
{{- define "fluidos-node.rules.rear-manager" -}}
cluster:
  {{- if .Values.peering.enabled }}
  # peering allocation.rs: Liqo's tenant namespace of the provider.
  - apiGroups: [""]
    resources: [namespaces]
    verbs: [get, create]
  # peering allocation.rs: the nonce Secrets Liqo's authentication uses, in
  # the tenant namespaces (watched by label everywhere, as Liqo creates
  # them); the signed nonce is created and deleted by the peering.
  - apiGroups: [""]
    resources: [secrets]
    verbs: [get, list, watch, create]
  # ... and, provider side, tenant_cleanup.rs deletes a gone consumer's
  # nonce Secret.
  - apiGroups: [""]
    resources: [secrets]
    resourceNames: [liqo-signed-nonce, liqo-nonce]
    verbs: [delete]
  # peering allocation.rs: the virtual node Liqo makes for a ResourceSlice.
  - apiGroups: [""]
    resources: [nodes]
    verbs: [get, list, watch]
  # peering allocation.rs: Liqo's authentication kinds.
  - apiGroups: [authentication.liqo.io]
    resources: [identities, resourceslices]
    verbs: [get, list, watch, create, delete]
  # peering slice_class.rs (provider): grants replicated ResourceSlices of
  # the FLUIDOS class, reads the consumers' Tenants.
  - apiGroups: [authentication.liqo.io]
    resources: [resourceslices/status]
    verbs: [update]
  # peering tenant_cleanup.rs (provider): once nothing is sold to a
  # consumer, its Tenant is drained (Liqo takes back its rights and what it
  # replicated, which is listed), then deleted.
  - apiGroups: [authentication.liqo.io]
    resources: [tenants]
    verbs: [get, list, watch, patch, delete]
  - apiGroups: [offloading.liqo.io]
    resources: [namespacemaps]
    verbs: [list]
  - apiGroups: [core.liqo.io]
    resources: [foreignclusters]
    verbs: [get, list, watch]
  # peering allocation.rs, slice_class.rs: Contracts watched (all namespaces).
  - apiGroups: [reservation.fluidos.eu]
    resources: [contracts]
    verbs: [list, watch]
  # slice_class.rs: its admission policy (keeps Liqo's own ResourceSlice
  # controller off the FLUIDOS class), by name.
  - apiGroups: [admissionregistration.k8s.io]
    resources: [validatingadmissionpolicies, validatingadmissionpolicybindings]
    verbs: [create]
  - apiGroups: [admissionregistration.k8s.io]
    resources: [validatingadmissionpolicies, validatingadmissionpolicybindings]
    resourceNames: [fluidos-resourceslice-class]
    verbs: [get, patch]
  # peering tenant_cleanup.rs (provider): what a gone consumer's networking
  # phase made in its tenant namespace here (its GatewayServer, with the
  # gateway Liqo runs for it, its PublicKey and Configuration) goes with its
  # Tenant.
  - apiGroups: [networking.liqo.io]
    resources: [gatewayservers, publickeies, configurations]
    verbs: [delete]
  {{- if .Values.peering.networking }}
  # peering allocation.rs networking.rs: Liqo's networking phase
  # (peering.networking) in the provider's tenant namespace here: the
  # Configuration (the provider's CIDRs), the GatewayClient (its endpoint
  # patched when the server moves) and the provider's PublicKey are read,
  # created, and deleted at unpeering (a stale PublicKey is replaced); the
  # Connections are listed by label. The GatewayClient's key Secret
  # `gw-<provider ID>` is read with the secrets rule above.
  - apiGroups: [networking.liqo.io]
    resources: [configurations, publickeies]
    verbs: [get, create]
  - apiGroups: [networking.liqo.io]
    resources: [gatewayclients]
    verbs: [get, create, patch, delete]
  - apiGroups: [networking.liqo.io]
    resources: [connections]
    verbs: [list]
  # ... and a GatewayServer for the provider is looked for: a tunnel the
  # other way round (the provider consumes from this cluster) is reused.
  - apiGroups: [networking.liqo.io]
    resources: [gatewayservers]
    verbs: [get]
  {{- end }}
  {{- end }}
  {{- if eq (include "fluidos-node.serviceDelivery" .) "liqo" }}
  # rear_manager.rs `offloading_issuer` (serviceDelivery liqo), with the
  # peer-access credentials/: the seller of a Service delivered by Liqo gets
  # Liqo's peering-user rights in its tenant namespace here, as a K8Slice
  # buyer gets them from the gateway: the Role `fluidos-peer` (written
  # without holding its rules: escalate) and its binding (bind), watched
  # everywhere; the peer-Role guard confines these writes as it does the
  # gateway's. Revocation, and recording the owner on a tenant namespace
  # an earlier version made (a namespace patch), are the gateway's.
  - apiGroups: [rbac.authorization.k8s.io]
    resources: [roles, rolebindings]
    verbs: [list, watch, create, patch]
  - apiGroups: [rbac.authorization.k8s.io]
    resources: [roles]
    resourceNames: [fluidos-peer]
    verbs: [bind, escalate]
  # fluidos-peer-access effective_grant.rs, as the gateway.
  - apiGroups: [authorization.k8s.io]
    resources: [subjectaccessreviews]
    verbs: [create]
  {{- end }}
namespace:
  # consumer solver.rs: Solvers (status only).
  - apiGroups: [nodecore.fluidos.eu]
    resources: [solvers]
    verbs: [get, list, watch]
  - apiGroups: [nodecore.fluidos.eu]
    resources: [solvers/status]
    verbs: [patch]
  # consumer discovery.rs, solver.rs: Discoveries and PeeringCandidates.
  - apiGroups: [advertisement.fluidos.eu]
    resources: [discoveries]
    verbs: [get, list, watch, create, delete]
  - apiGroups: [advertisement.fluidos.eu]
    resources: [peeringcandidates]
    verbs: [get, list, watch, create, update, patch]
  - apiGroups: [advertisement.fluidos.eu]
    resources: [discoveries/status, peeringcandidates/status]
    verbs: [patch]
  # consumer reservation.rs, solver.rs: Reservations, the buyer's
  # Transactions and Contracts (server-side apply).
  - apiGroups: [reservation.fluidos.eu]
    resources: [reservations]
    verbs: [get, list, watch, create, patch, delete]
  - apiGroups: [reservation.fluidos.eu]
    resources: [reservations/status]
    verbs: [patch]
  - apiGroups: [reservation.fluidos.eu]
    resources: [transactions]
    verbs: [get, list, watch, create, patch, delete]
  - apiGroups: [reservation.fluidos.eu]
    resources: [contracts]
    verbs: [get, list, watch, create, patch]
  # solver.rs, service-allocation consumer.rs, peering allocation.rs: the
  # buyer's Allocations.
  - apiGroups: [nodecore.fluidos.eu]
    resources: [allocations]
    verbs: [get, list, watch, create, patch]
  - apiGroups: [nodecore.fluidos.eu]
    resources: [allocations/status]
    verbs: [patch]
  # consumer lib.rs, discovery.rs: the providers to ask.
  - apiGroups: [network.fluidos.eu]
    resources: [knownclusters]
    verbs: [get, list, watch]
  # service-allocation consumer.rs: the bought service's credentials Secret
  # (`credentials-<contract>`, server-side apply, deleted with the Allocation).
  # consumer reservation.rs: each bought Contract's peering kubeconfig in
  # `peering-credentials-<contract>` (server-side apply, then a patch making
  # the Contract its owner); peering allocation.rs reads it.
  # consumer credentials_sweep.rs: lists its own (label-selected), gives an
  # unowned one to its Contract (patch) or deletes it.
  - apiGroups: [""]
    resources: [secrets]
    verbs: [get, list, watch, create, patch, delete]
  {{- if eq (include "fluidos-node.serviceDelivery" .) "liqo" }}
  # rear_manager.rs `offloading_issuer` (serviceDelivery liqo): the
  # seller's account `fluidos-peer-<seller node ID>` (created with its
  # owner, applied, watched by label) and its bounded tokens (TokenRequest;
  # the peer-token guard lets the manager mint tokens for `fluidos-peer-*`
  # accounts only).
  - apiGroups: [""]
    resources: [serviceaccounts]
    verbs: [get, list, watch, create, patch]
  - apiGroups: [""]
    resources: [serviceaccounts/token]
    verbs: [create]
  {{- end }}
  {{- include "fluidos-node.rules.rear-fingerprint" . | nindent 2 }}
  {{- include "fluidos-node.rules.events" . | nindent 2 }}
  {{- include "fluidos-node.rules.leases" (dict "root" . "component" "rear-manager") | nindent 2 }}
liqo:
  {{- if .Values.peering.enabled }}
  # peering allocation.rs: this cluster's Liqo authentication keys (signing the nonce).
  - apiGroups: [""]
    resources: [secrets]
    resourceNames: [authentication-keys]
    verbs: [get]
  {{- if or .Values.peering.networking (eq (include "fluidos-node.serviceDelivery" .) "liqo") }}
  # peering allocation.rs: Liqo's networking phase: this cluster's pod and
  # external CIDRs (IPAM Networks, listed by label) for the Configuration
  # made on the provider. With serviceDelivery liqo, credentials/ also
  # grants a seller their reading (the Role `fluidos-peer-network`, which
  # it holds).
  - apiGroups: [ipam.liqo.io]
    resources: [networks]
    verbs: [get, list]
  {{- end }}
  {{- end }}
{{- end -}}

{{/* network-manager: crates/fluidos-network-manager. */}}
{{- define "fluidos-node.rules.network-manager" -}}
namespace:
  # known_clusters.rs: `knowncluster-<nodeID>` (server-side apply of spec
  # and status), expiry sweep.
  - apiGroups: [network.fluidos.eu]
    resources: [knownclusters]
    verbs: [get, list, watch, create, patch, delete]
  - apiGroups: [network.fluidos.eu]
    resources: [knownclusters/status]
    verbs: [patch]
  # fluidos-node startup.rs (fluidos-rear-identity published.rs
  # `wait_for`): the fingerprint of the node's REAR key, which the
  # advertisements carry, watched by name until the rear-gateway or
  # rear-manager publishes it; the key's Secret is not readable here.
  - apiGroups: [""]
    resources: [configmaps]
    resourceNames: [fluidos-node-rear-fingerprint]
    verbs: [get, list, watch]
  {{- if .Values.networkManager.config.broker.enabled }}
  # The AMQP broker client: Broker objects and their TLS Secrets.
  - apiGroups: [network.fluidos.eu]
    resources: [brokers]
    verbs: [get, list, watch]
  - apiGroups: [network.fluidos.eu]
    resources: [brokers/status]
    verbs: [patch]
  - apiGroups: [""]
    resources: [secrets]
    verbs: [get, list, watch]
  {{- end }}
  {{- include "fluidos-node.rules.leases" (dict "root" . "component" "network-manager") | nindent 2 }}
{{- end -}}

{{/*
The uninstall hook (crates/fluidos-node/src/uninstall.rs and its sweep.rs),
for as long as `helm uninstall` runs it. What the node made outside the
chart is found by label, which RBAC cannot match: the cluster-wide deletes
are of every object of those kinds.
*/}}
{{- define "fluidos-node.rules.uninstall" -}}
cluster:
  # sweep.rs: the peer grants (tenant namespaces, liqo) and the Go
  # consumers' ClusterRole and bindings.
  - apiGroups: [rbac.authorization.k8s.io]
    resources: [roles, rolebindings, clusterroles, clusterrolebindings]
    verbs: [list, delete]
  # sweep.rs: the node's admission policies (peer guard, slice class, Go grant).
  - apiGroups: [admissionregistration.k8s.io]
    resources: [validatingadmissionpolicies, validatingadmissionpolicybindings]
    verbs: [list, delete]
  # sweep.rs: the tenant namespaces the gateway and the peering made, and
  # those of peers' workloads, watched until gone.
  - apiGroups: [""]
    resources: [namespaces]
    verbs: [list, watch, delete]
namespace:
  # uninstall.rs: the user's Solvers, then every Allocation, watched until gone.
  - apiGroups: [nodecore.fluidos.eu]
    resources: [solvers]
    verbs: [list, delete]
  - apiGroups: [nodecore.fluidos.eu]
    resources: [allocations]
    verbs: [get, list, watch, delete, patch]
  # uninstall.rs: the ledger finalizer of Flavors, once the node is stopped.
  - apiGroups: [nodecore.fluidos.eu]
    resources: [flavors]
    verbs: [get, list, patch]
  - apiGroups: [reservation.fluidos.eu]
    resources: [contracts]
    verbs: [get, list, delete, patch]
  # uninstall.rs: the node scaled to zero, its pods watched until gone.
  - apiGroups: [apps]
    resources: [deployments]
    verbs: [list, patch]
  - apiGroups: [""]
    resources: [pods]
    verbs: [list, watch]
  # sweep.rs: peer ServiceAccounts and the consumer's credentials Secrets.
  - apiGroups: [""]
    resources: [serviceaccounts, secrets]
    verbs: [list, delete]
  # uninstall.rs: a Warning Event on each object whose finalizer it lifts.
  {{- include "fluidos-node.rules.events" . | nindent 2 }}
{{- end -}}
