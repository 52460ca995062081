//! Rendering a blueprint's templates into Kubernetes objects.

use std::fmt;

use fluidos_api::service_blueprint::ServiceTemplate;
use gtmpl::error::ParseError;
use gtmpl::{Context, Template};
use serde_json::{Map, Value};

use crate::go_value;
use crate::random::RandomSource;
use crate::render_scope;
use crate::sprig::FUNCTIONS;
use crate::template_text::{self, PreparedText};

/// One object rendered from a blueprint template.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderedObject {
    /// Name of the template (`spec.templates[].name`) it came from.
    pub template: String,
    /// The Kubernetes object.
    pub object: Value,
}

impl RenderedObject {
    /// `apiVersion`, if it is a string.
    pub fn api_version(&self) -> Option<&str> {
        self.object.get("apiVersion").and_then(Value::as_str)
    }

    /// `kind`, if it is a string.
    pub fn kind(&self) -> Option<&str> {
        self.object.get("kind").and_then(Value::as_str)
    }

    /// `metadata.name`, if it is a string.
    pub fn name(&self) -> Option<&str> {
        self.object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
    }

    /// `metadata.labels[key]`, if it is a string.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.object
            .get("metadata")
            .and_then(|m| m.get("labels"))
            .and_then(|l| l.get(key))
            .and_then(Value::as_str)
    }
}

/// Whether the engine failed reading a template or running it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// The template text is not a valid Go template.
    Parse,
    /// Evaluating an action failed (a function error, a bad argument, ...).
    Execute,
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Stage::Parse => "parse error",
            Stage::Execute => "execution error",
        })
    }
}

/// Where in a template's `serviceData` a failing string is, and where in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateLocation {
    /// Path of the string inside `serviceData`, e.g. `stringData.password`.
    pub path: String,
    /// Whether the string is the key at `path` rather than its value.
    pub in_key: bool,
    /// Line within the string (1-based), when known.
    pub line: Option<usize>,
    /// Column within the line (1-based, in characters), when known.
    pub column: Option<usize>,
}

impl fmt::Display for TemplateLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.path)?;
        if self.in_key {
            f.write_str(" (key)")?;
        }
        match (self.line, self.column) {
            (Some(line), Some(column)) => write!(f, ", line {line}, column {column}"),
            (Some(line), None) => write!(f, ", line {line}"),
            _ => Ok(()),
        }
    }
}

/// Why a blueprint's templates could not be rendered.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RenderError {
    /// `configurationData` is not an object, so it has no keys to offer as data.
    #[error("configurationData must be a JSON object, not {found}")]
    ConfigurationNotObject {
        /// The JSON type found.
        found: &'static str,
    },
    /// A template's `serviceData` is not an object (one Kubernetes manifest).
    #[error("template {template:?}: serviceData must be a JSON object, not {found}")]
    ServiceDataNotObject {
        /// Template name.
        template: String,
        /// The JSON type found.
        found: &'static str,
    },
    /// The engine refused or failed a templated string.
    #[error("template {template:?} at {location}: {stage}: {message}")]
    Template {
        /// Template name.
        template: String,
        /// Where the failing string and action are.
        location: TemplateLocation,
        /// Parse or execution.
        stage: Stage,
        /// The engine's (or function's) message.
        message: String,
    },
    /// Two keys of one object render to the same text.
    #[error("template {template:?} at {path}: two keys render to {key:?}")]
    DuplicateKey {
        /// Template name.
        template: String,
        /// Path of the object holding the keys.
        path: String,
        /// The rendered key.
        key: String,
    },
}

