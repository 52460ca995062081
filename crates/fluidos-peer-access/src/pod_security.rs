//! The Pod Security level of the namespaces Liqo makes for peers'
//! workloads, and what each level lets a container add.

use std::fmt;
use std::str::FromStr;

/// Label by which Kubernetes' Pod Security admission enforces a level on a
/// namespace's pods.
pub const ENFORCE_LABEL: &str = "pod-security.kubernetes.io/enforce";
/// The version of the level's rules enforced.
pub const ENFORCE_VERSION_LABEL: &str = "pod-security.kubernetes.io/enforce-version";
/// Label saying the node set the two above (and keeps them).
pub const GUARDED_LABEL: &str = "fluidos.eu/peer-pod-security";

/// The Pod Security Standards level a peer's pods run under here.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PodSecurityLevel {
    /// Kubernetes' `restricted` level: non-root, no privilege escalation,
    /// every capability dropped but `NET_BIND_SERVICE`, a seccomp profile.
    #[default]
    Restricted,
    /// Kubernetes' `baseline` level: no privileged or host access, the
    /// container runtime's default capabilities (for images that need root).
    Baseline,
    /// No Pod Security level: peers' pods may do anything a pod can,
    /// including take the node over. Only with an explicit opt-in
    /// (`--peer-pod-security-allow-privileged`); never a default.
    Privileged,
}

/// Capabilities `baseline` lets a container add (Kubernetes' list).
pub const BASELINE_CAPABILITIES: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];
/// Capabilities `restricted` lets a container add.
pub const RESTRICTED_CAPABILITIES: &[&str] = &["NET_BIND_SERVICE"];

impl PodSecurityLevel {
    /// The level's name, as Pod Security admission reads it.
    pub fn as_str(self) -> &'static str {
        match self {
            PodSecurityLevel::Restricted => "restricted",
            PodSecurityLevel::Baseline => "baseline",
            PodSecurityLevel::Privileged => "privileged",
        }
    }

    /// The capabilities a container may add at this level; `None`: any.
    pub fn addable_capabilities(self) -> Option<&'static [&'static str]> {
        match self {
            PodSecurityLevel::Restricted => Some(RESTRICTED_CAPABILITIES),
            PodSecurityLevel::Baseline => Some(BASELINE_CAPABILITIES),
            PodSecurityLevel::Privileged => None,
        }
    }

    /// The level `requested` with the opt-in `allow_privileged`: `privileged`
    /// without the opt-in is refused, saying why.
    pub fn checked(requested: PodSecurityLevel, allow_privileged: bool) -> Result<Self, String> {
        if requested == PodSecurityLevel::Privileged && !allow_privileged {
            return Err(
                "--peer-pod-security privileged lets any peer that buys a K8Slice run privileged, \
                 host-network pods with the node's filesystem mounted on this cluster's nodes: \
                 it needs --peer-pod-security-allow-privileged as well (docs/peer-workloads.md)"
                    .to_owned(),
            );
        }
        Ok(requested)
    }
}

impl fmt::Display for PodSecurityLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for PodSecurityLevel {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "restricted" => Ok(PodSecurityLevel::Restricted),
            "baseline" => Ok(PodSecurityLevel::Baseline),
            "privileged" => Ok(PodSecurityLevel::Privileged),
            other => Err(format!(
                "{other:?} is no Pod Security level: expected `restricted`, `baseline` or `privileged`"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn levels_read_and_print_as_pod_security_names() {
        for level in [
            PodSecurityLevel::Restricted,
            PodSecurityLevel::Baseline,
            PodSecurityLevel::Privileged,
        ] {
            assert_eq!(level.to_string().parse::<PodSecurityLevel>(), Ok(level));
        }
        assert_eq!(PodSecurityLevel::default(), PodSecurityLevel::Restricted);
        let e = "Restricted".parse::<PodSecurityLevel>().unwrap_err();
        assert!(e.contains("restricted"), "{e}");
    }

    #[test]
    fn privileged_needs_the_explicit_opt_in() {
        let e = PodSecurityLevel::checked(PodSecurityLevel::Privileged, false).unwrap_err();
        assert!(e.contains("--peer-pod-security-allow-privileged"), "{e}");
        assert_eq!(
            PodSecurityLevel::checked(PodSecurityLevel::Privileged, true),
            Ok(PodSecurityLevel::Privileged)
        );
        assert_eq!(
            PodSecurityLevel::checked(PodSecurityLevel::Baseline, false),
            Ok(PodSecurityLevel::Baseline)
        );
    }

    #[test]
    fn restricted_adds_only_net_bind_service_and_baseline_the_runtime_defaults() {
        assert_eq!(
            PodSecurityLevel::Restricted.addable_capabilities(),
            Some(&["NET_BIND_SERVICE"][..])
        );
        let baseline = PodSecurityLevel::Baseline.addable_capabilities().unwrap();
        assert!(baseline.contains(&"CHOWN") && !baseline.contains(&"SYS_ADMIN"));
        assert_eq!(PodSecurityLevel::Privileged.addable_capabilities(), None);
    }
}
