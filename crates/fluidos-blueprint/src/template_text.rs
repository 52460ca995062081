//! One templated string, made ready for the engine: where its actions are,
//! and the two calls inserted around them.
//!
//! The engine (gtmpl) gives neither a hook on what an action prints nor the
//! position of an execution error, so before parsing, every action gets
//! - a marker action `{{_fluidosAt N}}` in front of it, which records that
//!   action `N` is being evaluated (an execution error is then reported at
//!   action `N`'s line and column), and
//! - if it prints, a final `| _fluidosPrint` on its pipeline, which prints
//!   the value as the Go node does (see [`crate::go_value::action_output`]).
//!
//! Only action boundaries are found here (quotes, comments, trim markers),
//! mirroring gtmpl's lexer; parsing stays the engine's. Inserted text never
//! contains a newline, so the engine's line numbers stay the source's. An
//! action this scan cannot delimit (unclosed) is left as it is, for the
//! engine to report.

/// Name of the function that prints an action's value.
pub(crate) const PRINT_FUNCTION: &str = "_fluidosPrint";
/// Name of the function that records which action is being evaluated.
pub(crate) const AT_FUNCTION: &str = "_fluidosAt";

/// Where an action starts in the source string (1-based, column in characters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ActionStart {
    pub line: usize,
    pub column: usize,
}

/// How an action changes the nesting of control structures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Nesting {
    /// `if`, `range`, `with`, `define`, `block`: needs an `end`.
    Opens,
    /// `end`.
    Closes,
    /// Anything else (`else` included).
    Keeps,
}

/// An action of the source, as placed in the prepared text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PreparedAction {
    start: ActionStart,
    /// One past its last byte in [`PreparedText::text`].
    end: usize,
    nesting: Nesting,
}

/// The text handed to the engine and the position of each of its actions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PreparedText {
    pub text: String,
    actions: Vec<PreparedAction>,
    /// Where an action starts that has no closing `}}`: never handed to
    /// the engine, whose lexer does not return on some of them
    /// (`{{ .a "` loops forever in gtmpl 0.7).
    pub unterminated: Option<ActionStart>,
}

impl PreparedText {
    /// Where action `index` starts in the source.
    pub(crate) fn action_start(&self, index: usize) -> Option<ActionStart> {
        self.actions.get(index).map(|a| a.start)
    }

    /// The prepared text up to the end of action `index`, with an `{{end}}`
    /// for each control structure still open there, so that it parses on its
    /// own if the text so far is correct.
    ///
    /// gtmpl's parse errors carry a line number it miscounts (each text and
    /// delimiter item adds a line), so the failing action is found instead
    /// as the first whose prefix does not parse.
    pub(crate) fn prefix_through(&self, index: usize) -> Option<String> {
        let action = self.actions.get(index)?;
        let open = self.actions[..=index]
            .iter()
            .fold(0usize, |depth, a| match a.nesting {
                Nesting::Opens => depth + 1,
                Nesting::Closes => depth.saturating_sub(1),
                Nesting::Keeps => depth,
            });
        Some(format!(
            "{}{}",
            &self.text[..action.end],
            "{{end}}".repeat(open)
        ))
    }

    /// How many actions the source has.
    pub(crate) fn action_count(&self) -> usize {
        self.actions.len()
    }

    /// The innermost control structure left without an `end`, if any.
    pub(crate) fn unclosed_action(&self) -> Option<usize> {
        let mut open = Vec::new();
        for (i, a) in self.actions.iter().enumerate() {
            match a.nesting {
                Nesting::Opens => open.push(i),
                Nesting::Closes => {
                    open.pop();
                }
                Nesting::Keeps => {}
            }
        }
        open.pop()
    }
}

/// One `{{ ... }}` in the source: byte offsets.
struct Action {
    /// First byte of `{{`.
    open: usize,
    /// Whether it opens with `{{- ` (trims the text before it).
    trims_left: bool,
    /// Start and end of what is between the delimiters and trim markers.
    content: (usize, usize),
    /// One past the last byte of `}}`.
    end: usize,
    /// `{{/* ... */}}`.
    is_comment: bool,
}