/// Renders every template of a blueprint, in order, into one object each.
///
/// Each string (value or key) of `serviceData` that contains `{{` is a Go
/// template over the top-level keys of `configuration`
/// (`{{ .username }}`), with gtmpl's Go built-ins and the Sprig functions of
/// [`crate::SPRIG_FUNCTIONS`]; what it prints replaces the string,
/// unescaped. Strings without `{{` and all non-string values are copied.
/// `random` feeds `randAlphaNum` and friends for this call only.
///
/// See the crate documentation for how this differs from the Go node (HTML
/// escaping, one template per string).
pub fn render(
    templates: &[ServiceTemplate],
    configuration: &Value,
    random: impl RandomSource + 'static,
) -> Result<Vec<RenderedObject>, RenderError> {
    let data = template_data(configuration)?;
    let _scope = render_scope::enter(Box::new(random));
    templates
        .iter()
        .map(|t| {
            if !t.service_data.is_object() {
                return Err(RenderError::ServiceDataNotObject {
                    template: t.name.clone(),
                    found: json_type(&t.service_data),
                });
            }
            let renderer = StringRenderer {
                template: &t.name,
                data: &data,
            };
            let object = renderer.value(&t.service_data, &mut JsonPath::default())?;
            Ok(RenderedObject {
                template: t.name.clone(),
                object,
            })
        })
        .collect()
}

/// Renders one templated string (for tests of single functions).
#[cfg(test)]
pub(crate) fn render_string(
    source: &str,
    configuration: &Value,
    random: impl RandomSource + 'static,
) -> Result<String, RenderError> {
    let data = template_data(configuration)?;
    let _scope = render_scope::enter(Box::new(random));
    StringRenderer {
        template: "test",
        data: &data,
    }
    .string(source, &JsonPath::default(), false)
}

fn template_data(configuration: &Value) -> Result<gtmpl::Value, RenderError> {
    if !configuration.is_object() {
        return Err(RenderError::ConfigurationNotObject {
            found: json_type(configuration),
        });
    }
    Ok(go_value::from_json(configuration))
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Renders the strings of one template's `serviceData`.
struct StringRenderer<'a> {
    template: &'a str,
    data: &'a gtmpl::Value,
}

impl StringRenderer<'_> {
    fn value(&self, value: &Value, path: &mut JsonPath) -> Result<Value, RenderError> {
        match value {
            Value::String(s) => Ok(Value::String(self.string(s, path, false)?)),
            Value::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    path.0.push(PathStep::Index(i));
                    let rendered = self.value(item, path);
                    path.0.pop();
                    out.push(rendered?);
                }
                Ok(Value::Array(out))
            }
            Value::Object(map) => {
                let mut out = Map::new();
                for (key, item) in map {
                    path.0.push(PathStep::Key(key.clone()));
                    let rendered = self
                        .string(key, path, true)
                        .and_then(|k| Ok((k, self.value(item, path)?)));
                    path.0.pop();
                    let (new_key, new_value) = rendered?;
                    if out.insert(new_key.clone(), new_value).is_some() {
                        return Err(RenderError::DuplicateKey {
                            template: self.template.to_owned(),
                            path: path.to_string(),
                            key: new_key,
                        });
                    }
                }
                Ok(Value::Object(out))
            }
            other => Ok(other.clone()),
        }
    }

    fn string(&self, source: &str, path: &JsonPath, in_key: bool) -> Result<String, RenderError> {
        if !source.contains("{{") {
            return Ok(source.to_owned());
        }
        let prepared = template_text::prepare(source);
        let error = |stage, line, column, message: String| RenderError::Template {
            template: self.template.to_owned(),
            location: TemplateLocation {
                path: path.to_string(),
                in_key,
                line,
                column,
            },
            stage,
            message: template_text::strip_inserted(&message),
        };
        if let Some(at) = prepared.unterminated {
            return Err(error(
                Stage::Parse,
                Some(at.line),
                Some(at.column),
                "unclosed action: no matching \"}}\"".to_owned(),
            ));
        }
        let engine = match parse(&prepared.text) {
            Ok(engine) => engine,
            Err(e) => {
                let at = unparsable_action(&prepared).and_then(|i| prepared.action_start(i));
                return Err(error(
                    Stage::Parse,
                    at.map(|a| a.line),
                    at.map(|a| a.column),
                    e,
                ));
            }
        };
        render_scope::set_action(None);
        engine
            .render(&Context::from(self.data.clone()))
            .map_err(|e| {
                // The inserted marker recorded the action being evaluated.
                let at = render_scope::action().and_then(|i| prepared.action_start(i));
                error(
                    Stage::Execute,
                    at.map(|a| a.line),
                    at.map(|a| a.column),
                    e.to_string(),
                )
            })
    }
}

