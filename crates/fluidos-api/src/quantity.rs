//! Kubernetes resource quantities as exact numbers.
//!
//! Flavors, filters and configurations carry quantities as strings (or, in
//! hand-written YAML, as bare numbers). Comparing and subtracting them needs
//! exact arithmetic: a value here is an integer count of nano-units, which
//! covers every suffix from `n` to `Ei` without rounding.

use std::cmp::Ordering;
use std::fmt;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde::{Deserialize, Deserializer};

/// Which suffix family a quantity was written in; canonical output keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `Ki`, `Mi`, `Gi`, ...
    BinarySI,
    /// `n`, `u`, `m`, `k`, `M`, `G`, ... or none.
    DecimalSI,
    /// `1e3`, `5E-3`.
    DecimalExponent,
}

/// An exact quantity: `nanos` billionths of the unit.
#[derive(Clone, Copy, Debug)]
pub struct Amount {
    /// Value in units of 10^-9.
    pub nanos: i128,
    /// Suffix family used when formatting.
    pub format: Format,
}

impl PartialEq for Amount {
    fn eq(&self, other: &Self) -> bool {
        self.nanos == other.nanos
    }
}
impl Eq for Amount {}
impl PartialOrd for Amount {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Amount {
    fn cmp(&self, other: &Self) -> Ordering {
        self.nanos.cmp(&other.nanos)
    }
}

/// A string that is not a Kubernetes quantity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid quantity {input:?}: {reason}")]
pub struct QuantityError {
    /// What was given.
    pub input: String,
    /// Why it was refused.
    pub reason: &'static str,
}

const NANO: i128 = 1_000_000_000;

impl Amount {
    /// Zero, in decimal format.
    pub const ZERO: Amount = Amount {
        nanos: 0,
        format: Format::DecimalSI,
    };

    /// A whole number of units.
    pub fn from_units(units: i64, format: Format) -> Self {
        Amount {
            nanos: i128::from(units) * NANO,
            format,
        }
    }

    /// Parses `1`, `1.5`, `500m`, `2Gi`, `1e3`, `-3k`.
    pub fn parse(input: &str) -> Result<Self, QuantityError> {
        let err = |reason| QuantityError {
            input: input.to_owned(),
            reason,
        };
        let s = input.trim();
        if s.is_empty() {
            return Err(err("empty"));
        }
        let (negative, body) = match s.as_bytes()[0] {
            b'-' => (true, &s[1..]),
            b'+' => (false, &s[1..]),
            _ => (false, s),
        };
        let num_end = body
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(body.len());
        let (number, suffix) = body.split_at(num_end);
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return Err(err("no number"));
        }
        let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
        // Mantissa as an integer plus a power-of-ten shift for the fraction.
        let digits = format!("{int_part}{frac_part}");
        let digits = digits.trim_start_matches('0');
        if digits.len() > 30 {
            return Err(err("too many digits"));
        }
        let mantissa: i128 = if digits.is_empty() {
            0
        } else {
            digits.parse().map_err(|_| err("bad digits"))?
        };
        let mut exp10: i32 = -(frac_part.len() as i32);
        let scale = suffix_scale(suffix).map_err(err)?;
        exp10 += scale.exp10;
        let mul2 = scale.exp2;
        let format = scale.format;
        let overflow = || err("out of range");
        let mut value = mantissa.checked_mul(1i128 << mul2).ok_or_else(overflow)?;
        // Convert to nanos: shift by exp10 + 9, rounding up as Kubernetes does.
        let shift = exp10 + 9;
        if shift >= 0 {
            value = value
                .checked_mul(10i128.checked_pow(shift as u32).ok_or_else(overflow)?)
                .ok_or_else(overflow)?;
        } else {
            let div = 10i128.checked_pow((-shift) as u32).ok_or_else(overflow)?;
            // Rounded up without `value + div - 1`, which overflows for a
            // mantissa near i128's limit (`value` is never negative here).
            value = value / div + i128::from(value % div != 0);
        }
        if value > i128::from(i64::MAX) * NANO {
            return Err(overflow());
        }
        Ok(Amount {
            nanos: if negative { -value } else { value },
            format,
        })
    }

