//! How the provider exposes a service's endpoint Service outside its cluster
//! (delivery without Liqo), and the `host:port` addresses the buyer gets.

use k8s_openapi::api::core::v1::Service;
use serde_json::Value;

/// The Service type the endpoint Service is given.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ExposureMode {
    /// `type: NodePort`; addresses are `<host>:<nodePort>` (the default).
    #[default]
    NodePort,
    /// `type: LoadBalancer`; addresses are the load balancer's `<ingress>:<port>`.
    LoadBalancer,
}

impl ExposureMode {
    /// The Service `spec.type`.
    pub fn service_type(self) -> &'static str {
        match self {
            ExposureMode::NodePort => "NodePort",
            ExposureMode::LoadBalancer => "LoadBalancer",
        }
    }
}

impl std::str::FromStr for ExposureMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "nodeport" | "node-port" => Ok(ExposureMode::NodePort),
            "loadbalancer" | "load-balancer" => Ok(ExposureMode::LoadBalancer),
            other => Err(format!(
                "unknown service exposure {other:?} (expected node-port or load-balancer)"
            )),
        }
    }
}

/// The node's exposure configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Exposure {
    /// Service type given to the endpoint Service.
    pub mode: ExposureMode,
    /// Host name (or address) written into the buyer's endpoints instead of
    /// the node's address (NodePort) or the load balancer's (LoadBalancer).
    pub external_host: Option<String>,
}

/// Sets the endpoint Service's `spec.type` to the exposure's (pure).
pub fn expose(service: &mut Value, mode: ExposureMode) {
    if let Some(obj) = service.as_object_mut() {
        let spec = obj
            .entry("spec")
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
        if let Some(spec) = spec.as_object_mut() {
            spec.insert("type".to_owned(), Value::String(mode.service_type().into()));
        }
    }
}

/// The host part of `host:port` (IPv6 in brackets kept), or the whole text.
pub fn host_of(address: &str) -> &str {
    if address.starts_with('[') {
        return address.find(']').map_or(address, |end| &address[..=end]);
    }
    match address.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') && port.parse::<u16>().is_ok() => host,
        _ => address,
    }
}

