//! The Sprig functions blueprints use, on top of gtmpl's Go built-ins.
//!
//! The Go node passes `sprig.TxtFuncMap()` (Sprig v2.22.0). gtmpl brings the
//! `text/template` built-ins (`eq`, `and`, `printf`, `index`, `len`, ...);
//! this module adds the Sprig subset below, each following Sprig's code
//! (argument order: the piped value comes last). Deliberate differences:
//! - `b64dec` of invalid input is an error; Sprig returns Go's error text
//!   *as the decoded value*, which would silently become, say, a password.
//! - A string argument must be a string (as Go's type check demands), a
//!   count a non-negative integer no larger than [`MAX_GENERATED_CHARS`]
//!   output characters: `configurationData` comes from the buyer, and
//!   `repeat`/`randAlphaNum` must not let it exhaust the provider's memory.
//! - `upper`/`lower` use Unicode's full case mapping (Go uses the simple
//!   one; they differ for a few characters such as `ß`); `trunc` counts
//!   characters where Go counts bytes (the same for ASCII, and never cuts a
//!   character in two).
//! - `quote` escapes as Go's `%q` does, treating unassigned code points as
//!   printable (Rust has no Unicode category table).

use base64::Engine;
use base64::engine::general_purpose::{GeneralPurpose, PAD};
use gtmpl::{Func, FuncError, Value};
use sha2::{Digest, Sha256};

use crate::go_value::{action_output, sprint};
use crate::random::{RandomUnavailable, sample_chars};
use crate::render_scope;
use crate::template_text::{AT_FUNCTION, PRINT_FUNCTION};

/// Longest string `repeat` and the random functions produce.
pub const MAX_GENERATED_CHARS: usize = 65_536;

/// Names of the Sprig functions available to templates (besides Go's built-ins).
pub const SPRIG_FUNCTIONS: [&str; 31] = [
    "default",
    "empty",
    "coalesce",
    "ternary",
    "quote",
    "squote",
    "cat",
    "toString",
    "b64enc",
    "b64dec",
    "upper",
    "lower",
    "trim",
    "trimAll",
    "trimPrefix",
    "trimSuffix",
    "nospace",
    "replace",
    "contains",
    "hasPrefix",
    "hasSuffix",
    "repeat",
    "trunc",
    "indent",
    "nindent",
    "sha256sum",
    "randAlphaNum",
    "randAlpha",
    "randNumeric",
    "randAscii",
    "uuidv4",
];

/// Every function added to the engine: the Sprig subset and the two inserted calls.
pub(crate) const FUNCTIONS: [(&str, Func); 33] = [
    ("default", default as Func),
    ("empty", empty),
    ("coalesce", coalesce),
    ("ternary", ternary),
    ("quote", quote),
    ("squote", squote),
    ("cat", cat),
    ("toString", to_string),
    ("b64enc", b64enc),
    ("b64dec", b64dec),
    ("upper", upper),
    ("lower", lower),
    ("trim", trim),
    ("trimAll", trim_all),
    ("trimPrefix", trim_prefix),
    ("trimSuffix", trim_suffix),
    ("nospace", nospace),
    ("replace", replace),
    ("contains", contains),
    ("hasPrefix", has_prefix),
    ("hasSuffix", has_suffix),
    ("repeat", repeat),
    ("trunc", trunc),
    ("indent", indent),
    ("nindent", nindent),
    ("sha256sum", sha256sum),
    ("randAlphaNum", rand_alpha_num),
    ("randAlpha", rand_alpha),
    ("randNumeric", rand_numeric),
    ("randAscii", rand_ascii),
    ("uuidv4", uuidv4),
    (PRINT_FUNCTION, print_action),
    (AT_FUNCTION, at_action),
];

fn fail(message: String) -> FuncError {
    FuncError::Generic(message)
}

fn exactly<'a, const N: usize>(name: &str, args: &'a [Value]) -> Result<&'a [Value; N], FuncError> {
    args.try_into()
        .map_err(|_| FuncError::ExactlyXArgs(name.to_owned(), N))
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::NoValue => "no value",
        Value::Nil => "nil",
        Value::Bool(_) => "bool",
        Value::String(_) => "string",
        Value::Number(_) => "number",
        Value::Array(_) => "list",
        Value::Map(_) | Value::Object(_) => "map",
        Value::Function(_) => "function",
    }
}