    /// Parses a k8s-openapi `Quantity`.
    pub fn of(q: &Quantity) -> Result<Self, QuantityError> {
        Amount::parse(&q.0)
    }

    /// `self - other`, keeping this amount's format.
    pub fn saturating_sub(self, other: Amount) -> Amount {
        Amount {
            nanos: (self.nanos - other.nanos).max(0),
            format: self.format,
        }
    }

    /// `self + other`, keeping this amount's format.
    pub fn saturating_add(self, other: Amount) -> Amount {
        Amount {
            nanos: self.nanos.saturating_add(other.nanos),
            format: self.format,
        }
    }

    /// True when the value is zero.
    pub fn is_zero(self) -> bool {
        self.nanos == 0
    }

    /// Whole units, rounded up (Kubernetes `Value()`).
    pub fn units_ceil(self) -> i128 {
        self.nanos.div_euclid(NANO) + i128::from(self.nanos.rem_euclid(NANO) != 0)
    }

    /// Milli-units, rounded up (Kubernetes `MilliValue()`).
    pub fn millis_ceil(self) -> i128 {
        let m = 1_000_000;
        self.nanos.div_euclid(m) + i128::from(self.nanos.rem_euclid(m) != 0)
    }

    /// The quantity in its canonical Kubernetes spelling.
    pub fn to_quantity(self) -> Quantity {
        Quantity(self.to_string())
    }
}

impl fmt::Display for Amount {
    /// Canonical form, as Go's `Quantity.String()` writes it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.nanos;
        if n == 0 {
            return f.write_str("0");
        }
        let sign = if n < 0 { "-" } else { "" };
        let a = n.unsigned_abs();
        let nano = NANO as u128;
        // Binary suffixes only for whole numbers of at least 1Ki.
        if self.format == Format::BinarySI && a.is_multiple_of(nano) && a / nano >= 1024 {
            let mut units = a / nano;
            let mut idx = 0;
            while idx < 6 && units.is_multiple_of(1024) {
                units /= 1024;
                idx += 1;
            }
            let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][idx];
            return write!(f, "{sign}{units}{suffix}");
        }
        // Decimal: the largest power of 1000 that divides exactly.
        let suffixes = ["n", "u", "m", "", "k", "M", "G", "T", "P", "E"];
        let mut value = a;
        let mut idx = 0;
        while idx + 1 < suffixes.len() && value.is_multiple_of(1000) {
            value /= 1000;
            idx += 1;
        }
        if self.format == Format::DecimalExponent {
            let exp = (idx as i32 - 3) * 3;
            return if exp == 0 {
                write!(f, "{sign}{value}")
            } else {
                write!(f, "{sign}{value}e{exp}")
            };
        }
        write!(f, "{sign}{value}{}", suffixes[idx])
    }
}

/// Deserializes a quantity given as a string or a bare JSON number (`value: 110`).
pub fn lenient<'de, D: Deserializer<'de>>(d: D) -> Result<Quantity, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either {
        S(String),
        I(i64),
        F(f64),
    }
    Ok(Quantity(match Either::deserialize(d)? {
        Either::S(s) => s,
        Either::I(i) => i.to_string(),
        Either::F(x) => x.to_string(),
    }))
}

