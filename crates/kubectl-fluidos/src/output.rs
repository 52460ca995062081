//! Terminal output: kubectl-style tables, ages, colour, and `-o json|yaml`.
//!
//! Everything here is pure (strings in, strings out) except [`Palette::detect`]
//! and [`print_structured`], which look at the terminal and write to stdout.

use std::io::IsTerminal;

use serde::Serialize;

/// `-o` of the read commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// The whole result as JSON.
    Json,
    /// The whole result as YAML.
    Yaml,
}

/// Prints `value` to stdout as JSON or YAML.
pub fn print_structured<T: Serialize>(format: OutputFormat, value: &T) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let text = match format {
        OutputFormat::Json => {
            let mut s = serde_json::to_string_pretty(value).context("encoding JSON")?;
            s.push('\n');
            s
        }
        OutputFormat::Yaml => serde_yaml::to_string(value).context("encoding YAML")?,
    };
    print!("{text}");
    Ok(())
}

/// What a cell's colour says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tone {
    /// No colour.
    Plain,
    /// Done, healthy.
    Good,
    /// In progress, waiting.
    Busy,
    /// Failed.
    Bad,
    /// Secondary information.
    Faint,
    /// Headers.
    Strong,
}

/// Whether to colour, decided once per run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Palette {
    enabled: bool,
}

impl Palette {
    /// Colour only when stdout is a terminal and `NO_COLOR` is unset or empty
    /// (<https://no-color.org>).
    pub fn detect() -> Self {
        let no_color = std::env::var_os("NO_COLOR");
        Palette::new(
            std::io::stdout().is_terminal(),
            no_color.as_deref().and_then(|v| v.to_str()),
        )
    }

    /// The decision for a stdout that is (or is not) a terminal and this
    /// value of `NO_COLOR`.
    pub fn new(stdout_is_terminal: bool, no_color: Option<&str>) -> Self {
        Palette {
            enabled: stdout_is_terminal && no_color.is_none_or(str::is_empty),
        }
    }

    /// Never colour.
    pub fn plain() -> Self {
        Palette { enabled: false }
    }

    /// True when colour codes are written.
    pub fn enabled(self) -> bool {
        self.enabled
    }

    /// `text` in the colour of `tone`.
    pub fn paint(self, tone: Tone, text: &str) -> String {
        let code = match tone {
            Tone::Plain => return text.to_owned(),
            Tone::Good => "32",
            Tone::Busy => "33",
            Tone::Bad => "31",
            Tone::Faint => "2",
            Tone::Strong => "1",
        };
        if self.enabled && !text.is_empty() {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }
}

/// The tone of a phase or state string of any FLUIDOS or Liqo kind.
pub fn tone_of(state: &str) -> Tone {
    match state {
        "Solved" | "Active" | "Established" | "Ready" | "Answered" | "bought" | "sold" => {
            Tone::Good
        }
        "Failed" | "Timed Out" | "TimedOut" | "Error" | "NotReady" | "expired" => Tone::Bad,
        "" | "-" => Tone::Faint,
        _ => Tone::Busy,
    }
}

/// `text` with its control characters (terminal escape sequences among
/// them) shown as `?`: flavor IDs, prices and messages come from peers, and
/// a peer must not be able to rewrite the user's terminal.
pub fn printable(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// One table cell: its text and tone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cell {
    /// What is shown.
    pub text: String,
    /// How it is coloured.
    pub tone: Tone,
}

impl Cell {
    /// An uncoloured cell; empty text shows as `<none>`, as kubectl does.
    pub fn plain(text: impl Into<String>) -> Self {
        Cell {
            text: printable(&text.into()),
            tone: Tone::Plain,
        }
    }