fn string_arg<'a>(name: &str, value: &'a Value) -> Result<&'a str, FuncError> {
    match value {
        Value::String(s) => Ok(s),
        other => Err(fail(format!(
            "{name}: expected a string, got {}",
            type_name(other)
        ))),
    }
}

fn int_arg(name: &str, value: &Value) -> Result<i64, FuncError> {
    match value {
        Value::Number(n) => n.as_i64().ok_or_else(|| {
            fail(format!(
                "{name}: expected an integer, got {}",
                sprint(value)
            ))
        }),
        other => Err(fail(format!(
            "{name}: expected an integer, got {}",
            type_name(other)
        ))),
    }
}

/// A character count: a non-negative integer, capped by [`MAX_GENERATED_CHARS`].
fn count_arg(name: &str, value: &Value) -> Result<usize, FuncError> {
    let n = int_arg(name, value)?;
    let count = usize::try_from(n)
        .map_err(|_| fail(format!("{name}: the count must not be negative, got {n}")))?;
    if count > MAX_GENERATED_CHARS {
        return Err(fail(format!(
            "{name}: {count} characters exceed the limit of {MAX_GENERATED_CHARS}"
        )));
    }
    Ok(count)
}

fn is_nil(value: &Value) -> bool {
    matches!(value, Value::NoValue | Value::Nil)
}

/// Sprig's `empty`: nil, zero, false, and empty strings, lists and maps.
pub(crate) fn is_empty(value: &Value) -> bool {
    match value {
        Value::NoValue | Value::Nil => true,
        Value::Bool(b) => !b,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Map(m) | Value::Object(m) => m.is_empty(),
        Value::Number(n) => {
            n.as_u64() == Some(0) || n.as_i64() == Some(0) || n.as_f64() == Some(0.0)
        }
        Value::Function(_) => false,
    }
}

/// Sprig's `strval`: strings as they are, anything else as `%v` (nil as `<nil>`).
fn strval(value: &Value) -> String {
    match value {
        Value::NoValue | Value::Nil => "<nil>".to_owned(),
        other => sprint(other),
    }
}

/// `default DEFAULT GIVEN`: GIVEN unless it is empty, else DEFAULT.
fn default(args: &[Value]) -> Result<Value, FuncError> {
    match args {
        [] => Err(FuncError::AtLeastXArgs("default".to_owned(), 1)),
        [fallback] => Ok(fallback.clone()),
        [fallback, given, ..] => Ok(if is_empty(given) { fallback } else { given }.clone()),
    }
}

fn empty(args: &[Value]) -> Result<Value, FuncError> {
    let [v] = exactly("empty", args)?;
    Ok(Value::Bool(is_empty(v)))
}

/// `coalesce A B ...`: the first non-empty argument, else nil.
fn coalesce(args: &[Value]) -> Result<Value, FuncError> {
    Ok(args
        .iter()
        .find(|v| !is_empty(v))
        .cloned()
        .unwrap_or(Value::Nil))
}

/// `ternary IF_TRUE IF_FALSE CONDITION`.
fn ternary(args: &[Value]) -> Result<Value, FuncError> {
    let [yes, no, condition] = exactly("ternary", args)?;
    match condition {
        Value::Bool(true) => Ok(yes.clone()),
        Value::Bool(false) => Ok(no.clone()),
        other => Err(fail(format!(
            "ternary: the condition must be a bool, got {}",
            type_name(other)
        ))),
    }
}

/// `quote A B ...`: each non-nil argument as a Go double-quoted string, space-separated.
fn quote(args: &[Value]) -> Result<Value, FuncError> {
    let quoted: Vec<String> = args
        .iter()
        .filter(|v| !is_nil(v))
        .map(|v| go_quote(&strval(v)))
        .collect();
    Ok(Value::String(quoted.join(" ")))
}

/// `squote A B ...`: each non-nil argument in single quotes, unescaped.
fn squote(args: &[Value]) -> Result<Value, FuncError> {
    let quoted: Vec<String> = args
        .iter()
        .filter(|v| !is_nil(v))
        .map(|v| format!("'{}'", sprint(v)))
        .collect();
    Ok(Value::String(quoted.join(" ")))
}

/// `cat A B ...`: the non-nil arguments, space-separated.
fn cat(args: &[Value]) -> Result<Value, FuncError> {
    let parts: Vec<String> = args.iter().filter(|v| !is_nil(v)).map(sprint).collect();
    Ok(Value::String(parts.join(" ")))
}

fn to_string(args: &[Value]) -> Result<Value, FuncError> {
    let [v] = exactly("toString", args)?;
    Ok(Value::String(strval(v)))
}

