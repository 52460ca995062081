//! Instantiating a ServiceBlueprint for a purchase, as the Go node does
//! (fluidos-node.md §5.4), as pure functions: no I/O, randomness injected.
//!
//! - [`render`]: each blueprint template's `serviceData` becomes one
//!   Kubernetes object; its strings are Go templates over the top-level keys
//!   of the purchase's `configurationData` (`{{ .password }}`), with Go's
//!   built-ins and the Sprig functions listed in [`SPRIG_FUNCTIONS`].
//! - [`validate_objects`]: refuses what must not be created — cluster-scoped
//!   kinds and kinds outside [`ALLOWED_KINDS`], malformed metadata, the same
//!   object twice, the credentials Secret's name, an unusable endpoint Service.
//! - [`bind_to_contract`]: namespace = contract name, label
//!   [`CONTRACT_LABEL`]` = <contract>` on every object.
//! - [`endpoints`] and [`credentials_secret`]: the endpoint Service (label
//!   [`ENDPOINT_LABEL`]` = "true"`) and the `credentials-<contract>` Secret
//!   the buyer reads (label [`CREDENTIALS_LABEL`]` = "true"`).
//! - [`instantiate`] does all of the above in order.
//!
//! The engine is [gtmpl](https://crates.io/crates/gtmpl) (Go `text/template`
//! for Rust); this crate adds the Sprig functions, Go's way of printing
//! values, and error positions (see `template_text.rs`).
//!
//! # Escaping: values arrive unaltered
//!
//! The Go node executes each template's serviceData JSON text as an
//! `html/template`, so every interpolated value is HTML-escaped: a password
//! `p&ss"word+1` lands in the rendered Secret as `p&amp;ss&#34;word&#43;1`
//! (`&`, `<`, `>`, `'`, `"`, `+` and NUL are replaced), and a `\` breaks the
//! JSON outright (§8.2 bug 22). Meanwhile the credentials Secret the buyer
//! reads carries the password *unescaped* — so on the Go node, a buyer whose
//! password contains one of these characters is told a password the
//! service was not configured with.
//!
//! **We do not reproduce this.** Each templated string is rendered on its
//! own and its output *is* the new string value — it is never re-parsed as
//! JSON or YAML — so no escaping is needed and none is done: every value
//! reaches the object exactly as the buyer gave it, and the service and the
//! credentials Secret agree. For the characters above nothing else changes:
//! any value without them renders byte for byte as on the Go node (both
//! upstream blueprints do; see `tests/golden.rs`).
//!
//! Rendering string by string (rather than the whole serviceData as one
//! text) has two more consequences, both deliberate:
//! - string literals work inside actions (`{{ .tier | default "small" }}`);
//!   on the Go node the JSON text holds them as `\"small\"`, which the Go
//!   template parser rejects;
//! - an `{{ if }}`/`{{ range }}`/`{{ define }}` must open and close within
//!   one string. Spanning several JSON strings with one construct works on
//!   the Go node but only by accident of its JSON text form.
//!
//! Other Go-node behaviours kept: a missing key prints as an empty string
//! (the Go node's `html/template` does so; `text/template` would print
//! `<no value>`); every templated value is a string (on the Go node, too, an
//! action can only ever land inside a JSON string). Changed: integral
//! numbers print whole (`1000000`, where Go's float64 decoding prints
//! `1e+06`).

mod go_value;
mod random;
mod render;
mod render_scope;
mod service_instance;
mod sprig;
mod template_text;
mod validate;

pub use random::{OsRandom, RandomSource, RandomUnavailable, RepeatingBytes};
pub use render::{RenderError, RenderedObject, Stage, TemplateLocation, render};
pub use service_instance::{
    CredentialsError, DATABASE, InstantiateError, MESSAGE_QUEUE, ServiceInstance, credential_keys,
    credentials_secret, endpoint_service, endpoints, instantiate, is_secret_key,
};
pub use sprig::{MAX_GENERATED_CHARS, SPRIG_FUNCTIONS};
pub use validate::{
    ALLOWED_KINDS, CLUSTER_SCOPED_KINDS, CONTRACT_LABEL, CREDENTIALS_LABEL, ENDPOINT_LABEL,
    ValidationError, api_group, bind_to_contract, validate_objects,
};
