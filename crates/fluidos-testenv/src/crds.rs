//! Installing CustomResourceDefinitions from a directory of YAML manifests.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::wait::{await_condition, conditions};
use serde::Deserialize as _;

use crate::Error;

/// Field manager for server-side apply, so re-applying updates in place.
const FIELD_MANAGER: &str = "fluidos-testenv";
const ESTABLISHED_TIMEOUT: Duration = Duration::from_secs(30);

/// Every `*.yaml`/`*.yml` file directly in `dir`, sorted for a stable order.
pub(crate) fn manifest_files(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| Error::io(format!("reading CRD directory {}", dir.display()), e))?;
    let mut files = Vec::new();
    for entry in entries {
        let path = entry
            .map_err(|e| Error::io(format!("reading CRD directory {}", dir.display()), e))?
            .path();
        let is_yaml = path
            .extension()
            .is_some_and(|ext| ext == "yaml" || ext == "yml");
        if is_yaml && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// The CRDs in one (possibly multi-document) YAML text.
pub(crate) fn parse_crds(path: &Path, text: &str) -> Result<Vec<CustomResourceDefinition>, Error> {
    let invalid = |message: String| Error::InvalidCrd {
        path: path.to_path_buf(),
        message,
    };
    let mut crds = Vec::new();
    for document in serde_yaml::Deserializer::from_str(text) {
        let value = serde_yaml::Value::deserialize(document).map_err(|e| invalid(e.to_string()))?;
        if value.is_null() {
            continue;
        }
        // k8s-openapi checks apiVersion and kind, so a stray non-CRD document
        // is reported rather than silently skipped.
        let crd: CustomResourceDefinition =
            serde_yaml::from_value(value).map_err(|e| invalid(e.to_string()))?;
        if crd.metadata.name.as_deref().unwrap_or_default().is_empty() {
            return Err(invalid(
                "a CustomResourceDefinition has no metadata.name".into(),
            ));
        }
        crds.push(crd);
    }
    Ok(crds)
}

/// Server-side applies every CRD found in `dir` and waits until each is Established.
pub(crate) async fn install(client: &kube::Client, dir: &Path) -> Result<(), Error> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let mut names = Vec::new();
    for path in manifest_files(dir)? {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
        for crd in parse_crds(&path, &text)? {
            let name = crd.metadata.name.clone().unwrap_or_default();
            api.patch(&name, &params, &Patch::Apply(&crd))
                .await
                .map_err(|source| Error::CrdRejected {
                    name: name.clone(),
                    path: path.clone(),
                    source,
                })?;
            names.push(name);
        }
    }
    for name in names {
        let established = await_condition(api.clone(), &name, conditions::is_crd_established());
        match tokio::time::timeout(ESTABLISHED_TIMEOUT, established).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                return Err(Error::Timeout {
                    what: format!("CRD {name} Established"),
                    waited: ESTABLISHED_TIMEOUT,
                    last_error: e.to_string(),
                    log_tail: String::new(),
                });
            }
            Err(_) => {
                return Err(Error::Timeout {
                    what: format!("CRD {name} Established"),
                    waited: ESTABLISHED_TIMEOUT,
                    last_error: "condition Established never became True".into(),
                    log_tail: String::new(),
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const WIDGET_CRD: &str = "\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names: {kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
";

    #[test]
    fn parses_multi_document_files_and_skips_empty_documents() {
        let text = format!("---\n{WIDGET_CRD}---\n# just a comment\n---\n{WIDGET_CRD}");
        let crds = parse_crds(Path::new("x.yaml"), &text).unwrap();
        assert_eq!(crds.len(), 2);
        assert_eq!(
            crds[0].metadata.name.as_deref(),
            Some("widgets.example.com")
        );
        assert_eq!(crds[0].spec.group, "example.com");
    }

    #[test]
    fn rejects_documents_that_are_not_crds() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n";
        let err = parse_crds(Path::new("cm.yaml"), text).unwrap_err();
        assert!(matches!(err, Error::InvalidCrd { .. }), "{err}");
        assert!(err.to_string().contains("cm.yaml"));
    }

    #[test]
    fn lists_only_yaml_files_sorted() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["b.yaml", "a.yml", "c.json", "README.md"] {
            std::fs::write(dir.path().join(name), "").unwrap();
        }
        std::fs::create_dir(dir.path().join("d.yaml")).unwrap();
        let files = manifest_files(dir.path()).unwrap();
        let names: Vec<_> = files
            .iter()
            .map(|p| p.file_name().unwrap().to_str().unwrap().to_owned())
            .collect();
        assert_eq!(names, ["a.yml", "b.yaml"]);
    }

    #[test]
    fn missing_directory_is_an_error() {
        assert!(manifest_files(Path::new("/nonexistent/crds")).is_err());
    }
}
