//! Kubernetes resource quantities (`500m`, `0.5`, `2`, `128Mi`, `1G`, `1e3`), parsed exactly
//! (no floating point) into milli-CPU or bytes, rounding up like Kubernetes does.

/// Why a quantity string was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum QuantityError {
    #[error("is not a valid quantity (examples: 500m, 0.5, 2, 128Mi, 1G)")]
    Malformed,
    #[error("must be positive")]
    NotPositive,
    #[error("is too large")]
    TooLarge,
}

/// CPU in millicores: `"500m"` -> 500, `"0.5"` -> 500, `"2"` -> 2000, `"100u"` -> 1 (rounded up).
pub(crate) fn parse_cpu_milli(text: &str) -> Result<i64, QuantityError> {
    parse(text)?.positive_ceil(3)
}

/// Bytes: `"128Mi"` -> 134217728, `"1G"` -> 10^9, `"1e3"` -> 1000, `"0.5"` -> 1 (rounded up).
pub(crate) fn parse_bytes(text: &str) -> Result<i64, QuantityError> {
    parse(text)?.positive_ceil(0)
}

/// Canonical CPU text: whole cores as `"2"`, otherwise `"1500m"`.
pub(crate) fn format_cpu_milli(milli: i64) -> String {
    if milli % 1000 == 0 {
        (milli / 1000).to_string()
    } else {
        format!("{milli}m")
    }
}

/// Canonical byte text with the largest exact binary suffix: `"128Mi"`, `"1Gi"`, `"1000"`.
pub(crate) fn format_bytes(bytes: i64) -> String {
    for &(suffix, shift) in BINARY_SUFFIXES.iter().rev() {
        let unit = 1i64 << shift;
        if bytes != 0 && bytes % unit == 0 {
            return format!("{}{suffix}", bytes / unit);
        }
    }
    bytes.to_string()
}

/// More significant digits than this cannot be held exactly in a `u128`.
const MAX_DIGITS: usize = 38;

/// `mantissa * 10^exp10 * 2^pow2`, negated when `negative`.
#[derive(Debug, PartialEq, Eq)]
struct Parsed {
    negative: bool,
    mantissa: u128,
    exp10: i64,
    pow2: u32,
}

fn parse(text: &str) -> Result<Parsed, QuantityError> {
    let (negative, unsigned) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let number_len = unsigned
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(unsigned.len());
    let (number, suffix) = unsigned.split_at(number_len);
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    if frac_part.contains('.') || (int_part.is_empty() && frac_part.is_empty()) {
        return Err(QuantityError::Malformed);
    }
    let (suffix_exp10, pow2) = parse_suffix(suffix)?;

    let frac = frac_part.trim_end_matches('0');
    let mut digits: String = int_part.chars().chain(frac.chars()).skip_while(|&c| c == '0').collect();
    let mut exp10 = -(frac.len() as i64);
    while digits.ends_with('0') {
        digits.pop();
        exp10 += 1;
    }
    if digits.len() > MAX_DIGITS {
        return Err(QuantityError::TooLarge);
    }
    let mantissa = if digits.is_empty() {
        0
    } else {
        digits.parse::<u128>().map_err(|_| QuantityError::Malformed)?
    };
    Ok(Parsed {
        negative,
        mantissa,
        exp10: exp10 + suffix_exp10,
        pow2,
    })
}

/// Decimal (SI) suffixes and the power of ten each stands for.
const DECIMAL_SUFFIXES: [(&str, i64); 9] = [
    ("n", -9),
    ("u", -6),
    ("m", -3),
    ("k", 3),
    ("M", 6),
    ("G", 9),
    ("T", 12),
    ("P", 15),
    ("E", 18),
];

/// Binary suffixes and the power of two each stands for, smallest first.
const BINARY_SUFFIXES: [(&str, u32); 6] = [("Ki", 10), ("Mi", 20), ("Gi", 30), ("Ti", 40), ("Pi", 50), ("Ei", 60)];

/// `(power of ten, power of two)` of a suffix.
fn parse_suffix(suffix: &str) -> Result<(i64, u32), QuantityError> {
    if suffix.is_empty() {
        return Ok((0, 0));
    }
    if let Some(&(_, exp10)) = DECIMAL_SUFFIXES.iter().find(|(s, _)| *s == suffix) {
        return Ok((exp10, 0));
    }
    if let Some(&(_, pow2)) = BINARY_SUFFIXES.iter().find(|(s, _)| *s == suffix) {
        return Ok((0, pow2));
    }
    Ok((parse_exponent(suffix)?, 0))
}

/// `e<signed int>` or `E<signed int>`.
fn parse_exponent(suffix: &str) -> Result<i64, QuantityError> {
    let rest = suffix.strip_prefix(['e', 'E']).ok_or(QuantityError::Malformed)?;
    let digits = rest.strip_prefix(['+', '-']).unwrap_or(rest);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(QuantityError::Malformed);
    }
    // Past nine digits the value is far outside i64 (or far below one unit) either way;
    // clamping keeps the later arithmetic small.
    if digits.len() > 9 {
        return Ok(if rest.starts_with('-') {
            -1_000_000_000
        } else {
            1_000_000_000
        });
    }
    rest.parse::<i64>().map_err(|_| QuantityError::Malformed)
}