    /// A cell coloured by what its state string says.
    pub fn state(text: impl Into<String>) -> Self {
        let text = printable(&text.into());
        let tone = tone_of(&text);
        Cell { text, tone }
    }
}

/// A kubectl-style table: upper-case headers, columns three spaces apart,
/// empty cells shown as `<none>`.
#[derive(Clone, Debug, Default)]
pub struct Table {
    headers: Vec<&'static str>,
    rows: Vec<Vec<Cell>>,
}

impl Table {
    /// An empty table with these headers.
    pub fn new(headers: &[&'static str]) -> Self {
        Table {
            headers: headers.to_vec(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (missing cells are empty, extra cells are dropped).
    pub fn push(&mut self, row: Vec<Cell>) {
        self.rows.push(row);
    }

    /// True when no row was added.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The table as text, one line per row, each ending in a newline.
    pub fn render(&self, palette: Palette) -> String {
        let cell_text = |c: Option<&Cell>| -> String {
            match c {
                Some(c) if !c.text.is_empty() => c.text.clone(),
                _ => "<none>".to_owned(),
            }
        };
        let columns = self.headers.len();
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, width) in widths.iter_mut().enumerate() {
                *width = (*width).max(cell_text(row.get(i)).chars().count());
            }
        }
        let mut out = String::new();
        let line = |cells: Vec<(String, Tone)>, out: &mut String| {
            let mut text = String::new();
            for (i, (cell, tone)) in cells.into_iter().enumerate() {
                let last = i + 1 == columns;
                let pad = if last {
                    0
                } else {
                    widths[i].saturating_sub(cell.chars().count()) + 3
                };
                text.push_str(&palette.paint(tone, &cell));
                text.push_str(&" ".repeat(pad));
            }
            out.push_str(text.trim_end());
            out.push('\n');
        };
        line(
            self.headers
                .iter()
                .map(|h| ((*h).to_owned(), Tone::Plain))
                .collect(),
            &mut out,
        );
        for row in &self.rows {
            line(
                (0..columns)
                    .map(|i| {
                        let tone = row.get(i).map_or(Tone::Plain, |c| c.tone);
                        (cell_text(row.get(i)), tone)
                    })
                    .collect(),
                &mut out,
            );
        }
        out
    }
}

/// A duration as kubectl prints ages (`k8s.io/apimachinery/pkg/util/duration.HumanDuration`):
/// `45s`, `3m20s`, `25m`, `4h10m`, `2d3h`, `400d`, `3y20d`.
pub fn human_duration(d: jiff::SignedDuration) -> String {
    let seconds = d.as_secs();
    if seconds < -1 {
        return "<invalid>".to_owned();
    }
    if seconds < 0 {
        return "0s".to_owned();
    }
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = minutes / 60;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let days = (hours / 24) % 365;
        let years = hours / 24 / 365;
        return if days == 0 {
            format!("{years}y")
        } else {
            format!("{years}y{days}d")
        };
    }
    format!("{}y", hours / 24 / 365)
}

/// The age of an object created at `created`, as of `now`; `<unknown>` without a time.
pub fn age(created: Option<jiff::Timestamp>, now: jiff::Timestamp) -> String {
    created.map_or_else(
        || "<unknown>".to_owned(),
        |t| human_duration(now.duration_since(t)),
    )
}

/// The creation time of a Kubernetes object.
pub fn created_at<K: kube::Resource>(obj: &K) -> Option<jiff::Timestamp> {
    obj.meta().creation_timestamp.as_ref().map(|t| t.0)
}

/// `text` cut to `max` characters, with `…` when cut (long messages would
/// make a table unreadable; `-o yaml` has them whole).
pub fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_peers_text_cannot_rewrite_the_terminal() {
        let hostile = "flavor\u{1b}]52;c;cGF5bG9hZA==\u{7}\u{1b}[2J\u{9b}1m";
        let cell = Cell::plain(hostile);
        assert!(!cell.text.chars().any(char::is_control), "{:?}", cell.text);
        assert!(cell.text.starts_with("flavor?"), "{:?}", cell.text);
        assert!(!Cell::state(hostile).text.contains('\u{1b}'));
    }

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(Palette::new(true, None).enabled());
        assert!(
            Palette::new(true, Some("")).enabled(),
            "empty NO_COLOR is unset"
        );
        assert!(!Palette::new(true, Some("1")).enabled());
        assert!(!Palette::new(false, None).enabled());
        assert_eq!(Palette::plain().paint(Tone::Bad, "Failed"), "Failed");
        assert_eq!(
            Palette::new(true, None).paint(Tone::Bad, "Failed"),
            "\x1b[31mFailed\x1b[0m"
        );
    }

    #[test]
    fn table_aligns_columns_like_kubectl() {
        let mut t = Table::new(&["NAME", "PHASE", "AGE"]);
        t.push(vec![
            Cell::plain("solver-a"),
            Cell::state("Solved"),
            Cell::plain("5s"),
        ]);
        t.push(vec![Cell::plain("s"), Cell::plain(""), Cell::plain("10m")]);
        assert_eq!(
            t.render(Palette::plain()),
            "NAME       PHASE    AGE\n\
             solver-a   Solved   5s\n\
             s          <none>   10m\n"
        );
    }

    #[test]
    fn colour_does_not_break_alignment() {
        let mut t = Table::new(&["PHASE", "AGE"]);
        t.push(vec![Cell::state("Failed"), Cell::plain("1s")]);
        t.push(vec![Cell::state("Running"), Cell::plain("2s")]);
        let out = t.render(Palette::new(true, None));
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[1], "\x1b[31mFailed\x1b[0m    1s");
        assert_eq!(lines[2], "\x1b[33mRunning\x1b[0m   2s");
    }

    #[test]
    fn ages_match_kubectl() {
        let s = jiff::SignedDuration::from_secs;
        for (secs, want) in [
            (-5, "<invalid>"),
            (-1, "0s"),
            (0, "0s"),
            (119, "119s"),
            (120, "2m"),
            (200, "3m20s"),
            (25 * 60, "25m"),
            (179 * 60, "179m"),
            (4 * 3600 + 600, "4h10m"),
            (5 * 3600, "5h"),
            (30 * 3600, "30h"),
            (51 * 3600, "2d3h"),
            (3 * 86400, "3d"),
            (400 * 86400, "400d"),
            (3 * 365 * 86400 + 20 * 86400, "3y20d"),
            (9 * 365 * 86400, "9y"),
        ] {
            assert_eq!(human_duration(s(secs)), want, "{secs}s");
        }
        let now = jiff::Timestamp::from_second(1000).unwrap();
        assert_eq!(
            age(Some(jiff::Timestamp::from_second(940).unwrap()), now),
            "60s"
        );
        assert_eq!(age(None, now), "<unknown>");
    }

    #[test]
    fn states_have_tones() {
        assert_eq!(tone_of("Solved"), Tone::Good);
        assert_eq!(tone_of("Timed Out"), Tone::Bad);
        assert_eq!(tone_of("Running"), Tone::Busy);
        assert_eq!(tone_of(""), Tone::Faint);
    }

    #[test]
    fn truncates_long_messages() {
        assert_eq!(truncate("short", 10), "short");
        assert_eq!(truncate("a long message", 6), "a lon…");
    }
}
