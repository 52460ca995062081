//! Running `helm` as an operator would, with nothing of the machine's own
//! Helm configuration.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use crate::Error;

/// Where `tools/helm/build.sh` put the `helm` binary (the directory it
/// prints on its last line).
pub const HELM_BIN_DIR_ENV: &str = "FLUIDOS_HELM_BIN_DIR";

/// The fluidos-node chart's directory.
pub fn chart_dir() -> PathBuf {
    crate::workspace_root().join("deploy/helm/fluidos-node")
}

/// A `helm` binary.
#[derive(Clone, Debug)]
pub struct Helm {
    bin: PathBuf,
}

impl Helm {
    /// `helm` in `dir`, which must hold it.
    pub fn in_dir(dir: &Path) -> Result<Helm, Error> {
        let bin = dir.join("helm");
        if bin.is_file() {
            Ok(Helm { bin })
        } else {
            Err(Error::HelmUnavailable(format!(
                "{} does not exist: run tools/helm/build.sh",
                bin.display()
            )))
        }
    }

    /// `helm` in `FLUIDOS_HELM_BIN_DIR`; [`Error::HelmUnavailable`] saying
    /// what to run when it is unset.
    pub fn from_env() -> Result<Helm, Error> {
        let dir = std::env::var_os(HELM_BIN_DIR_ENV)
            .filter(|d| !d.is_empty())
            .ok_or_else(|| {
                Error::HelmUnavailable(format!(
                    "{HELM_BIN_DIR_ENV} is not set; build helm with tools/helm/build.sh and set \
                     it to the directory printed on its last line"
                ))
            })?;
        Helm::in_dir(Path::new(&dir))
    }

    /// The binary.
    pub fn bin(&self) -> &Path {
        &self.bin
    }

    /// [`Helm::run`] on a blocking thread, so that other tasks (another
    /// cluster's install) go on meanwhile.
    pub async fn run_off_runtime(&self, args: &[&str]) -> Result<String, Error> {
        let helm = self.clone();
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            helm.run(&args)
        })
        .await
        .map_err(|e| Error::Spawner(format!("helm's thread: {e}")))?
    }

    /// Runs `helm args...` with its config and caches in a temporary home
    /// (and no `KUBECONFIG`: callers name the cluster); its stdout, or
    /// [`Error::Helm`] with both outputs.
    pub fn run(&self, args: &[&str]) -> Result<String, Error> {
        let home = tempfile::tempdir().map_err(|e| Error::io("a home for helm", e))?;
        let out = std::process::Command::new(&self.bin)
            .args(args)
            .env("HELM_CACHE_HOME", home.path().join("cache"))
            .env("HELM_CONFIG_HOME", home.path().join("config"))
            .env("HELM_DATA_HOME", home.path().join("data"))
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| Error::io(format!("running {}", self.bin.display()), e))?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success() {
            Ok(stdout)
        } else {
            Err(Error::Helm {
                args: args.join(" "),
                output: format!("{stdout}{}", String::from_utf8_lossy(&out.stderr)),
            })
        }
    }
}