impl Parsed {
    /// The value in units of `10^-unit_exp10`, rounded up; must be positive and fit an i64.
    fn positive_ceil(&self, unit_exp10: i64) -> Result<i64, QuantityError> {
        if self.negative || self.mantissa == 0 {
            return Err(QuantityError::NotPositive);
        }
        let scaled = self
            .mantissa
            .checked_mul(1u128 << self.pow2)
            .ok_or(QuantityError::TooLarge)?;
        let exp = self.exp10 + unit_exp10;
        let value = if exp >= 0 {
            let factor = u32::try_from(exp)
                .ok()
                .and_then(|e| 10u128.checked_pow(e))
                .ok_or(QuantityError::TooLarge)?;
            scaled.checked_mul(factor).ok_or(QuantityError::TooLarge)?
        } else {
            match u32::try_from(-exp).ok().and_then(|e| 10u128.checked_pow(e)) {
                Some(divisor) => scaled / divisor + u128::from(scaled % divisor != 0),
                // The divisor exceeds any u128, so the positive value is below one unit.
                None => 1,
            }
        };
        i64::try_from(value).map_err(|_| QuantityError::TooLarge)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Case<'a> = (&'a str, Result<i64, QuantityError>);

    /// Asserts what `parse` makes of each case's text.
    fn assert_parses(parse: fn(&str) -> Result<i64, QuantityError>, cases: &[Case<'_>]) {
        for (text, want) in cases {
            assert_eq!(parse(text), *want, "{text:?}");
        }
    }

    #[test]
    fn cpu_quantities() {
        let cases: &[Case<'_>] = &[
            ("500m", Ok(500)),
            ("0.5", Ok(500)),
            (".5", Ok(500)),
            ("2", Ok(2000)),
            ("2.", Ok(2000)),
            ("+1", Ok(1000)),
            ("1.5", Ok(1500)),
            ("0.0001", Ok(1)),
            ("100u", Ok(1)),
            ("250000000n", Ok(250)),
            ("1e3", Ok(1_000_000)),
            ("1E-3", Ok(1)),
            ("5e-1", Ok(500)),
            ("1k", Ok(1_000_000)),
            ("0.000000000000000000000000000000000000000000001", Ok(1)),
            ("1e-999999", Ok(1)),
            ("1e-99999999999999999999", Ok(1)),
            ("9223372036854775807", Err(QuantityError::TooLarge)),
            ("1E", Err(QuantityError::TooLarge)),
        ];
        assert_parses(parse_cpu_milli, cases);
    }

    #[test]
    fn memory_quantities() {
        let cases: &[Case<'_>] = &[
            ("128Mi", Ok(128 << 20)),
            ("1Gi", Ok(1 << 30)),
            ("1.5Gi", Ok(3 << 29)),
            ("1G", Ok(1_000_000_000)),
            ("1e3", Ok(1000)),
            ("129e6", Ok(129_000_000)),
            ("128974848", Ok(128_974_848)),
            ("1Ki", Ok(1024)),
            ("0.5", Ok(1)),
            ("1500m", Ok(2)),
            ("7Ei", Ok(7 << 60)),
            ("9223372036854775807", Ok(i64::MAX)),
        ];
        assert_parses(parse_bytes, cases);
    }

    /// Both read one syntax and want a positive value that fits an i64 in any unit: what fails
    /// that is refused alike as CPU and as memory.
    #[test]
    fn refused_alike_as_cpu_and_as_memory() {
        let cases: &[(QuantityError, &[&str])] = &[
            (
                QuantityError::Malformed,
                &[
                    "", ".", "m", "1.2.3", "1 m", "1mi", "1K", "1e", "1e+", "1e1.5", "--1", "0x10", "１", "128MB", "Gi",
                ],
            ),
            (
                QuantityError::NotPositive,
                &["0", "0m", "-1", "-0.5", "0e-99999999999999999999", "-128Mi", "0Gi"],
            ),
            (
                QuantityError::TooLarge,
                &[
                    "1e99999999999999999999",
                    "1e100",
                    "8Ei",
                    "9223372036854775808",
                    "9.3E",
                    "123456789012345678901234567890123456789",
                    "99999999999999999999999Ei",
                ],
            ),
        ];
        for (error, texts) in cases {
            for text in *texts {
                assert_eq!(parse_cpu_milli(text), Err(*error), "{text:?}");
                assert_eq!(parse_bytes(text), Err(*error), "{text:?}");
            }
        }
    }

    #[test]
    fn canonical_text_parses_back() {
        for milli in [1, 500, 1000, 1500, 2000, 123_456] {
            assert_eq!(parse_cpu_milli(&format_cpu_milli(milli)), Ok(milli));
        }
        assert_eq!(format_cpu_milli(2000), "2");
        assert_eq!(format_cpu_milli(250), "250m");
        for bytes in [1, 1000, 1024, 128 << 20, 3 << 29, 1 << 30, i64::MAX] {
            assert_eq!(parse_bytes(&format_bytes(bytes)), Ok(bytes));
        }
        assert_eq!(format_bytes(128 << 20), "128Mi");
        assert_eq!(format_bytes(3 << 29), "1536Mi");
        assert_eq!(format_bytes(1000), "1000");
    }
}