/// Inserts the marker and print calls into `source` (see the module docs).
pub(crate) fn prepare(source: &str) -> PreparedText {
    let bytes = source.as_bytes();
    let mut text = String::with_capacity(source.len() + 32);
    let mut actions = Vec::new();
    let mut copied = 0;
    let mut search = 0;
    let mut unterminated = None;
    while let Some(offset) = source[search..].find("{{") {
        let Some(action) = delimit(bytes, search + offset) else {
            unterminated = Some(start_of(source, search + offset));
            break;
        };
        text.push_str(&source[copied..action.open]);
        if action.is_comment {
            text.push_str(&source[action.open..action.end]);
        } else {
            let index = actions.len();
            // The marker takes over the left trim marker: it is what now
            // follows the text to trim.
            let open = if action.trims_left { "{{- " } else { "{{" };
            text.push_str(&format!("{open}{AT_FUNCTION} {index}}}}}{{{{"));
            let content = &source[action.content.0..action.content.1];
            text.push_str(content);
            let nesting = nesting(content);
            if prints(content) {
                text.push_str(" | ");
                text.push_str(PRINT_FUNCTION);
            }
            text.push_str(&source[action.content.1..action.end]);
            actions.push(PreparedAction {
                start: start_of(source, action.open),
                end: text.len(),
                nesting,
            });
        }
        copied = action.end;
        search = action.end;
    }
    text.push_str(&source[copied..]);
    PreparedText {
        text,
        actions,
        unterminated,
    }
}

/// Removes the inserted calls from an engine message, so it shows the user's text.
pub(crate) fn strip_inserted(message: &str) -> String {
    message.replace(&format!(" | {PRINT_FUNCTION}"), "")
}

fn start_of(source: &str, offset: usize) -> ActionStart {
    let before = &source[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = source[line_start..offset].chars().count() + 1;
    ActionStart { line, column }
}

/// Finds the end of the action opening at `open`, as gtmpl's lexer would.
fn delimit(bytes: &[u8], open: usize) -> Option<Action> {
    let mut p = open + 2;
    let trims_left = bytes[p..].starts_with(b"- ");
    if trims_left {
        p += 2;
    }
    let content_start = p;
    if bytes[p..].starts_with(b"/*") {
        let close = find(bytes, p + 2, b"*/")? + 2;
        let end = close_delimiter(bytes, close)?;
        return Some(Action {
            open,
            trims_left,
            content: (content_start, close),
            end,
            is_comment: true,
        });
    }
    let mut q = p;
    loop {
        if q >= bytes.len() {
            return None;
        }
        if let Some(end) = close_delimiter(bytes, q) {
            return Some(Action {
                open,
                trims_left,
                content: (content_start, q),
                end,
                is_comment: false,
            });
        }
        q = match bytes[q] {
            quote @ (b'"' | b'\'') => skip_quoted(bytes, q, quote)?,
            b'`' => find(bytes, q + 1, b"`")? + 1,
            // gtmpl ends an action at a line break ("unclosed action").
            b'\n' | b'\r' => return None,
            _ => q + 1,
        };
    }
}

/// `}}` or ` -}}` at `at`: one past its end.
fn close_delimiter(bytes: &[u8], at: usize) -> Option<usize> {
    if bytes[at..].starts_with(b"}}") {
        Some(at + 2)
    } else if bytes[at..].starts_with(b" -}}") {
        Some(at + 4)
    } else {
        None
    }
}

/// One past the closing quote of the literal opening at `open`.
fn skip_quoted(bytes: &[u8], open: usize, quote: u8) -> Option<usize> {
    let mut q = open + 1;
    while q < bytes.len() {
        match bytes[q] {
            b'\\' => q += 2,
            b'\n' => return None,
            b if b == quote => return Some(q + 1),
            _ => q += 1,
        }
    }
    None
}

fn find(bytes: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    bytes
        .get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|i| from + i)
}

fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The first word of an action.
fn keyword(content: &str) -> &str {
    let content = content.trim_start();
    &content[..content.find(|c| !is_word(c)).unwrap_or(content.len())]
}

fn nesting(content: &str) -> Nesting {
    match keyword(content) {
        "if" | "range" | "with" | "define" | "block" => Nesting::Opens,
        "end" => Nesting::Closes,
        _ => Nesting::Keeps,
    }
}