/// The comma-joined `host:port` addresses of the live endpoint `service`
/// reachable from outside the cluster; `Err` says what is still missing
/// (pure). `node_host` is this node's address, used for NodePort when no
/// external host is configured.
pub fn external_endpoints(
    exposure: &Exposure,
    service: &Service,
    node_host: &str,
) -> Result<String, String> {
    let name = service.metadata.name.as_deref().unwrap_or_default();
    let spec = service.spec.clone().unwrap_or_default();
    let ports = spec.ports.unwrap_or_default();
    if ports.is_empty() {
        return Err(format!("Service {name} has no ports"));
    }
    let actual = spec.type_.as_deref().unwrap_or("ClusterIP");
    if actual != exposure.mode.service_type() {
        return Err(format!(
            "Service {name} is {actual}, not yet {}",
            exposure.mode.service_type()
        ));
    }
    let host = match (exposure.mode, exposure.external_host.as_deref()) {
        (_, Some(h)) if !h.is_empty() => h.to_owned(),
        (ExposureMode::NodePort, _) => node_host.to_owned(),
        (ExposureMode::LoadBalancer, _) => {
            let ingress = service
                .status
                .as_ref()
                .and_then(|s| s.load_balancer.as_ref())
                .and_then(|lb| lb.ingress.as_ref())
                .and_then(|i| i.first());
            match ingress.and_then(|i| i.ip.clone().or_else(|| i.hostname.clone())) {
                Some(h) => h,
                None => return Err(format!("Service {name} has no load balancer address yet")),
            }
        }
    };
    // An IPv6 address goes in brackets, or `host:port` is ambiguous.
    let host = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host
    };
    let mut out = Vec::new();
    for p in &ports {
        let port = match exposure.mode {
            ExposureMode::NodePort => match p.node_port {
                Some(n) => n,
                None => return Err(format!("Service {name} has no node port yet")),
            },
            ExposureMode::LoadBalancer => p.port,
        };
        out.push(format!("{host}:{port}"));
    }
    Ok(out.join(","))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn svc(v: Value) -> Service {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn ipv6_hosts_are_bracketed() {
        let s = svc(json!({"metadata": {"name": "db"},
            "spec": {"type": "LoadBalancer", "ports": [{"port": 5432}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "fd00::10"}]}}}));
        let lb = Exposure {
            mode: ExposureMode::LoadBalancer,
            external_host: None,
        };
        assert_eq!(
            external_endpoints(&lb, &s, "node").unwrap(),
            "[fd00::10]:5432"
        );
        let np = svc(json!({"metadata": {"name": "db"},
            "spec": {"type": "NodePort", "ports": [{"port": 5432, "nodePort": 31000}]}}));
        let exposure = Exposure {
            mode: ExposureMode::NodePort,
            external_host: None,
        };
        assert_eq!(
            external_endpoints(&exposure, &np, "2001:db8::1").unwrap(),
            "[2001:db8::1]:31000"
        );
        assert_eq!(
            external_endpoints(&exposure, &np, "[2001:db8::1]").unwrap(),
            "[2001:db8::1]:31000"
        );
    }

    #[test]
    fn modes_parse_and_set_the_type() {
        assert_eq!("node-port".parse(), Ok(ExposureMode::NodePort));
        assert_eq!("LoadBalancer".parse(), Ok(ExposureMode::LoadBalancer));
        assert!("ingress".parse::<ExposureMode>().is_err());
        let mut s = json!({"kind": "Service", "spec": {"type": "ClusterIP", "ports": []}});
        expose(&mut s, ExposureMode::NodePort);
        assert_eq!(s["spec"]["type"], "NodePort");
        let mut s = json!({"kind": "Service"});
        expose(&mut s, ExposureMode::LoadBalancer);
        assert_eq!(s["spec"]["type"], "LoadBalancer");
    }

    #[test]
    fn host_of_addresses() {
        assert_eq!(host_of("192.0.2.10:30000"), "192.0.2.10");
        assert_eq!(host_of("node.example"), "node.example");
        assert_eq!(host_of("[::1]:3004"), "[::1]");
        assert_eq!(host_of("::1"), "::1");
    }

    #[test]
    fn node_port_endpoints_use_the_node_or_the_configured_host() {
        let s = svc(
            json!({"metadata": {"name": "db"}, "spec": {"type": "NodePort",
            "ports": [{"port": 3306, "nodePort": 31000}, {"port": 1, "nodePort": 31001}]}}),
        );
        let mut e = Exposure::default();
        assert_eq!(
            external_endpoints(&e, &s, "192.0.2.10"),
            Ok("192.0.2.10:31000,192.0.2.10:31001".into())
        );
        e.external_host = Some("db.example".into());
        assert_eq!(
            external_endpoints(&e, &s, "192.0.2.10"),
            Ok("db.example:31000,db.example:31001".into())
        );
        let no_port = svc(
            json!({"metadata": {"name": "db"}, "spec": {"type": "NodePort", "ports": [{"port": 3306}]}}),
        );
        assert_eq!(
            external_endpoints(&e, &no_port, "h"),
            Err("Service db has no node port yet".into())
        );
        let cluster_ip =
            svc(json!({"metadata": {"name": "db"}, "spec": {"ports": [{"port": 3306}]}}));
        assert!(external_endpoints(&e, &cluster_ip, "h").is_err());
    }

    #[test]
    fn load_balancer_endpoints_wait_for_an_address() {
        let e = Exposure {
            mode: ExposureMode::LoadBalancer,
            external_host: None,
        };
        let pending = svc(
            json!({"metadata": {"name": "mq"}, "spec": {"type": "LoadBalancer",
            "ports": [{"port": 5672, "nodePort": 30001}]}}),
        );
        assert_eq!(
            external_endpoints(&e, &pending, "h"),
            Err("Service mq has no load balancer address yet".into())
        );
        let ready = svc(
            json!({"metadata": {"name": "mq"}, "spec": {"type": "LoadBalancer",
            "ports": [{"port": 5672}]}, "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.5"}]}}}),
        );
        assert_eq!(
            external_endpoints(&e, &ready, "h"),
            Ok("203.0.113.5:5672".into())
        );
    }
}
