//! Kubernetes resource quantities (`81559Mi`, `1.5`, `500m`, `1e3`) with the
//! API server's parsing, rounding and limits, as DRA device capacities and
//! the CEL `quantity()` library use them.
//!
//! A quantity is held exactly as a count of nano-units in an `i128`: the
//! Kubernetes parser rounds every value away from zero to a multiple of
//! 10⁻⁹ and caps its magnitude at 2⁶³−1, so every quantity fits.

use std::cmp::Ordering;
use std::fmt;

/// Nano-units per unit.
const NANOS: i128 = 1_000_000_000;
/// The largest magnitude a quantity may have: 2⁶³−1 units, in nano-units.
const MAX_NANOS: i128 = (i64::MAX as i128) * NANOS;

/// A parsed Kubernetes quantity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Quantity {
    nanos: i128,
}

/// Why a string is not a quantity (the API server's wording).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// Empty or malformed.
    #[error(
        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )]
    Format,
    /// A suffix that is neither SI, binary SI nor an exponent.
    #[error("unable to parse quantity's suffix")]
    Suffix,
}

impl Quantity {
    /// Parses a quantity as `resource.ParseQuantity` does.
    pub fn parse(text: &str) -> Result<Quantity, QuantityError> {
        if text.is_empty() {
            return Err(QuantityError::Format);
        }
        let parts = split(text)?;
        let (base, exponent) = interpret_suffix(parts.suffix).ok_or(QuantityError::Suffix)?;
        let nanos = to_nanos(parts.whole, parts.fraction, base, exponent);
        Ok(Quantity {
            nanos: if parts.negative { -nanos } else { nanos },
        })
    }

    /// A whole number of units.
    pub fn from_int(units: i64) -> Quantity {
        Quantity {
            nanos: i128::from(units) * NANOS,
        }
    }

    /// −1, 0 or 1.
    pub fn sign(&self) -> i64 {
        match self.nanos.cmp(&0) {
            Ordering::Less => -1,
            Ordering::Equal => 0,
            Ordering::Greater => 1,
        }
    }

    /// Whether the value is whole and fits an `int64`.
    pub fn is_integer(&self) -> bool {
        self.as_integer().is_some()
    }

    /// The value as an `int64`, when whole and in range.
    pub fn as_integer(&self) -> Option<i64> {
        if self.nanos % NANOS != 0 {
            return None;
        }
        i64::try_from(self.nanos / NANOS).ok()
    }

    /// The nearest `f64`.
    pub fn as_approximate_float(&self) -> f64 {
        self.nanos as f64 / NANOS as f64
    }

    /// The exact sum (like Kubernetes, not capped: only parsing caps).
    pub fn add(&self, other: &Quantity) -> Quantity {
        Quantity {
            nanos: self.nanos.saturating_add(other.nanos),
        }
    }

    /// The exact difference (not capped).
    pub fn sub(&self, other: &Quantity) -> Quantity {
        Quantity {
            nanos: self.nanos.saturating_sub(other.nanos),
        }
    }

    /// −1, 0 or 1 as `self` is less than, equal to or greater than `other`.
    pub fn compare(&self, other: &Quantity) -> i64 {
        match self.cmp(other) {
            Ordering::Less => -1,
            Ordering::Equal => 0,
            Ordering::Greater => 1,
        }
    }
}

impl fmt::Display for Quantity {
    /// The exact decimal value in units, e.g. `85520809984` or `0.5`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.nanos < 0 { "-" } else { "" };
        let abs = self.nanos.unsigned_abs();
        let whole = abs / NANOS as u128;
        let frac = abs % NANOS as u128;
        if frac == 0 {
            write!(f, "{sign}{whole}")
        } else {
            let digits = format!("{frac:09}");
            write!(f, "{sign}{whole}.{}", digits.trim_end_matches('0'))
        }
    }
}

/// The pieces of a quantity string.
struct Parts<'a> {
    negative: bool,
    /// Integer digits, leading zeros stripped (may be empty).
    whole: &'a str,
    /// Fraction digits (may be empty).
    fraction: &'a str,
    suffix: &'a str,
}

fn digits_end(bytes: &[u8], from: usize) -> usize {
    bytes[from..]
        .iter()
        .position(|b| !b.is_ascii_digit())
        .map_or(bytes.len(), |i| from + i)
}

