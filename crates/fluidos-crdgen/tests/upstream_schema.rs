//! Our generated CRDs against the Go node's published CRDs.
//!
//! For every kind: names, scope, status subresource and printer columns are
//! upstream's, every field path of upstream's `openAPIV3Schema` exists in ours
//! with the same type, and ours requires nothing upstream does not. Each
//! deliberate difference is listed below; anything else fails the test.
//!
//! Needs `../shared/reference/fluidos-crds` (the upstream manifests, not ours
//! to copy into the repo); skips with a message when it is absent, except in
//! CI, where it fails (`fluidos_testenv::skip`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // in tests a panic is the failure report
#![allow(
    clippy::too_many_lines,
    reason = "each test walks every CRD in one pass so a failure lists all differences"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde_json::Value;

/// Fields we add beyond upstream (path prefixes, per file).
const EXTRA_FIELDS: &[(&str, &str)] = &[
    // The provider's capacity ledger (holds and sales), see fluidos_api::ledger.
    ("nodecore.fluidos.eu_flavors.yaml", "status.ledger"),
    (
        "advertisement.fluidos.eu_peeringcandidates.yaml",
        "spec.flavor.status.ledger",
    ),
    (
        "reservation.fluidos.eu_contracts.yaml",
        "spec.flavor.status.ledger",
    ),
    (
        "advertisement.fluidos.eu_discoveries.yaml",
        "status.peeringCandidateList.items[].spec.flavor.status.ledger",
    ),
    (
        "nodecore.fluidos.eu_serviceblueprints.yaml",
        "spec.configurationSchema",
    ),
    (
        "nodecore.fluidos.eu_serviceblueprints.yaml",
        "status.conditions",
    ),
    (
        "nodecore.fluidos.eu_serviceblueprints.yaml",
        "status.observedGeneration",
    ),
    ("nodecore.fluidos.eu_solvers.yaml", "status.chosenCandidate"),
    (
        "advertisement.fluidos.eu_discoveries.yaml",
        "status.providers",
    ),
    (
        "reservation.fluidos.eu_reservations.yaml",
        "status.purchaseAttemptedAt",
    ),
    // The broker client's connection state (fluidos-network-manager::broker).
    ("network.fluidos.eu_brokers.yaml", "status.conditions"),
    // The provider's REAR key fingerprint: pinned TLS (docs/rear-identity.md).
    ("network.fluidos.eu_knownclusters.yaml", "spec.fingerprint"),
];

/// Checks replacing the Go node's validating webhooks (file, schema path):
/// CEL rules where a rule is needed, plain `enum`s where one suffices (an
/// enum costs the API server nothing measurable; CEL about 1 ms per write).
const CEL_RULES: &[(&str, &str)] = &[("reservation.fluidos.eu_reservations.yaml", "spec")];

/// `enum` constraints we add (file, schema path): only K8Slice and Service
/// flavors are implemented, so VM and Sensor are refused at admission.
const ENUMS: &[(&str, &str)] = &[
    (
        "nodecore.fluidos.eu_flavors.yaml",
        "spec.flavorType.typeIdentifier",
    ),
    // The same Flavor check, on the flavor snapshots other kinds embed.
    (
        "advertisement.fluidos.eu_peeringcandidates.yaml",
        "spec.flavor.spec.flavorType.typeIdentifier",
    ),
    (
        "reservation.fluidos.eu_contracts.yaml",
        "spec.flavor.spec.flavorType.typeIdentifier",
    ),
    (
        "advertisement.fluidos.eu_discoveries.yaml",
        "status.peeringCandidateList.items[].spec.flavor.spec.flavorType.typeIdentifier",
    ),
    (
        "nodecore.fluidos.eu_solvers.yaml",
        "spec.selector.flavorType",
    ),
    (
        "advertisement.fluidos.eu_discoveries.yaml",
        "spec.selector.flavorType",
    ),
    // Upstream's Go constants (Provider, Consumer, Shared), now enforced.
    (
        "nodecore.fluidos.eu_serviceblueprints.yaml",
        "spec.hostingPolicies[]",
    ),
    (
        "nodecore.fluidos.eu_serviceblueprints.yaml",
        "status.serviceFlavors[].hostingPolicies[]",
    ),
];

/// Printer columns we changed: upstream's `Start Time` reads `.spec.startTime`,
/// a field Transactions no longer have, so it was always empty.
const COLUMN_CHANGES: &[(&str, &str)] = &[
    ("reservation.fluidos.eu_transactions.yaml", "-Start Time"),
    (
        "reservation.fluidos.eu_transactions.yaml",
        "+Expiration Time",
    ),
    ("reservation.fluidos.eu_transactions.yaml", "+Age"),
    // Upstream's `Seller Domain` column reads `.spec.buyer.domain`.
    ("reservation.fluidos.eu_reservations.yaml", "-Seller Domain"),
    ("reservation.fluidos.eu_reservations.yaml", "+Seller Domain"),
];

