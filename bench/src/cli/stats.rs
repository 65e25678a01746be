//! Medians, ranges and per-pair ratios of repeated runs.
//!
//! Owns: [`Summary`], the median of a figure over its runs with their min and max.
//!
//! Why per-pair ratios: runs of A and B alternate (A B A B …), so run *i* of A and run *i*
//! of B saw the same state of a shared, noisy machine; the ratio of each pair is taken first,
//! then the median of those ratios, which cancels a slow moment better than a ratio of
//! medians.

use serde::Serialize;

/// The median of a figure over its runs, with their min and max.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Summary {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub runs: usize,
}

impl Summary {
    /// The summary of `values` (non-finite values left out); `None` when none is left.
    pub fn of(values: &[f64]) -> Option<Summary> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Summary {
            median,
            min: v[0],
            max: v[n - 1],
            runs: n,
        })
    }

    /// The median of the ratios `a[i] / b[i]` of the runs both have.
    pub fn of_ratios(a: &[Option<f64>], b: &[Option<f64>]) -> Option<Summary> {
        let ratios: Vec<f64> = a
            .iter()
            .zip(b)
            .filter_map(|(a, b)| match (a, b) {
                (Some(a), Some(b)) if *b != 0.0 => Some(a / b),
                _ => None,
            })
            .collect();
        Summary::of(&ratios)
    }
}

/// A number for a table: thousands separated, `digits` decimals below 100.
pub fn num(x: f64) -> String {
    if !x.is_finite() {
        return "-".into();
    }
    let digits = if x.abs() >= 100.0 || x.fract() == 0.0 {
        0
    } else if x.abs() >= 10.0 {
        1
    } else {
        2
    };
    let text = format!("{x:.digits$}");
    let (int, frac) = text
        .split_once('.')
        .map_or((text.as_str(), ""), |(i, f)| (i, f));
    let (sign, int) = int.strip_prefix('-').map_or(("", int), |i| ("-", i));
    let mut grouped = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    if frac.is_empty() {
        format!("{sign}{grouped}")
    } else {
        format!("{sign}{grouped}.{frac}")
    }
}

/// A summary for a table: `median (min–max)`, or the median alone for one run.
pub fn cell(s: Option<Summary>) -> String {
    match s {
        None => "-".into(),
        Some(s) if s.runs == 1 || s.min == s.max => num(s.median),
        Some(s) => format!("{} ({}–{})", num(s.median), num(s.min), num(s.max)),
    }
}

/// A ratio for a table: `×median (min–max)`.
pub fn ratio_cell(s: Option<Summary>) -> String {
    match s {
        None => "-".into(),
        Some(s) if s.runs == 1 => format!("×{:.2}", s.median),
        Some(s) => format!("×{:.2} ({:.2}–{:.2})", s.median, s.min, s.max),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_even_and_odd_counts() {
        assert_eq!(Summary::of(&[3.0, 1.0, 2.0]).unwrap().median, 2.0);
        let s = Summary::of(&[4.0, 1.0, 2.0, 3.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.runs), (2.5, 1.0, 4.0, 4));
        assert!(Summary::of(&[f64::NAN]).is_none());
    }

    #[test]
    fn ratios_are_taken_per_pair_then_the_median() {
        // Ratio of medians would be 20/10 = 2; the pairs say 1, 1, 4.
        let a = [Some(10.0), Some(20.0), Some(40.0), None];
        let b = [Some(10.0), Some(20.0), Some(10.0), Some(5.0)];
        let s = Summary::of_ratios(&a, &b).unwrap();
        assert_eq!((s.median, s.min, s.max, s.runs), (1.0, 1.0, 4.0, 3));
    }

    #[test]
    fn numbers_are_grouped_by_thousands() {
        assert_eq!(num(1234567.4), "1,234,567");
        assert_eq!(num(12.34), "12.3");
        assert_eq!(num(-1234.0), "-1,234");
        assert_eq!(num(1.5), "1.50");
    }
}
