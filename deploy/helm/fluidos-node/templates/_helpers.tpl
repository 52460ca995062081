{{/* Chart name, truncated to a DNS label. */}}
{{- define "fluidos-node.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Prefix of every object's name: the release name, with the chart name unless it contains it. */}}
{{- define "fluidos-node.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/*
The components, in start order: values key, the `--components` name.
Each gets its own Deployment, ServiceAccount and RBAC.
*/}}
{{- define "fluidos-node.components" -}}
localResourceManager: local-resource-manager
rearController: rear-gateway
rearManager: rear-manager
networkManager: network-manager
{{- end -}}

{{/*
serviceDelivery, checked: `rear` or `liqo`, and `liqo` only with peering
(the reverse peering is Liqo's).
*/}}
{{- define "fluidos-node.serviceDelivery" -}}
{{- $delivery := .Values.serviceDelivery | default "rear" -}}
{{- if not (has $delivery (list "rear" "liqo")) -}}
{{- fail (printf "serviceDelivery must be rear or liqo, not %v" $delivery) -}}
{{- end -}}
{{- if and (eq $delivery "liqo") (not .Values.peering.enabled) -}}
{{- fail "serviceDelivery=liqo needs peering.enabled: the service is delivered through a reverse Liqo peering" -}}
{{- end -}}
{{- if and (eq $delivery "liqo") .Values.rearManager.enabled (not .Values.rearController.enabled) -}}
{{- fail "serviceDelivery=liqo needs rearController.enabled with rearManager: the REAR gateway revokes the sellers' accounts the rear-manager issues" -}}
{{- end -}}
{{- $delivery -}}
{{- end -}}

{{/*
peering.podSecurity, checked: the Pod Security level of the namespaces Liqo
makes here for peers' workloads (`--peer-pod-security`). `privileged` lets
any K8Slice buyer take this cluster's nodes over: it renders only with
peering.podSecurityAllowPrivileged=true.
*/}}
{{- define "fluidos-node.peerPodSecurity" -}}
{{- $level := .Values.peering.podSecurity | default "restricted" -}}
{{- if not (has $level (list "restricted" "baseline" "privileged")) -}}
{{- fail (printf "peering.podSecurity must be restricted, baseline or privileged, not %v" $level) -}}
{{- end -}}
{{- if and (eq $level "privileged") (not .Values.peering.podSecurityAllowPrivileged) -}}
{{- fail "peering.podSecurity=privileged lets any peer that buys a K8Slice run privileged, host-network pods with the node's filesystem mounted here: it needs peering.podSecurityAllowPrivileged=true as well" -}}
{{- end -}}
{{- $level -}}
{{- end -}}

{{/* Labels every object carries. */}}
{{- define "fluidos-node.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "fluidos-node.name" . }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: fluidos
{{- end -}}

{{/*
Selector labels of one component (stable across chart versions, unlike the
Go chart's, which include the version and break upgrades).
Call with (dict "root" $ "component" "rear-gateway").
*/}}
{{- define "fluidos-node.selectorLabels" -}}
app.kubernetes.io/name: {{ include "fluidos-node.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name | quote }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Name of a component's objects (Deployment, ServiceAccount, RBAC). */}}
{{- define "fluidos-node.componentName" -}}
{{- printf "%s-%s" (include "fluidos-node.fullname" .root) .component | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The image of a component: its Go `imageName` when changed from the Go image, else image.repository. */}}
{{- define "fluidos-node.image" -}}
{{- $v := index .root.Values .key -}}
{{- $repo := .root.Values.image.repository -}}
{{- if and $v.imageName (not (hasPrefix "ghcr.io/fluidos-project/" $v.imageName)) -}}
{{- $repo = $v.imageName -}}
{{- end -}}
{{- printf "%s:%s" $repo (default .root.Chart.AppVersion .root.Values.tag) -}}
{{- end -}}

{{/* The port peers dial: the NodePort for a NodePort Service, else the Service port. */}}
{{- define "fluidos-node.identityPort" -}}
{{- $gw := .Values.rearController.service.gateway -}}
{{- if eq $gw.type "NodePort" -}}
{{- required "rearController.service.gateway.nodePort.port must be set with a NodePort gateway Service: it is the port other nodes dial" $gw.nodePort.port -}}
{{- else -}}
{{- $gw.port -}}
{{- end -}}
{{- end -}}

{{/* The FLUIDOS CRDs, by name: what the node's preflight reads. */}}
{{- define "fluidos-node.crdNames" -}}
- discoveries.advertisement.fluidos.eu
- peeringcandidates.advertisement.fluidos.eu
- brokers.network.fluidos.eu
- knownclusters.network.fluidos.eu
- allocations.nodecore.fluidos.eu
- flavors.nodecore.fluidos.eu
- serviceblueprints.nodecore.fluidos.eu
- solvers.nodecore.fluidos.eu
- contracts.reservation.fluidos.eu
- reservations.reservation.fluidos.eu
- transactions.reservation.fluidos.eu
{{- end -}}

{{/*
"true" when the REAR gateway tells buyers apart by their source address:
plain-HTTP sales (bound to the address), or a k8sliceBuyers setting that
lists addresses or networks.
*/}}
{{- define "fluidos-node.buyersByAddress" -}}
{{- $byAddress := ne (.Values.rearController.plainHttpSales | default "off") "off" -}}
{{- range (splitList "," (nospace (.Values.rearController.k8sliceBuyers | default "open"))) -}}
{{- if and (ne . "") (ne . "open") (ne . "known") (not (hasPrefix "sha256:" .)) -}}
{{- $byAddress = true -}}
{{- end -}}
{{- end -}}
{{- if $byAddress -}}true{{- end -}}
{{- end -}}

{{/*
"true" when the gateway's Service keeps clients' source addresses
(externalTrafficPolicy Local, for NodePort and LoadBalancer): only then can
the gateway count or admit buyers by address. Otherwise kube-proxy replaces
them with a node's, every buyer entering through one node looks alike, and
the per-address hold cap is turned off (it would cap them all together).
*/}}
{{- define "fluidos-node.keepsClientAddresses" -}}
{{- if and (ne .Values.rearController.service.gateway.type "ClusterIP") (include "fluidos-node.buyersByAddress" .) -}}true{{- end -}}
{{- end -}}
