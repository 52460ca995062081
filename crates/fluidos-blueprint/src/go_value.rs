//! Template data as the Go node sees it, and values printed as Go's `fmt` prints them.

use std::collections::HashMap;

use gtmpl::Value;

/// `configurationData` (JSON) as template data.
///
/// Objects become maps, so a missing key yields "no value" rather than an
/// error (Go's `map[string]interface{}` lookup). The Go node decodes every
/// JSON number as `float64`; here integral numbers become integers instead,
/// because the engine treats a float zero as true and a float never equals
/// an integer literal (`eq .replicas 3`), and because Go then prints
/// `1000000` as `1e+06` — a quirk nobody writes a template for.
pub(crate) fn from_json(value: &serde_json::Value) -> Value {
    match value {
        serde_json::Value::Null => Value::Nil,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                Value::from(u)
            } else if let Some(i) = n.as_i64() {
                Value::from(i)
            } else {
                let f = n.as_f64().unwrap_or(f64::NAN);
                integral(f).map_or_else(|| Value::from(f), Value::from)
            }
        }
        serde_json::Value::String(s) => Value::String(s.clone()),
        serde_json::Value::Array(items) => Value::Array(items.iter().map(from_json).collect()),
        serde_json::Value::Object(map) => Value::Map(
            map.iter()
                .map(|(k, v)| (k.clone(), from_json(v)))
                .collect::<HashMap<_, _>>(),
        ),
    }
}

/// `f` as an `i64` when it is a whole number in range.
fn integral(f: f64) -> Option<i64> {
    // 2^63 is exactly representable; anything at or beyond it does not fit.
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    (f.fract() == 0.0 && f > -LIMIT && f < LIMIT).then_some(f as i64)
}

/// What an action prints on the Go node: `fmt.Sprint` of the value, except
/// that a missing key or `nil` prints nothing.
///
/// The Go node runs `html/template`, whose final escaper drops untyped nil
/// arguments (Go issue 25875), so `{{ .missing }}` renders as an empty
/// string there; `text/template` would print `<no value>`. We keep the Go
/// node's result: a blueprint written against it relies on it.
pub(crate) fn action_output(value: &Value) -> String {
    match value {
        Value::NoValue | Value::Nil => String::new(),
        other => sprint(other),
    }
}

/// Go's `fmt.Sprint(v)` (the `%v` verb) for template values.
pub(crate) fn sprint(value: &Value) -> String {
    match value {
        Value::NoValue => "<no value>".to_owned(),
        Value::Nil => "<nil>".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::String(s) => s.clone(),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                u.to_string()
            } else if let Some(i) = n.as_i64() {
                i.to_string()
            } else {
                n.as_f64().map(go_float).unwrap_or_default()
            }
        }
        Value::Array(items) => {
            let inner: Vec<String> = items.iter().map(sprint).collect();
            format!("[{}]", inner.join(" "))
        }
        // Go prints maps with their keys sorted.
        Value::Map(map) | Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let inner: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{k}:{}", map.get(k).map(sprint).unwrap_or_default()))
                .collect();
            format!("map[{}]", inner.join(" "))
        }
        Value::Function(_) => "<function>".to_owned(),
    }
}

/// Go's `%v` for a `float64` (`strconv.FormatFloat(f, 'g', -1, 64)`):
/// the shortest digits that round-trip, in exponent form when the decimal
/// exponent is below -4 or at least 6 (`1e+06`, `1.5e-07`), else plain.
pub(crate) fn go_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_owned();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf" } else { "-Inf" }.to_owned();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0" } else { "0" }.to_owned();
    }
    // Rust's `{:e}` gives the same shortest round-trip digits: "-1.2345e-7".
    let scientific = format!("{:e}", f.abs());
    let (mantissa, exponent) = scientific
        .split_once('e')
        .unwrap_or((scientific.as_str(), "0"));
    let exp: i32 = exponent.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let sign = if f < 0.0 { "-" } else { "" };
    if !(-4..6).contains(&exp) {
        let (first, rest) = digits.split_at(1);
        let point = if rest.is_empty() { "" } else { "." };
        let exp_sign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{first}{point}{rest}e{exp_sign}{:02}", exp.abs());
    }
    // Plain form: place the decimal point `exp + 1` digits in.
    let point = exp + 1;
    let n = i32::try_from(digits.len()).unwrap_or(i32::MAX);
    let body = if point <= 0 {
        format!("0.{}{digits}", "0".repeat(point.unsigned_abs() as usize))
    } else if point >= n {
        format!("{digits}{}", "0".repeat((point - n) as usize))
    } else {
        let (int, frac) = digits.split_at(point as usize);
        format!("{int}.{frac}")
    };
    format!("{sign}{body}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn floats_print_as_go_prints_them() {
        // Expected strings are Go's fmt.Sprint(float64(x)).
        for (f, go) in [
            (0.5, "0.5"),
            (123.456, "123.456"),
            (100000.5, "100000.5"),
            (1234567.5, "1.2345675e+06"),
            (1e6, "1e+06"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (-2.5e-7, "-2.5e-07"),
            (1.5e300, "1.5e+300"),
            (1e21, "1e+21"),
        ] {
            assert_eq!(go_float(f), go, "{f}");
        }
    }

    #[test]
    fn json_numbers_keep_integers_whole() {
        assert_eq!(sprint(&from_json(&json!(3306))), "3306");
        assert_eq!(sprint(&from_json(&json!(1000000))), "1000000");
        assert_eq!(sprint(&from_json(&json!(-7))), "-7");
        assert_eq!(sprint(&from_json(&json!(3.0))), "3");
        assert_eq!(sprint(&from_json(&json!(0.25))), "0.25");
    }

    #[test]
    fn composite_values_print_like_go() {
        let v = from_json(&json!({"b": [1, "x", null], "a": true}));
        assert_eq!(sprint(&v), "map[a:true b:[1 x <nil>]]");
    }

    #[test]
    fn missing_and_nil_print_nothing_as_on_the_go_node() {
        assert_eq!(action_output(&Value::NoValue), "");
        assert_eq!(action_output(&Value::Nil), "");
        assert_eq!(action_output(&Value::from("x")), "x");
    }
}