/// Splits `[sign]digits[.digits]suffix` the way the Kubernetes parser does:
/// a sign alone or zeros alone are zero, `1.` is allowed, and the suffix is
/// letters from `eEinumkKMGTP` optionally followed by a signed integer.
fn split(text: &str) -> Result<Parts<'_>, QuantityError> {
    let bytes = text.as_bytes();
    let mut pos = 0;
    let negative = match bytes.first() {
        Some(b'-') => {
            pos = 1;
            true
        }
        Some(b'+') => {
            pos = 1;
            false
        }
        _ => false,
    };
    while pos < bytes.len() && bytes[pos] == b'0' {
        pos += 1;
    }
    let whole_end = digits_end(bytes, pos);
    let whole = &text[pos..whole_end];
    pos = whole_end;
    let mut fraction = "";
    if pos < bytes.len() && bytes[pos] == b'.' {
        let end = digits_end(bytes, pos + 1);
        fraction = &text[pos + 1..end];
        pos = end;
    }
    let suffix_start = pos;
    while pos < bytes.len() && b"eEinumkKMGTP".contains(&bytes[pos]) {
        pos += 1;
    }
    if pos < bytes.len() && matches!(bytes[pos], b'-' | b'+') {
        pos += 1;
    }
    pos = digits_end(bytes, pos);
    if pos < bytes.len() {
        return Err(QuantityError::Format);
    }
    Ok(Parts {
        negative,
        whole,
        fraction,
        suffix: &text[suffix_start..],
    })
}

/// `(base, exponent)` of a suffix: decimal SI, binary SI or `e<int>`.
fn interpret_suffix(suffix: &str) -> Option<(u32, i32)> {
    let decimal = |e| Some((10, e));
    match suffix {
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
        "Ki" => Some((2, 10)),
        "Mi" => Some((2, 20)),
        "Gi" => Some((2, 30)),
        "Ti" => Some((2, 40)),
        "Pi" => Some((2, 50)),
        "Ei" => Some((2, 60)),
        s if s.len() > 1 && (s.starts_with('e') || s.starts_with('E')) => {
            s[1..].parse::<i32>().ok().map(|e| (10, e))
        }
        _ => None,
    }
}

/// The magnitude in nano-units: exact, rounded up to a whole nano-unit,
/// capped at 2⁶³−1 units.
fn to_nanos(whole: &str, fraction: &str, base: u32, exponent: i32) -> i128 {
    // digits × 10^scale is the number before the suffix.
    let digits: String = [whole, fraction].concat();
    let digits = digits.trim_start_matches('0');
    if digits.is_empty() {
        return 0;
    }
    let scale = -(fraction.len() as i64);
    let (mut scale10, mut twos) = (scale + 9, 0u32);
    if base == 10 {
        scale10 += i64::from(exponent);
    } else {
        twos = exponent as u32;
    }
    // Anything with more integer digits than the cap has is capped.
    let integer_digits = digits.len() as i64 + scale10;
    if integer_digits > 40 {
        return MAX_NANOS;
    }
    if scale10 >= 0 {
        let mut n: i128 = match digits.parse() {
            Ok(n) => n,
            Err(_) => return MAX_NANOS,
        };
        for _ in 0..scale10 {
            n = match n.checked_mul(10) {
                Some(n) => n,
                None => return MAX_NANOS,
            };
        }
        n.checked_mul(1i128 << twos)
            .map_or(MAX_NANOS, |n| n.min(MAX_NANOS))
    } else {
        // Split off the digits below a nano-unit; any non-zero one rounds up.
        let drop = (-scale10) as usize;
        let (kept, dropped) = if drop >= digits.len() {
            ("", digits)
        } else {
            digits.split_at(digits.len() - drop)
        };
        let mut n: i128 = if kept.is_empty() {
            0
        } else {
            match kept.parse() {
                Ok(n) => n,
                Err(_) => return MAX_NANOS,
            }
        };
        let remainder = dropped.bytes().any(|b| b != b'0');
        if twos > 0 {
            // Binary suffixes multiply before rounding: redo exactly with the
            // dropped digits as a fraction of 10^drop.
            return binary_with_fraction(kept, dropped, twos);
        }
        if remainder {
            n += 1;
        }
        n.min(MAX_NANOS)
    }
}