/// Whether an action with this content prints its value: not a keyword
/// action (`if`, `end`, `template`, ...), not a variable declaration, not empty.
fn prints(content: &str) -> bool {
    const KEYWORDS: [&str; 10] = [
        "if", "else", "end", "range", "with", "define", "block", "template", "break", "continue",
    ];
    let content = content.trim_start();
    if content.trim_end().is_empty() || KEYWORDS.contains(&keyword(content)) {
        return false;
    }
    if let Some(variable) = content.strip_prefix('$') {
        let name_len = variable.find(|c| !is_word(c)).unwrap_or(variable.len());
        let after = variable[name_len..].trim_start();
        let declares = after.starts_with(":=")
            || after.starts_with(',')
            || (after.starts_with('=') && !after.starts_with("=="));
        return !declares;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_every_action_and_prints_output_actions() {
        let p = prepare("a {{ .x }} b {{- if .y -}} c {{ end }}");
        assert_eq!(
            p.text,
            "a {{_fluidosAt 0}}{{ .x  | _fluidosPrint}} b {{- _fluidosAt 1}}{{if .y -}} c \
             {{_fluidosAt 2}}{{ end }}"
        );
        let starts: Vec<_> = (0..p.action_count())
            .filter_map(|i| p.action_start(i))
            .collect();
        assert_eq!(
            starts,
            vec![
                ActionStart { line: 1, column: 3 },
                ActionStart {
                    line: 1,
                    column: 14
                },
                ActionStart {
                    line: 1,
                    column: 30
                },
            ]
        );
    }

    #[test]
    fn declarations_and_comments_do_not_print() {
        let p = prepare("{{ $a := .x }}{{/* note */}}{{- /* trimmed */ -}}{{ $a }}");
        assert_eq!(
            p.text,
            "{{_fluidosAt 0}}{{ $a := .x }}{{/* note */}}{{- /* trimmed */ -}}\
             {{_fluidosAt 1}}{{ $a  | _fluidosPrint}}"
        );
    }

    #[test]
    fn delimiters_inside_quotes_do_not_close_the_action() {
        let p = prepare(r#"{{ "}}" }}{{ `}}` }}{{ "\"}}" }}"#);
        assert_eq!(p.action_count(), 3);
        assert!(
            p.text.ends_with(r#"{{ "\"}}"  | _fluidosPrint}}"#),
            "{}",
            p.text
        );
    }

    #[test]
    fn positions_count_lines_and_characters() {
        let p = prepare("ü\nxx {{ .a }}");
        assert_eq!(p.action_start(0), Some(ActionStart { line: 2, column: 4 }));
    }

    #[test]
    fn an_unclosed_action_is_marked() {
        let p = prepare("ok {{ .a }} broken {{ .b ");
        assert_eq!(p.action_count(), 1);
        assert!(p.text.ends_with("broken {{ .b "));
        assert_eq!(
            p.unterminated,
            Some(ActionStart {
                line: 1,
                column: 20
            })
        );
    }

    #[test]
    fn prefixes_close_what_is_open() {
        let p = prepare("{{ if .a }}{{ range .b }}{{ . }}{{ end }}{{ else }}x{{ end }}");
        assert_eq!(
            p.prefix_through(1).unwrap(),
            "{{_fluidosAt 0}}{{ if .a }}{{_fluidosAt 1}}{{ range .b }}{{end}}{{end}}"
        );
        assert!(p.prefix_through(4).unwrap().ends_with("{{ else }}{{end}}"));
        assert!(
            p.prefix_through(5)
                .unwrap()
                .ends_with("x{{_fluidosAt 5}}{{ end }}")
        );
        assert_eq!(p.prefix_through(6), None);
        assert_eq!(p.unclosed_action(), None);
        assert_eq!(
            prepare("{{ if .a }}{{ with .b }}{{ end }}").unclosed_action(),
            Some(0)
        );
    }

    #[test]
    fn messages_hide_the_inserted_print() {
        assert_eq!(strip_inserted("at <.a | _fluidosPrint>"), "at <.a>");
    }
}