/// The parsed template, or the engine's message.
fn parse(text: &str) -> Result<Template, String> {
    let mut engine = Template::with_name("serviceData");
    engine.add_funcs(&FUNCTIONS);
    engine.parse(text).map_err(parse_message)?;
    Ok(engine)
}

/// The engine's message without its `template: NAME:LINE:` prefix, whose
/// line number gtmpl miscounts.
fn parse_message(e: ParseError) -> String {
    match e {
        ParseError::WithContext(_, message) => message,
        other => other.to_string(),
    }
}

/// The action a parse error is at: the first whose prefix does not parse,
/// else the control structure left open.
fn unparsable_action(prepared: &PreparedText) -> Option<usize> {
    (0..prepared.action_count())
        .find(|&i| {
            prepared
                .prefix_through(i)
                .is_some_and(|prefix| parse(&prefix).is_err())
        })
        .or_else(|| prepared.unclosed_action())
}

/// A path inside `serviceData`, printed as `spec.ports[0].port`.
#[derive(Debug, Default, Clone)]
struct JsonPath(Vec<PathStep>);

#[derive(Debug, Clone)]
enum PathStep {
    Key(String),
    Index(usize),
}

impl fmt::Display for JsonPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("serviceData");
        }
        for (i, step) in self.0.iter().enumerate() {
            match step {
                PathStep::Index(n) => write!(f, "[{n}]")?,
                PathStep::Key(k) if is_plain_key(k) => {
                    if i > 0 {
                        f.write_str(".")?;
                    }
                    f.write_str(k)?;
                }
                PathStep::Key(k) => write!(f, "[{k:?}]")?,
            }
        }
        Ok(())
    }
}

