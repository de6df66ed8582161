//! Numbers as text with a fixed number of decimals, written from the float's exact binary value
//! with integer arithmetic. It writes exactly what `format!("{:.N}", v)` writes (the same digits,
//! ties to even on the exact value, the sign of −0.0, `NaN`, `inf`), without the standard
//! library's general float printer (Grisu with a Dragon4 fallback and their tables: about 13 KB of
//! WebAssembly that the page's first load would otherwise carry for a handful of labels).

use std::fmt;

/// `v` with `decimals` digits after the point (at most [`Fixed::MAX_DECIMALS`]).
#[derive(Clone, Copy, Debug)]
pub struct Fixed(pub f64, pub u8);

impl Fixed {
    /// More would overflow the scaled fraction (`2^53 · 10^d` must fit 128 bits with room).
    pub const MAX_DECIMALS: u8 = 6;
}

/// `m · 2^e` with `m < 2^53`: the float's exact value (`m = 0` for ±0).
fn parts(v: f64) -> (u64, i32) {
    let bits = v.to_bits();
    let exp = ((bits >> 52) & 0x7ff) as i32;
    let frac = bits & ((1 << 52) - 1);
    if exp == 0 {
        (frac, -1074)
    } else {
        (frac | (1 << 52), exp - 1075)
    }
}

/// The decimal digits of `m · 2^e` (an integer), exactly: base-10⁹ limbs, doubled `e` times in
/// steps of up to 30 bits.
fn integer_digits(m: u64, e: u32) -> String {
    const BASE: u64 = 1_000_000_000;
    let mut limbs = vec![m % BASE, m / BASE % BASE, m / BASE / BASE];
    let mut left = e;
    while left > 0 {
        let s = left.min(30);
        left -= s;
        let mut carry = 0u64;
        for l in &mut limbs {
            let x = (*l << s) + carry;
            *l = x % BASE;
            carry = x / BASE;
        }
        while carry > 0 {
            limbs.push(carry % BASE);
            carry /= BASE;
        }
    }
    while limbs.len() > 1 && limbs.last() == Some(&0) {
        limbs.pop();
    }
    let mut out = String::new();
    for (i, l) in limbs.iter().rev().enumerate() {
        if i == 0 {
            out.push_str(&l.to_string());
        } else {
            let t = l.to_string();
            out.push_str(&"0".repeat(9 - t.len()));
            out.push_str(&t);
        }
    }
    out
}

/// `round(|v| · 10^d)`, ties to even, for `|v| < 2^53` (a fraction part to round).
fn scaled_fraction(m: u64, k: u32, d: u8) -> u128 {
    let num = u128::from(m) * 10u128.pow(u32::from(d));
    if k >= 127 {
        // Below 2^-127 · 10^6 · 2^53: rounds to 0 and cannot be a tie.
        return 0;
    }
    let q = num >> k;
    let rem = num & ((1u128 << k) - 1);
    let half = 1u128 << (k - 1);
    if rem > half || (rem == half && q & 1 == 1) {
        q + 1
    } else {
        q
    }
}

impl fmt::Display for Fixed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Fixed(v, d) = *self;
        let d = d.min(Self::MAX_DECIMALS);
        if v.is_nan() {
            return f.write_str("NaN");
        }
        if v.is_sign_negative() {
            f.write_str("-")?;
        }
        if v.is_infinite() {
            return f.write_str("inf");
        }
        let (m, e) = parts(v);
        let unit = 10u128.pow(u32::from(d));
        let (int, frac) = if e >= 0 {
            // An integer: its decimals are zeros.
            (integer_digits(m, e.unsigned_abs()), 0)
        } else {
            let n = scaled_fraction(m, e.unsigned_abs(), d);
            ((n / unit).to_string(), n % unit)
        };
        f.write_str(&int)?;
        if d > 0 {
            let frac = frac.to_string();
            f.write_str(".")?;
            f.write_str(&"0".repeat(usize::from(d) - frac.len()))?;
            f.write_str(&frac)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn std_fixed(v: f64, d: u8) -> String {
        format!("{:.*}", usize::from(d), v)
    }

    #[test]
    fn matches_the_standard_printer_on_chosen_values() {
        let values = [
            0.0,
            -0.0,
            0.5,
            1.5,
            2.5,
            -2.5,
            0.125,
            0.375,
            0.05,
            0.15,
            0.25,
            0.35,
            1.005,
            9.995,
            99.95,
            999.5,
            1023.999,
            1e-9,
            -1e-9,
            5e-324,
            1e15,
            123_456_789.987_654_33,
            2f64.powi(60),
            f64::MAX,
            f64::MIN_POSITIVE,
            97.5,
            1.23,
            0.045,
        ];
        for v in values {
            for d in 0..=Fixed::MAX_DECIMALS {
                assert_eq!(
                    Fixed(v, d).to_string(),
                    std_fixed(v, d),
                    "{v} to {d} decimals"
                );
            }
        }
        assert_eq!(Fixed(f64::NAN, 2).to_string(), "NaN");
        assert_eq!(Fixed(f64::INFINITY, 1).to_string(), "inf");
        assert_eq!(Fixed(f64::NEG_INFINITY, 1).to_string(), "-inf");
    }

    proptest! {
        #[test]
        fn matches_the_standard_printer(bits in any::<u64>(), d in 0u8..=Fixed::MAX_DECIMALS) {
            let v = f64::from_bits(bits);
            prop_assume!(v.is_finite());
            prop_assert_eq!(Fixed(v, d).to_string(), std_fixed(v, d));
        }

        #[test]
        fn matches_on_labels_of_byte_sizes(b in any::<u64>(), shift in 0u32..60, d in 0u8..=3) {
            let v = b as f64 / 2f64.powi(shift as i32);
            prop_assert_eq!(Fixed(v, d).to_string(), std_fixed(v, d));
        }
    }
}
