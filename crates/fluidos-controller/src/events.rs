//! Event recorder setup.

use kube::runtime::events::{Recorder, Reporter};

/// The pod this process runs in, when the environment says (`POD_NAME` from
/// the downward API, else the `HOSTNAME` Kubernetes sets to the pod name).
pub fn instance_name() -> Option<String> {
    ["POD_NAME", "HOSTNAME"]
        .into_iter()
        .filter_map(|v| std::env::var(v).ok())
        .find(|v| !v.is_empty())
}

/// An events.k8s.io Recorder whose reporter is `controller` and whose instance is the pod name (POD_NAME / HOSTNAME env) when known.
pub fn recorder(client: kube::Client, controller: &str) -> Recorder {
    Recorder::new(
        client,
        Reporter {
            controller: controller.to_owned(),
            instance: instance_name(),
        },
    )
}