/// Go's `%q`: `strconv.Quote`.
pub(crate) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if c < ' ' || c == '\u{7f}' => out.push_str(&format!("\\x{:02x}", u32::from(c))),
            c if !go_is_print(c) => {
                if u32::from(c) < 0x10000 {
                    out.push_str(&format!("\\u{:04x}", u32::from(c)));
                } else {
                    out.push_str(&format!("\\U{:08x}", u32::from(c)));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Go's `unicode.IsPrint`, short of a category table: controls, spaces other
/// than U+0020, the common format characters and private use are not printable.
fn go_is_print(c: char) -> bool {
    let u = u32::from(c);
    let format = matches!(
        u,
        0xAD | 0x600..=0x605 | 0x61C | 0x6DD | 0x70F | 0x180E | 0x200B..=0x200F
            | 0x202A..=0x202E | 0x2060..=0x2064 | 0x2066..=0x206F | 0xFEFF | 0xFFF9..=0xFFFB
    );
    let private = matches!(u, 0xE000..=0xF8FF | 0xF0000..=0x10FFFF);
    c == ' ' || !(c.is_control() || c.is_whitespace() || format || private)
}

/// Go's `base64.StdEncoding`: padded, and lenient about unused trailing bits.
const GO_STD_BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    PAD.with_decode_allow_trailing_bits(true),
);

fn b64enc(args: &[Value]) -> Result<Value, FuncError> {
    let [v] = exactly("b64enc", args)?;
    Ok(Value::String(
        GO_STD_BASE64.encode(string_arg("b64enc", v)?.as_bytes()),
    ))
}

fn b64dec(args: &[Value]) -> Result<Value, FuncError> {
    let [v] = exactly("b64dec", args)?;
    // Go's decoder skips line breaks.
    let input: String = string_arg("b64dec", v)?
        .chars()
        .filter(|c| !matches!(c, '\r' | '\n'))
        .collect();
    let bytes = GO_STD_BASE64
        .decode(input)
        .map_err(|e| fail(format!("b64dec: {e}")))?;
    String::from_utf8(bytes)
        .map(Value::String)
        .map_err(|_| fail("b64dec: the decoded bytes are not UTF-8 text".to_owned()))
}

/// A function of one string.
fn string_function(
    name: &str,
    args: &[Value],
    f: impl FnOnce(&str) -> String,
) -> Result<Value, FuncError> {
    let [v] = exactly(name, args)?;
    Ok(Value::String(f(string_arg(name, v)?)))
}

/// A function of two strings; `subject` is the last (piped) one.
fn two_strings<T: Into<Value>>(
    name: &str,
    args: &[Value],
    f: impl FnOnce(&str, &str) -> T,
) -> Result<Value, FuncError> {
    let [a, subject] = exactly(name, args)?;
    Ok(f(string_arg(name, a)?, string_arg(name, subject)?).into())
}

fn upper(args: &[Value]) -> Result<Value, FuncError> {
    string_function("upper", args, str::to_uppercase)
}

fn lower(args: &[Value]) -> Result<Value, FuncError> {
    string_function("lower", args, str::to_lowercase)
}

fn trim(args: &[Value]) -> Result<Value, FuncError> {
    string_function("trim", args, |s| s.trim().to_owned())
}

fn nospace(args: &[Value]) -> Result<Value, FuncError> {
    string_function("nospace", args, |s| {
        s.chars().filter(|c| !c.is_whitespace()).collect()
    })
}

fn sha256sum(args: &[Value]) -> Result<Value, FuncError> {
    string_function("sha256sum", args, |s| {
        hex::encode(Sha256::digest(s.as_bytes()))
    })
}

/// `trimAll CUTSET S`: S without leading and trailing characters from CUTSET.
fn trim_all(args: &[Value]) -> Result<Value, FuncError> {
    two_strings("trimAll", args, |cutset, s| {
        s.trim_matches(|c| cutset.contains(c)).to_owned()
    })
}

fn trim_prefix(args: &[Value]) -> Result<Value, FuncError> {
    two_strings("trimPrefix", args, |prefix, s| {
        s.strip_prefix(prefix).unwrap_or(s).to_owned()
    })
}

fn trim_suffix(args: &[Value]) -> Result<Value, FuncError> {
    two_strings("trimSuffix", args, |suffix, s| {
        s.strip_suffix(suffix).unwrap_or(s).to_owned()
    })
}

fn contains(args: &[Value]) -> Result<Value, FuncError> {
    two_strings("contains", args, |needle, s| s.contains(needle))
}

fn has_prefix(args: &[Value]) -> Result<Value, FuncError> {
    two_strings("hasPrefix", args, |prefix, s| s.starts_with(prefix))
}

fn has_suffix(args: &[Value]) -> Result<Value, FuncError> {
    two_strings("hasSuffix", args, |suffix, s| s.ends_with(suffix))
}

/// `replace OLD NEW S`: every OLD in S replaced by NEW.
fn replace(args: &[Value]) -> Result<Value, FuncError> {
    let [old, new, s] = exactly("replace", args)?;
    let (old, new, s) = (
        string_arg("replace", old)?,
        string_arg("replace", new)?,
        string_arg("replace", s)?,
    );
    Ok(Value::String(s.replace(old, new)))
}

/// `repeat COUNT S`.
fn repeat(args: &[Value]) -> Result<Value, FuncError> {
    let [count, s] = exactly("repeat", args)?;
    let count = int_arg("repeat", count)?;
    let s = string_arg("repeat", s)?;
    let count = usize::try_from(count).unwrap_or(0);
    let chars = s.chars().count().saturating_mul(count);
    if chars > MAX_GENERATED_CHARS {
        return Err(fail(format!(
            "repeat: {chars} characters exceed the limit of {MAX_GENERATED_CHARS}"
        )));
    }
    Ok(Value::String(s.repeat(count)))
}

/// `trunc N S`: the first N characters of S, or the last -N when N is negative.
fn trunc(args: &[Value]) -> Result<Value, FuncError> {
    let [n, s] = exactly("trunc", args)?;
    let n = int_arg("trunc", n)?;
    let s = string_arg("trunc", s)?;
    let len = s.chars().count();
    let keep = usize::try_from(n.unsigned_abs()).unwrap_or(usize::MAX);
    let out: String = if n >= 0 {
        s.chars().take(keep).collect()
    } else {
        s.chars().skip(len.saturating_sub(keep)).collect()
    };
    Ok(Value::String(out))
}

/// `indent N S`: every line of S prefixed with N spaces.
fn indent(args: &[Value]) -> Result<Value, FuncError> {
    let [n, s] = exactly("indent", args)?;
    Ok(Value::String(indented(
        count_arg("indent", n)?,
        string_arg("indent", s)?,
    )))
}

/// `nindent N S`: a newline, then `indent N S`.
fn nindent(args: &[Value]) -> Result<Value, FuncError> {
    let [n, s] = exactly("nindent", args)?;
    Ok(Value::String(format!(
        "\n{}",
        indented(count_arg("nindent", n)?, string_arg("nindent", s)?)
    )))
}

fn indented(spaces: usize, s: &str) -> String {
    let pad = " ".repeat(spaces);
    format!("{pad}{}", s.replace('\n', &format!("\n{pad}")))
}

const DIGITS: &[u8] = b"0123456789";
const LETTERS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
const ALPHANUMERIC: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

fn random_string(name: &str, args: &[Value], alphabet: &[u8]) -> Result<Value, FuncError> {
    let [count] = exactly(name, args)?;
    let count = count_arg(name, count)?;
    render_scope::with_random(|random| sample_chars(random, alphabet, count))
        .map(Value::String)
        .map_err(|e: RandomUnavailable| fail(format!("{name}: {e}")))
}

fn rand_alpha_num(args: &[Value]) -> Result<Value, FuncError> {
    random_string("randAlphaNum", args, ALPHANUMERIC)
}

fn rand_alpha(args: &[Value]) -> Result<Value, FuncError> {
    random_string("randAlpha", args, LETTERS)
}

fn rand_numeric(args: &[Value]) -> Result<Value, FuncError> {
    random_string("randNumeric", args, DIGITS)
}

/// Printable ASCII, space (32) to tilde (126), as Sprig's `randAscii`.
fn rand_ascii(args: &[Value]) -> Result<Value, FuncError> {
    let printable: Vec<u8> = (b' '..=b'~').collect();
    random_string("randAscii", args, &printable)
}

/// A random (version 4) UUID, lower-case.
fn uuidv4(args: &[Value]) -> Result<Value, FuncError> {
    let [] = exactly("uuidv4", args)?;
    let mut b = [0u8; 16];
    render_scope::with_random(|random| random.fill(&mut b))
        .map_err(|e| fail(format!("uuidv4: {e}")))?;
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = hex::encode(b);
    Ok(Value::String(format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )))
}