/// `(kept + dropped/10^len(dropped)) × 2^twos` in nano-units, rounded up.
fn binary_with_fraction(kept: &str, dropped: &str, twos: u32) -> i128 {
    let kept: i128 = if kept.is_empty() {
        0
    } else {
        kept.parse().unwrap_or(i128::MAX)
    };
    let Some(whole) = kept.checked_mul(1i128 << twos) else {
        return MAX_NANOS;
    };
    // Only the first 30 dropped digits can matter below 2^60 × 10^-30 < 1e-12.
    let significant = &dropped[..dropped.len().min(30)];
    let rest_nonzero = dropped[significant.len()..].bytes().any(|b| b != b'0');
    let numerator: i128 = significant.parse().unwrap_or(0);
    let denominator = 10i128.pow(significant.len() as u32);
    let Some(scaled) = numerator.checked_mul(1i128 << twos) else {
        return MAX_NANOS;
    };
    let extra = scaled / denominator;
    let exact = scaled % denominator == 0 && !rest_nonzero;
    let total = whole
        .saturating_add(extra)
        .saturating_add(if exact { 0 } else { 1 });
    total.min(MAX_NANOS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn parses_the_kubernetes_grammar() {
        for (text, value) in [
            ("1", "1"),
            ("1E", "1000000000000000000"),
            ("1e3", "1000"),
            ("1E3", "1000"),
            ("1e+3", "1000"),
            ("1e-3", "0.001"),
            (".5", "0.5"),
            ("+5", "5"),
            ("5.", "5"),
            ("0.1n", "0.000000001"),
            ("-0.1n", "-0.000000001"),
            ("1.5Gi", "1610612736"),
            ("81559Mi", "85520809984"),
            ("256E", "256000000000000000000"),
            ("500m", "0.5"),
            ("100u", "0.0001"),
            ("007", "7"),
        ] {
            if text == "256E" {
                // Above 2^63-1: capped.
                assert_eq!(q(text).to_string(), i64::MAX.to_string());
                continue;
            }
            assert_eq!(q(text).to_string(), value, "{text}");
        }
    }

    #[test]
    fn bare_suffixes_signs_and_zeros_are_zero_as_in_kubernetes() {
        for text in ["Mi", "k", "-", "+", "0", "000", ".", "0.0"] {
            assert_eq!(q(text), Quantity::from_int(0), "{text}");
        }
    }

    #[test]
    fn malformed_quantities_are_rejected() {
        for text in [
            "", "1e", "1.5e2k", "2e3Mi", "1K", "1ki", "0x10", "1_000", " 1", "1 ", "1..2", "--1",
            "1Mi2",
        ] {
            assert!(Quantity::parse(text).is_err(), "{text:?} parsed");
        }
    }

    #[test]
    fn values_round_away_from_zero_to_nano_units() {
        assert_eq!(q("0.0000000004"), q("0.000000001"));
        assert_eq!(q("-0.0000000004"), q("-0.000000001"));
        assert_eq!(q("1e-12"), q("1n"));
        assert_eq!(q("0.5Ki"), q("512"));
        assert_eq!(q("0.0000000001Ki"), q("0.000000103"));
    }

    #[test]
    fn magnitudes_saturate_at_the_int64_limit() {
        let max = Quantity::from_int(i64::MAX);
        assert_eq!(q("8Ei"), max);
        assert_eq!(q("10Ei"), max);
        assert_eq!(q("1000E"), max);
        assert_eq!(q("-10Ei"), Quantity::from_int(-i64::MAX));
        assert!(q("7Ei") < max);
        assert_eq!(q("99999999999999999999999999999999999999999999"), max);
    }

    #[test]
    fn arithmetic_and_conversions() {
        assert_eq!(q("1Gi").compare(&q("1024Mi")), 0);
        assert_eq!(q("1Gi").compare(&q("1G")), 1);
        assert_eq!(q("1.5").as_integer(), None);
        assert_eq!(q("2k").as_integer(), Some(2000));
        // Sums are exact: beyond int64 they are no longer integers.
        assert!(!q("8Ei").add(&q("1Ei")).is_integer());
        assert!(q("8Ei").add(&q("1Ei")) > q("8Ei"));
        assert_eq!(q("1").add(&q("500m")).to_string(), "1.5");
        assert_eq!(q("1").sub(&Quantity::from_int(3)).sign(), -1);
        assert_eq!(q("500m").as_approximate_float(), 0.5);
    }
}
