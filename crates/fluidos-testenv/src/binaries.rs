//! Where the control-plane binaries come from.

use std::path::{Path, PathBuf};

use tokio::sync::OnceCell;

use crate::{Error, workspace_root};

/// Overrides the build: a directory holding the five binaries.
pub(crate) const BIN_DIR_ENV: &str = "FLUIDOS_CP_BIN_DIR";

pub(crate) const ETCD: &str = "etcd";
pub(crate) const KUBE_APISERVER: &str = "kube-apiserver";
pub(crate) const KUBE_CONTROLLER_MANAGER: &str = "kube-controller-manager";
pub(crate) const KUBE_SCHEDULER: &str = "kube-scheduler";
pub(crate) const KWOK: &str = "kwok";
pub(crate) const KUBELET: &str = "kubelet";
pub(crate) const KUBECTL: &str = "kubectl";
pub(crate) const KUBE_PROXY: &str = "kube-proxy";

/// The directory with the binaries: `$FLUIDOS_CP_BIN_DIR`, or what
/// `tools/control-plane/build.sh` prints (it is run at most once per process
/// and is a no-op when its cache is warm).
pub(crate) async fn bin_dir() -> Result<PathBuf, Error> {
    if let Some(dir) = std::env::var_os(BIN_DIR_ENV).filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    static BUILT: OnceCell<Result<PathBuf, String>> = OnceCell::const_new();
    BUILT
        .get_or_init(|| async {
            let script = workspace_root().join("tools/control-plane/build.sh");
            tokio::task::spawn_blocking(move || run_build_script(&script))
                .await
                .unwrap_or_else(|e| Err(format!("build task failed: {e}")))
        })
        .await
        .clone()
        .map_err(Error::BuildFailed)
}

fn run_build_script(script: &Path) -> Result<PathBuf, String> {
    eprintln!(
        "fluidos-testenv: running {} (slow only on the first build; set {BIN_DIR_ENV} to skip)",
        script.display()
    );
    let output = std::process::Command::new("bash")
        .arg(script)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        return Err(format!(
            "{} failed ({}):\n{}",
            script.display(),
            output.status,
            tail(&stderr, 30)
        ));
    }
    dir_from_build_output(&stdout).ok_or_else(|| {
        format!(
            "{} printed no binary directory on its last line; stdout:\n{}\nstderr:\n{}",
            script.display(),
            tail(&stdout, 10),
            tail(&stderr, 30)
        )
    })
}

/// The build script's contract: the binary directory is its last stdout line.
fn dir_from_build_output(stdout: &str) -> Option<PathBuf> {
    let last = stdout.lines().rev().find(|l| !l.trim().is_empty())?.trim();
    let dir = PathBuf::from(last);
    dir.is_absolute().then_some(dir)
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// `dir/name` if it is a file, else [`Error::BinaryMissing`].
pub(crate) fn require(dir: &Path, name: &str) -> Result<PathBuf, Error> {
    let path = dir.join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(Error::BinaryMissing {
            name: name.to_owned(),
            dir: dir.to_path_buf(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_nonempty_stdout_line_is_the_dir() {
        assert_eq!(
            dir_from_build_output("noise\n/cache/k8s-v1\n\n"),
            Some(PathBuf::from("/cache/k8s-v1"))
        );
        assert_eq!(dir_from_build_output(""), None);
        assert_eq!(dir_from_build_output("relative/dir\n"), None);
    }

    #[test]
    fn missing_binary_names_itself() {
        let dir = tempfile::tempdir().unwrap();
        let err = require(dir.path(), KUBE_APISERVER).unwrap_err();
        assert!(err.to_string().contains("kube-apiserver"));
        std::fs::write(dir.path().join(ETCD), b"").unwrap();
        assert_eq!(require(dir.path(), ETCD).unwrap(), dir.path().join(ETCD));
    }
}