/// The inserted final call of a printing action.
fn print_action(args: &[Value]) -> Result<Value, FuncError> {
    let [v] = exactly(PRINT_FUNCTION, args)?;
    Ok(Value::String(action_output(v)))
}

/// The inserted marker in front of every action.
fn at_action(args: &[Value]) -> Result<Value, FuncError> {
    let [n] = exactly(AT_FUNCTION, args)?;
    let index = match n {
        Value::Number(n) => n.as_u64().and_then(|u| usize::try_from(u).ok()),
        _ => None,
    };
    render_scope::set_action(index);
    Ok(Value::String(String::new()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::RepeatingBytes;
    use crate::render::render_string;
    use serde_json::json;

    /// Renders `template` over `data` with random bytes 0, 1, 2, ... 255.
    fn run(template: &str, data: serde_json::Value) -> Result<String, String> {
        let bytes: Vec<u8> = (0..=255).collect();
        render_string(template, &data, RepeatingBytes::new(bytes)).map_err(|e| e.to_string())
    }

    fn ok(template: &str, data: serde_json::Value) -> String {
        run(template, data).unwrap()
    }

    #[test]
    fn default_replaces_empty_values_only() {
        let data = json!({"set": "v", "blank": "", "zero": 0, "no": false, "list": []});
        assert_eq!(ok(r#"{{ .set | default "d" }}"#, data.clone()), "v");
        assert_eq!(ok(r#"{{ .missing | default "d" }}"#, data.clone()), "d");
        assert_eq!(ok(r#"{{ .blank | default "d" }}"#, data.clone()), "d");
        assert_eq!(ok(r#"{{ .zero | default "d" }}"#, data.clone()), "d");
        assert_eq!(ok(r#"{{ .no | default "d" }}"#, data.clone()), "d");
        assert_eq!(ok(r#"{{ .list | default "d" }}"#, data.clone()), "d");
        assert_eq!(ok(r#"{{ default "d" .set }}"#, data), "v");
    }

    #[test]
    fn empty_coalesce_ternary() {
        let data = json!({"a": "", "b": "x"});
        assert_eq!(
            ok("{{ empty .a }} {{ empty .b }}", data.clone()),
            "true false"
        );
        assert_eq!(
            ok(r#"{{ coalesce .a .missing .b "z" }}"#, data.clone()),
            "x"
        );
        assert_eq!(ok(r#"{{ ternary "y" "n" (empty .a) }}"#, data.clone()), "y");
        assert!(
            run(r#"{{ ternary "y" "n" .b }}"#, data)
                .unwrap_err()
                .contains("ternary: the condition must be a bool, got string")
        );
    }

    #[test]
    fn quote_escapes_as_go_percent_q() {
        let data = json!({"p": "a\"b\\c\nd\u{1}é\u{a0}", "n": 3});
        assert_eq!(
            ok("{{ .p | quote }}", data.clone()),
            r#""a\"b\\c\nd\x01é\u00a0""#
        );
        assert_eq!(ok("{{ quote .n .missing .n }}", data), r#""3" "3""#);
    }

    #[test]
    fn squote_cat_to_string() {
        let data = json!({"a": "x", "n": 2.5, "t": true});
        assert_eq!(ok("{{ squote .a .n }}", data.clone()), "'x' '2.5'");
        assert_eq!(
            ok("{{ cat .a .missing .n .t }}", data.clone()),
            "x 2.5 true"
        );
        assert_eq!(
            ok("{{ toString .n }}|{{ toString .missing }}", data),
            "2.5|<nil>"
        );
    }

    #[test]
    fn b64enc_and_b64dec_round_trip() {
        let data = json!({"p": "s3cr3t&+/?", "enc": "czNjcjN0JisvPw=="});
        assert_eq!(ok("{{ .p | b64enc }}", data.clone()), "czNjcjN0JisvPw==");
        assert_eq!(ok("{{ .enc | b64dec }}", data.clone()), "s3cr3t&+/?");
        assert_eq!(ok("{{ .p | b64enc | b64dec }}", data), "s3cr3t&+/?");
    }

    #[test]
    fn b64dec_of_invalid_input_is_an_error_not_a_value() {
        let err = run(r#"{{ "not base64!" | b64dec }}"#, json!({})).unwrap_err();
        assert!(err.contains("b64dec: "), "{err}");
        let err = run(r#"{{ "/w==" | b64dec }}"#, json!({})).unwrap_err();
        assert!(err.contains("not UTF-8"), "{err}");
    }

    #[test]
    fn case_and_whitespace() {
        let data = json!({"s": "  Hello World \n", "n": 1});
        assert_eq!(ok("{{ .s | upper }}", data.clone()), "  HELLO WORLD \n");
        assert_eq!(ok("{{ .s | lower }}", data.clone()), "  hello world \n");
        assert_eq!(ok("{{ .s | trim }}", data.clone()), "Hello World");
        assert_eq!(ok("{{ .s | nospace }}", data.clone()), "HelloWorld");
        let err = run("{{ .n | upper }}", data.clone()).unwrap_err();
        assert!(
            err.contains("upper: expected a string, got number"),
            "{err}"
        );
        let err = run("{{ .missing | trim }}", data).unwrap_err();
        assert!(
            err.contains("trim: expected a string, got no value"),
            "{err}"
        );
    }

    #[test]
    fn trims_and_tests() {
        let data = json!({"s": "$$price-tag$"});
        assert_eq!(ok(r#"{{ .s | trimAll "$" }}"#, data.clone()), "price-tag");
        assert_eq!(
            ok(r#"{{ .s | trimPrefix "$" }}"#, data.clone()),
            "$price-tag$"
        );
        assert_eq!(
            ok(r#"{{ .s | trimSuffix "$" }}"#, data.clone()),
            "$$price-tag"
        );
        assert_eq!(
            ok(r#"{{ .s | replace "$" "€" }}"#, data.clone()),
            "€€price-tag€"
        );
        assert_eq!(
            ok(
                r#"{{ contains "price" .s }} {{ hasPrefix "$" .s }} {{ hasSuffix "x" .s }}"#,
                data
            ),
            "true true false"
        );
    }

    #[test]
    fn repeat_trunc_indent() {
        let data = json!({"s": "héllo", "lines": "a\nb"});
        assert_eq!(ok(r#"{{ "ab" | repeat 3 }}"#, data.clone()), "ababab");
        assert_eq!(ok("{{ .s | trunc 2 }}", data.clone()), "hé");
        assert_eq!(ok("{{ .s | trunc -3 }}", data.clone()), "llo");
        assert_eq!(ok("{{ .s | trunc 99 }}", data.clone()), "héllo");
        assert_eq!(ok("{{ .lines | indent 2 }}", data.clone()), "  a\n  b");
        assert_eq!(ok("{{ .lines | nindent 1 }}", data.clone()), "\n a\n b");
        let err = run(r#"{{ "ab" | repeat 100000 }}"#, data).unwrap_err();
        assert!(err.contains("exceed the limit"), "{err}");
    }

    #[test]
    fn sha256sum_is_hex_of_the_digest() {
        assert_eq!(
            ok(r#"{{ "abc" | sha256sum }}"#, json!({})),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn random_functions_draw_from_the_injected_source() {
        // Bytes 0, 1, 2, ...: index i of each alphabet, in order.
        assert_eq!(ok("{{ randAlphaNum 5 }}", json!({})), "abcde");
        assert_eq!(ok("{{ randNumeric 12 }}", json!({})), "012345678901");
        assert_eq!(ok("{{ randAlpha 3 }}", json!({})), "abc");
        assert_eq!(ok("{{ randAscii 3 }}", json!({})), " !\"");
        assert_eq!(
            ok("{{ uuidv4 }}", json!({})),
            "00010203-0405-4607-8809-0a0b0c0d0e0f"
        );
        // Each call continues where the previous one stopped.
        assert_eq!(
            ok("{{ randAlphaNum 2 }}-{{ randAlphaNum 2 }}", json!({})),
            "ab-cd"
        );
    }

    #[test]
    fn random_counts_are_checked() {
        let err = run("{{ randAlphaNum -1 }}", json!({})).unwrap_err();
        assert!(err.contains("must not be negative"), "{err}");
        let err = run("{{ randAlphaNum 1000000 }}", json!({})).unwrap_err();
        assert!(err.contains("exceed the limit"), "{err}");
        let err = run(r#"{{ randAlphaNum "8" }}"#, json!({})).unwrap_err();
        assert!(err.contains("expected an integer, got string"), "{err}");
    }

    #[test]
    fn every_listed_function_is_registered() {
        for name in SPRIG_FUNCTIONS {
            assert!(
                FUNCTIONS.iter().any(|(n, _)| *n == name),
                "{name} is listed but not registered"
            );
        }
        assert_eq!(FUNCTIONS.len(), SPRIG_FUNCTIONS.len() + 2);
    }
}
