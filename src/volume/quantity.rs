//! Kubernetes resource quantities (`1Gi`, `500M`, `1.5Gi`, `1e3`, `100m`) as whole bytes.
//!
//! k8s-openapi's `Quantity` is only the string; the kubelet sends `Quantity.Value()` — the value
//! rounded up to an integer — as NodeExpandVolume's `required_bytes`, so that is what
//! [`parse_bytes`] returns.

use crate::error::{Error, Result};

/// The value of `text` rounded up to a whole number, or an error naming the text.
pub fn parse_bytes(text: &str) -> Result<i64> {
    let bad = |why: &str| Error::invalid(format!("quantity {text:?} is not valid: {why}"));
    let (negative, rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let number_len = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(number_len);
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    if int_part.is_empty() && frac_part.is_empty() {
        return Err(bad("expected a number"));
    }
    if frac_part.contains('.') {
        return Err(bad("more than one decimal point"));
    }
    // value = digits / 10^frac_len * scale, computed exactly as a fraction num / den.
    let digits = format!("{int_part}{frac_part}");
    let digits = digits.trim_start_matches('0');
    if digits.len() > 30 {
        return Err(bad("too many digits"));
    }
    let mantissa: u128 = if digits.is_empty() {
        0
    } else {
        digits.parse().map_err(|_| bad("expected a number"))?
    };
    let (mut num, mut den) = (mantissa, 10u128.pow(frac_part.len() as u32));
    match suffix_scale(suffix).ok_or_else(|| bad("unknown suffix"))? {
        Scale::Binary(shift) => {
            num = num
                .checked_mul(1u128 << shift)
                .ok_or_else(|| bad("too large"))?
        }
        Scale::Decimal(exp) if exp >= 0 => {
            let factor = 10u128
                .checked_pow(exp as u32)
                .ok_or_else(|| bad("too large"))?;
            num = num.checked_mul(factor).ok_or_else(|| bad("too large"))?;
        }
        Scale::Decimal(exp) => {
            let factor = 10u128
                .checked_pow(exp.unsigned_abs())
                .ok_or_else(|| bad("too small"))?;
            den = den.checked_mul(factor).ok_or_else(|| bad("too small"))?;
        }
    }
    let whole = num.div_ceil(den);
    let value = i64::try_from(whole).map_err(|_| bad("larger than 2^63-1"))?;
    Ok(if negative { -value } else { value })
}

enum Scale {
    /// Multiply by 2^n.
    Binary(u32),
    /// Multiply by 10^n.
    Decimal(i32),
}

fn suffix_scale(suffix: &str) -> Option<Scale> {
    Some(match suffix {
        "Ki" => Scale::Binary(10),
        "Mi" => Scale::Binary(20),
        "Gi" => Scale::Binary(30),
        "Ti" => Scale::Binary(40),
        "Pi" => Scale::Binary(50),
        "Ei" => Scale::Binary(60),
        "n" => Scale::Decimal(-9),
        "u" => Scale::Decimal(-6),
        "m" => Scale::Decimal(-3),
        "" => Scale::Decimal(0),
        "k" => Scale::Decimal(3),
        "M" => Scale::Decimal(6),
        "G" => Scale::Decimal(9),
        "T" => Scale::Decimal(12),
        "P" => Scale::Decimal(15),
        "E" => Scale::Decimal(18),
        // Decimal exponent: 1e3, 1E-3, 5e+2.
        s if s.starts_with(['e', 'E']) && s.len() > 1 => {
            let exp = &s[1..];
            let digits = exp.strip_prefix(['+', '-']).unwrap_or(exp);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.len() > 3
            {
                return None;
            }
            Scale::Decimal(exp.parse().ok()?)
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_and_decimal_suffixes() {
        assert_eq!(parse_bytes("1Gi").unwrap(), 1 << 30);
        assert_eq!(parse_bytes("500M").unwrap(), 500_000_000);
        assert_eq!(parse_bytes("1.5Gi").unwrap(), 3 << 29);
        assert_eq!(parse_bytes("2Ki").unwrap(), 2048);
        assert_eq!(parse_bytes("1k").unwrap(), 1000);
        assert_eq!(
            parse_bytes("8Ei").unwrap_err().message(),
            "quantity \"8Ei\" is not valid: larger than 2^63-1"
        );
    }

    #[test]
    fn plain_numbers_and_exponents() {
        assert_eq!(parse_bytes("1073741824").unwrap(), 1 << 30);
        assert_eq!(parse_bytes("0").unwrap(), 0);
        assert_eq!(parse_bytes("1e3").unwrap(), 1000);
        assert_eq!(parse_bytes("1E+2").unwrap(), 100);
        assert_eq!(parse_bytes(".5k").unwrap(), 500);
        assert_eq!(parse_bytes("-1Ki").unwrap(), -1024);
    }

    #[test]
    fn fractions_round_up_like_quantity_value() {
        assert_eq!(parse_bytes("100m").unwrap(), 1);
        assert_eq!(parse_bytes("1.1").unwrap(), 2);
        assert_eq!(parse_bytes("1500m").unwrap(), 2);
        assert_eq!(parse_bytes("0.5Ki").unwrap(), 512);
    }

    #[test]
    fn malformed_quantities_are_rejected_naming_the_input() {
        for bad in [
            "", "Gi", "1GB", "1.2.3", "1 Gi", "abc", "1e", "1e1000", "--1",
        ] {
            let err = parse_bytes(bad).unwrap_err();
            assert!(
                err.message().contains(&format!("{bad:?}")),
                "{bad}: {}",
                err.message()
            );
        }
    }
}