/// Like [`lenient`], for optional quantities.
pub fn lenient_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Quantity>, D::Error> {
    #[derive(Deserialize)]
    struct W(#[serde(deserialize_with = "lenient")] Quantity);
    Ok(Option::<W>::deserialize(d)?.map(|w| w.0))
}

/// What a quantity suffix multiplies by: a power of ten, a power of two, and
/// the format it implies.
struct SuffixScale {
    exp10: i32,
    exp2: u32,
    format: Format,
}

/// The scale of a Kubernetes quantity suffix (`m`, `Gi`, `e3`, ...).
fn suffix_scale(suffix: &str) -> Result<SuffixScale, &'static str> {
    let decimal = |exp10| SuffixScale {
        exp10,
        exp2: 0,
        format: Format::DecimalSI,
    };
    Ok(match suffix {
        "" => decimal(0),
        "n" => decimal(-9),
        "u" => decimal(-6),
        "m" => decimal(-3),
        "k" => decimal(3),
        "M" => decimal(6),
        "G" => decimal(9),
        "T" => decimal(12),
        "P" => decimal(15),
        "E" => decimal(18),
        "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" => SuffixScale {
            exp10: 0,
            exp2: 10 * (1 + "KMGTPE".find(&suffix[..1]).unwrap_or(0) as u32),
            format: Format::BinarySI,
        },
        s if s.starts_with(['e', 'E']) => {
            let e: i32 = s[1..].parse().map_err(|_| "bad exponent")?;
            if !(-30..=30).contains(&e) {
                return Err("exponent out of range");
            }
            SuffixScale {
                exp10: e,
                exp2: 0,
                format: Format::DecimalExponent,
            }
        }
        _ => return Err("unknown suffix"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Amount {
        Amount::parse(s).unwrap()
    }

    #[test]
    fn parses_every_suffix() {
        assert_eq!(p("1").nanos, NANO);
        assert_eq!(p("1000m"), p("1"));
        assert_eq!(p("500m").nanos, NANO / 2);
        assert_eq!(p("1.5").nanos, 3 * NANO / 2);
        assert_eq!(p("1Ki").nanos, 1024 * NANO);
        assert_eq!(p("1Gi").nanos, (1i128 << 30) * NANO);
        assert_eq!(p("2k").nanos, 2000 * NANO);
        assert_eq!(p("1e3"), p("1k"));
        assert_eq!(p("3876543211n").nanos, 3876543211);
        assert_eq!(p("-1").nanos, -NANO);
        assert_eq!(p("0.1n").nanos, 1, "sub-nano rounds up");
        assert_eq!(p("1Ei").nanos, (1i128 << 60) * NANO);
    }

    #[test]
    fn rejects_garbage() {
        for bad in ["", "abc", "1.2.3", "1Qi", "1e", "--1", ".", "1e99"] {
            assert!(Amount::parse(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn a_mantissa_near_the_limit_is_rounded_without_overflow() {
        // 27 digits (2^87 - 1) times 2^40: adding the divisor before
        // dividing overflowed i128 (a panic in debug, a sign flip in release).
        let a = Amount::parse("0.154742504910672534362390527Ti").unwrap();
        assert!(a.nanos > 0, "{a:?}");
        let exact = (((1i128 << 87) - 1) << 40) / 10i128.pow(18);
        assert!(a.nanos == exact || a.nanos == exact + 1, "{a:?}");
        assert_eq!(Amount::parse(&a.to_string()).unwrap().nanos, a.nanos);
    }

    #[test]
    fn canonical_strings_match_go() {
        for (input, want) in [
            ("1000m", "1"),
            ("1", "1"),
            ("500m", "500m"),
            ("1024Mi", "1Gi"),
            ("1536Mi", "1536Mi"),
            ("6765433Ki", "6765433Ki"),
            ("100Mi", "100Mi"),
            ("110", "110"),
            ("0", "0"),
            ("1500", "1500"),
            ("2000", "2k"),
            ("3876543211n", "3876543211n"),
            ("1e3", "1e3"),
            ("512", "512"),
        ] {
            assert_eq!(p(input).to_string(), want, "{input}");
        }
    }

    #[test]
    fn arithmetic_keeps_format_and_never_goes_negative() {
        let avail = p("4Gi").saturating_sub(p("1Gi"));
        assert_eq!(avail.to_string(), "3Gi");
        assert_eq!(p("1").saturating_sub(p("2")).nanos, 0);
        assert_eq!(p("1500m").units_ceil(), 2);
        assert_eq!(p("1500m").millis_ceil(), 1500);
    }

    #[test]
    fn lenient_accepts_numbers() {
        #[derive(Deserialize)]
        struct T {
            #[serde(deserialize_with = "lenient")]
            v: Quantity,
        }
        let t: T = serde_json::from_str(r#"{"v":110}"#).unwrap();
        assert_eq!(t.v.0, "110");
        let t: T = serde_json::from_str(r#"{"v":"1Gi"}"#).unwrap();
        assert_eq!(t.v.0, "1Gi");
    }
}
