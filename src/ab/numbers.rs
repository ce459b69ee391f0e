//! Numbers as the comparison's text prints them (terminal, Markdown, the
//! changelog, the gate's reasons): percentages whose precision follows
//! their size, intervals, p-values, figures to about 3 significant digits.
//! A leaf: it knows no type of the comparison.

/// A delta (fraction) as a signed percentage, one decimal as a rule: `+4.2%`.
///
/// Precision follows size so no figure reads as zero or as false precision:
/// two decimals below 0.1% (`+0.04%`), none from 100% up (`+412%`).
pub fn pct(delta: f64) -> String {
    if !delta.is_finite() {
        return "-".into();
    }
    let v = delta * 100.0;
    match v.abs() {
        a if a >= 100.0 => format!("{v:+.0}%"),
        a if a > 0.0 && a < 0.1 => format!("{v:+.2}%"),
        _ => format!("{v:+.1}%"),
    }
}

/// A fraction as an unsigned percentage: `5%`, `2.5%`.
/// (`0.04%` below 0.1%, as [`pct`]).
pub fn pct_unsigned(x: f64) -> String {
    let v = x * 100.0;
    if (v - v.round()).abs() < 1e-9 || v.abs() >= 100.0 {
        format!("{v:.0}%")
    } else if v.abs() < 0.1 {
        format!("{v:.2}%")
    } else {
        format!("{v:.1}%")
    }
}

/// A delta interval: `[-1.2%, +2.9%]`, or `[no CI]`.
pub fn ci_text(ci: Option<(f64, f64)>) -> String {
    match ci {
        Some((lo, hi)) => format!("[{}, {}]", pct(lo), pct(hi)),
        None => "[no CI]".into(),
    }
}

/// A p-value: two decimals from 0.1 up (`0.15`, `1.00`), two significant
/// digits below (`0.018`, `0.00030`), `<0.0001` below that.
pub fn p_text(p: f64) -> String {
    if p < 1e-4 {
        "<0.0001".into()
    } else if p >= 0.1 {
        format!("{p:.2}")
    } else {
        let decimals = (1.0 - p.log10().floor()) as usize;
        format!("{p:.decimals$}")
    }
}

/// A figure in its unit with about 3 significant digits (as the run table).
pub fn num(v: f64) -> String {
    if !v.is_finite() {
        "-".into()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// A non-negative fraction as a percentage with one decimal: `4.1%`.
pub fn pct_abs(x: f64) -> String {
    if x.is_finite() { format!("{:.1}%", x * 100.0) } else { "-".into() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_keep_small_figures_visible_and_big_ones_plain() {
        assert_eq!(pct(0.042), "+4.2%");
        assert_eq!(pct(-0.0004), "-0.04%");
        assert_eq!(pct(0.0), "+0.0%");
        assert_eq!(pct(4.123), "+412%");
        assert_eq!(pct(f64::NAN), "-");
        assert_eq!(pct_unsigned(0.05), "5%");
        assert_eq!(pct_unsigned(0.025), "2.5%");
        assert_eq!(pct_unsigned(0.0004), "0.04%");
        assert_eq!(pct_unsigned(12.3456), "1235%");
    }

    #[test]
    fn formats() {
        assert_eq!(pct(0.0583), "+5.8%");
        assert_eq!(pct(-0.129), "-12.9%");
        assert_eq!(pct_unsigned(0.05), "5%");
        assert_eq!(pct_unsigned(0.025), "2.5%");
        assert_eq!(p_text(0.01796), "0.018");
        assert_eq!(p_text(0.000298), "0.00030");
        assert_eq!(p_text(0.146), "0.15");
        assert_eq!(p_text(0.00001), "<0.0001");
        assert_eq!(num(1460.4), "1460");
        assert_eq!(num(9.876), "9.88");
    }
}