fn is_plain_key(key: &str) -> bool {
    !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::RepeatingBytes;
    use serde_json::json;

    fn template(name: &str, service_data: Value) -> ServiceTemplate {
        ServiceTemplate {
            name: name.to_owned(),
            description: None,
            service_data,
        }
    }

    fn render_one(service_data: Value, config: Value) -> Result<Value, RenderError> {
        render(
            &[template("t", service_data)],
            &config,
            RepeatingBytes::new([7]),
        )
        .map(|mut objects| objects.remove(0).object)
    }

    #[test]
    fn strings_are_templates_and_everything_else_is_copied() {
        let out = render_one(
            json!({"kind": "ConfigMap", "data": {"a": "{{ .x }}-{{ .n }}", "b": "plain {x}"},
                   "list": ["{{ .x | upper }}", 3, true, null], "n": 5}),
            json!({"x": "v", "n": 8080}),
        )
        .unwrap();
        assert_eq!(
            out,
            json!({"kind": "ConfigMap", "data": {"a": "v-8080", "b": "plain {x}"},
                   "list": ["V", 3, true, null], "n": 5})
        );
    }

    #[test]
    fn keys_are_templates_too() {
        let out = render_one(json!({"data": {"{{ .k }}": "v"}}), json!({"k": "key"})).unwrap();
        assert_eq!(out, json!({"data": {"key": "v"}}));
        let err = render_one(
            json!({"data": {"{{ .k }}": "1", "key": "2"}}),
            json!({"k": "key"}),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"template "t" at data: two keys render to "key""#
        );
    }

    #[test]
    fn string_literals_and_control_flow_work_inside_a_string() {
        let out = render_one(
            json!({"v": r#"{{ if .tls }}https{{ else }}http{{ end }}://{{ .host | default "localhost" }}"#}),
            json!({"tls": false}),
        )
        .unwrap();
        assert_eq!(out, json!({"v": "http://localhost"}));
    }

    #[test]
    fn values_are_not_html_escaped() {
        // The Go node's html/template would render this password as
        // `p&amp;ss&#34;w&lt;o&gt;r&#39;d&#43;1\` and the trailing `\` would
        // then break its JSON text; here it arrives as given.
        let password = "p&ss\"w<o>r'd+1\\";
        let out = render_one(
            json!({"stringData": {"password": "{{ .password }}", "quoted": "{{ .password | quote }}"}}),
            json!({"password": password}),
        )
        .unwrap();
        assert_eq!(out["stringData"]["password"], password);
        assert_eq!(out["stringData"]["quoted"], r#""p&ss\"w<o>r'd+1\\""#);
    }

    #[test]
    fn trim_markers_else_if_and_defines_work() {
        let out = render_one(
            json!({"v": "a  {{- if eq .n 1 }} one {{- else if eq .n 2 -}} two {{ else }}many{{ end -}}  !",
                   "w": r#"{{ define "greet" }}hi {{ . }}{{ end }}{{ template "greet" .who }}"#}),
            json!({"n": 2, "who": "you"}),
        )
        .unwrap();
        assert_eq!(out, json!({"v": "atwo !", "w": "hi you"}));
    }

    #[test]
    fn a_missing_key_renders_empty_as_on_the_go_node() {
        let out = render_one(json!({"v": "[{{ .missing }}]"}), json!({})).unwrap();
        assert_eq!(out, json!({"v": "[]"}));
    }

    #[test]
    fn parse_errors_name_the_template_path_and_line() {
        let err = render_one(
            json!({"spec": {"containers": [{"args": ["ok", "{{ .a }} one\n {{ if }}x{{ end }}"]}]}}),
            json!({"a": "x"}),
        )
        .unwrap_err();
        let RenderError::Template {
            template,
            location,
            stage,
            ..
        } = &err
        else {
            panic!("{err:?}")
        };
        assert_eq!(template, "t");
        assert_eq!(location.path, "spec.containers[0].args[1]");
        assert_eq!((location.line, location.column), (Some(2), Some(2)));
        assert_eq!(*stage, Stage::Parse);
        assert_eq!(
            err.to_string(),
            r#"template "t" at spec.containers[0].args[1], line 2, column 2: parse error: missing value for if"#
        );
    }

    #[test]
    fn an_unterminated_action_is_refused_before_the_engine_sees_it() {
        // gtmpl 0.7's lexer never returns on this text.
        let err = render_one(
            json!({"stringData": {"password": "x {{ .password \""}}),
            json!({"password": "p"}),
        )
        .unwrap_err();
        let RenderError::Template {
            location, stage, ..
        } = &err
        else {
            panic!("{err:?}")
        };
        assert_eq!(*stage, Stage::Parse);
        assert_eq!((location.line, location.column), (Some(1), Some(3)));
        assert!(err.to_string().contains("unclosed action"), "{err}");
    }

    #[test]
    fn unknown_functions_are_parse_errors() {
        let err = render_one(
            json!({"v": "{{ .a }}, {{ .a | nosuch }}"}),
            json!({"a": "x"}),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"template "t" at v, line 1, column 11: parse error: function nosuch not defined"#
        );
    }

    #[test]
    fn an_unclosed_structure_is_reported_where_it_opens() {
        let err = render_one(
            json!({"v": "a {{ if .a }}{{ range .b }}{{ end }}"}),
            json!({}),
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .starts_with(r#"template "t" at v, line 1, column 3: parse error: "#),
            "{err}"
        );
    }

    #[test]
    fn execution_errors_name_the_failing_action() {
        let err = render_one(
            json!({"metadata": {"labels": {"app.kubernetes.io/name": "a {{ .ok }}\n  x {{ .n | upper }}"}}}),
            json!({"ok": "fine", "n": 3}),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"template "t" at metadata.labels["app.kubernetes.io/name"], line 2, column 5: execution error: upper: expected a string, got number"#
        );
    }

    #[test]
    fn errors_in_keys_say_so() {
        let err =
            render_one(json!({"data": {"{{ .n | lower }}": "v"}}), json!({"n": 1})).unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"template "t" at data["{{ .n | lower }}"] (key), line 1, column 1: execution error: lower: expected a string, got number"#
        );
    }

    #[test]
    fn configuration_and_service_data_must_be_objects() {
        assert_eq!(
            render_one(json!({}), json!([1])).unwrap_err(),
            RenderError::ConfigurationNotObject { found: "an array" }
        );
        assert_eq!(
            render_one(json!("x"), json!({})).unwrap_err(),
            RenderError::ServiceDataNotObject {
                template: "t".to_owned(),
                found: "a string"
            }
        );
    }
}