/// Fields we require and upstream does not: an object (or embedded snapshot)
/// without a spec means nothing, and the Go node always writes one.
const EXTRA_REQUIRED: &[&str] = &[
    "spec",
    "spec.flavor.spec",
    "status.peeringCandidateList.items[].spec",
    "status.peeringCandidateList.items[].spec.flavor.spec",
];

fn upstream_dir() -> Option<PathBuf> {
    let dir =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/reference/fluidos-crds");
    dir.is_dir().then_some(dir)
}

fn load(yaml: &str) -> Value {
    let docs: Vec<Value> = serde_yaml::Deserializer::from_str(yaml)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|v: &Value| !v.is_null())
        .collect();
    assert_eq!(docs.len(), 1);
    docs.into_iter().next().unwrap()
}

/// path -> (type, preserve-unknown, required-by-parent)
fn paths(
    schema: &Value,
    path: &str,
    out: &mut BTreeMap<String, (String, bool)>,
    req: &mut BTreeSet<String>,
) {
    let t = schema["type"].as_str().unwrap_or("").to_owned();
    let preserve = schema["x-kubernetes-preserve-unknown-fields"]
        .as_bool()
        .unwrap_or(false);
    out.insert(path.to_owned(), (t, preserve));
    if let Some(props) = schema["properties"].as_object() {
        let required: BTreeSet<&str> = schema["required"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        for (k, v) in props {
            let p = if path.is_empty() {
                k.clone()
            } else {
                format!("{path}.{k}")
            };
            if required.contains(k.as_str()) {
                req.insert(p.clone());
            }
            paths(v, &p, out, req);
        }
    }
    if schema["items"].is_object() {
        paths(&schema["items"], &format!("{path}[]"), out, req);
    }
    if let Some(ap) = schema.get("additionalProperties").filter(|v| v.is_object()) {
        paths(ap, &format!("{path}{{}}"), out, req);
    }
}

/// Schema paths carrying keyword `key` (e.g. `x-kubernetes-validations`).
fn keyword_paths(schema: &Value, key: &str, path: &str, out: &mut BTreeSet<String>) {
    if schema.get(key).is_some() {
        out.insert(path.to_owned());
    }
    if let Some(props) = schema["properties"].as_object() {
        for (k, v) in props {
            let p = if path.is_empty() {
                k.clone()
            } else {
                format!("{path}.{k}")
            };
            keyword_paths(v, key, &p, out);
        }
    }
    if schema["items"].is_object() {
        keyword_paths(&schema["items"], key, &format!("{path}[]"), out);
    }
}

fn columns(version: &Value) -> Vec<(String, String, String, i64)> {
    version["additionalPrinterColumns"]
        .as_array()
        .map(|cols| {
            cols.iter()
                .map(|c| {
                    (
                        c["name"].as_str().unwrap_or("").to_owned(),
                        c["jsonPath"].as_str().unwrap_or("").to_owned(),
                        c["type"].as_str().unwrap_or("").to_owned(),
                        c["priority"].as_i64().unwrap_or(0),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn generated_crds_cover_the_upstream_schemas() {
    let Some(dir) = upstream_dir() else {
        fluidos_testenv::skip::unavailable(
            "../shared/reference/fluidos-crds is absent; the upstream schema comparison needs it",
        );
        return;
    };
    let ours: BTreeMap<String, Value> = fluidos_crdgen::render()
        .unwrap()
        .into_iter()
        .map(|f| (f.name, load(&f.yaml)))
        .collect();
    let mut upstream_files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    upstream_files.sort();
    assert_eq!(upstream_files.len(), 11, "upstream has 11 kinds");
    assert_eq!(ours.len(), 11, "we generate 11 kinds");

    let mut problems = Vec::new();
    for file in &upstream_files {
        let fname = file.file_name().unwrap().to_string_lossy().into_owned();
        let up = load(&std::fs::read_to_string(file).unwrap());
        let Some(our) = ours.get(&fname) else {
            problems.push(format!("{fname}: we generate no such CRD"));
            continue;
        };
        let (us, os) = (&up["spec"], &our["spec"]);
        for key in ["group", "scope"] {
            if us[key] != os[key] {
                problems.push(format!("{fname}: spec.{key} {} != {}", os[key], us[key]));
            }
        }
        for key in ["kind", "plural", "singular", "shortNames"] {
            if us["names"][key] != os["names"][key] {
                problems.push(format!(
                    "{fname}: names.{key} {} != {}",
                    os["names"][key], us["names"][key]
                ));
            }
        }
        let (uv, ov) = (&us["versions"][0], &os["versions"][0]);
        for key in ["name", "served", "storage"] {
            if uv[key] != ov[key] {
                problems.push(format!("{fname}: versions[0].{key} differs"));
            }
        }
        if uv["subresources"] != ov["subresources"] {
            problems.push(format!(
                "{fname}: subresources {} != {}",
                ov["subresources"], uv["subresources"]
            ));
        }

        // Printer columns: equal, up to the listed changes.
        let (ucols, ocols) = (columns(uv), columns(ov));
        let changes: BTreeSet<&str> = COLUMN_CHANGES
            .iter()
            .filter(|(f, _)| *f == fname)
            .map(|(_, c)| *c)
            .collect();
        for c in &ucols {
            if !ocols.contains(c) && !changes.contains(format!("-{}", c.0).as_str()) {
                problems.push(format!("{fname}: printer column {c:?} missing or changed"));
            }
        }
        for c in &ocols {
            if !ucols.contains(c) && !changes.contains(format!("+{}", c.0).as_str()) {
                problems.push(format!("{fname}: unlisted extra printer column {c:?}"));
            }
        }

        // Field paths and types.
        let (mut up_paths, mut up_req) = (BTreeMap::new(), BTreeSet::new());
        let (mut our_paths, mut our_req) = (BTreeMap::new(), BTreeSet::new());
        paths(
            &uv["schema"]["openAPIV3Schema"],
            "",
            &mut up_paths,
            &mut up_req,
        );
        paths(
            &ov["schema"]["openAPIV3Schema"],
            "",
            &mut our_paths,
            &mut our_req,
        );
        for (p, (t, preserve)) in &up_paths {
            // The API server supplies the root apiVersion/kind/metadata itself.
            if p.is_empty() || ["apiVersion", "kind", "metadata"].contains(&p.as_str()) {
                continue;
            }
            match our_paths.get(p) {
                None => problems.push(format!("{fname}: missing field {p}")),
                Some((ot, op)) if ot != t || op != preserve => problems.push(format!(
                    "{fname}: {p} is {ot}{} but upstream is {t}{}",
                    if *op { " (preserve-unknown)" } else { "" },
                    if *preserve { " (preserve-unknown)" } else { "" }
                )),
                _ => {}
            }
        }
        let extras: Vec<&str> = EXTRA_FIELDS
            .iter()
            .filter(|(f, _)| *f == fname)
            .map(|(_, p)| *p)
            .collect();
        for p in our_paths.keys() {
            if !up_paths.contains_key(p) && !extras.iter().any(|e| p.starts_with(e)) {
                problems.push(format!("{fname}: unlisted extra field {p}"));
            }
        }
        for p in our_req.difference(&up_req) {
            if EXTRA_REQUIRED.contains(&p.as_str()) || extras.iter().any(|e| p.starts_with(e)) {
                continue;
            }
            problems.push(format!("{fname}: we require {p}, upstream does not"));
        }
        for p in up_req.difference(&our_req) {
            // Upstream requires it: an object without it never exists, and we
            // always write it; accepting more is harmless, but say so.
            if !p.starts_with("metadata") {
                problems.push(format!("{fname}: upstream requires {p}, we do not"));
            }
        }

        // CEL rules and enums: exactly the listed ones.
        for (key, list) in [("x-kubernetes-validations", CEL_RULES), ("enum", ENUMS)] {
            let mut found = BTreeSet::new();
            keyword_paths(&ov["schema"]["openAPIV3Schema"], key, "", &mut found);
            let mut upstream = BTreeSet::new();
            keyword_paths(&uv["schema"]["openAPIV3Schema"], key, "", &mut upstream);
            // Inside fields we added, anything goes.
            let found: BTreeSet<String> = found
                .difference(&upstream)
                .filter(|p| !extras.iter().any(|e| p.starts_with(e)))
                .cloned()
                .collect();
            let listed: BTreeSet<String> = list
                .iter()
                .filter(|(f, _)| *f == fname)
                .map(|(_, p)| (*p).to_owned())
                .collect();
            if found != listed {
                problems.push(format!("{fname}: {key} at {found:?}, listed {listed:?}"));
            }
        }
        eprintln!("compared {fname}: {} upstream field paths", up_paths.len());
    }
    assert!(
        problems.is_empty(),
        "differences from upstream:\n{}",
        problems.join("\n")
    );
}
