//! vLLM's quick all-reduce rule for one job, in words (the shim evaluates
//! the rule with vLLM's own class; see `crate::protocol::knobs::QuickReduce`).

use crate::protocol::knobs::QuickReduce;

/// `INT4 quick all-reduce fires for 16 MiB-2048 MiB: prefill chunks (8192
/// tokens) yes; decode at conc 1-256 (12 KiB-3 MiB) never`.
pub fn quick_reduce_line(q: &QuickReduce) -> String {
    let level = q.level.as_deref().unwrap_or("?");
    if let Some(e) = &q.error {
        return format!("{level}: cannot be evaluated here: {e}");
    }
    match q.fires.as_deref() {
        Some("never") => format!("{level} quick all-reduce never fires: {}", q.why.as_deref().unwrap_or("")),
        Some(_) => {
            let max = q.max_bytes.map_or("the ROCm library's limit".to_string(), bytes);
            let mut line = format!(
                "{level} quick all-reduce fires for {}-{max} (TP {}, {}, hidden {}: >= {} tokens)",
                bytes(q.min_bytes.unwrap_or(0)),
                q.tp.unwrap_or(0),
                q.kernel_dtype.as_deref().or(q.dtype.as_deref()).unwrap_or("?"),
                q.hidden_size.unwrap_or(0),
                thousands(q.min_tokens.unwrap_or(0)),
            );
            if let Some(p) = &q.prefill {
                line.push_str(&format!(
                    ": prefill chunks ({} tokens, {}) {}",
                    thousands(p.tokens.unwrap_or(0)),
                    bytes(p.bytes),
                    if p.fires { format!("yes ({})", p.codec.as_deref().unwrap_or("?")) } else { "no".into() }
                ));
            }
            if let (Some(first), Some(last)) = (q.decode.first(), q.decode.last()) {
                let firing: Vec<String> = q.decode.iter().filter(|d| d.fires).map(|d| d.conc.unwrap_or(0).to_string()).collect();
                let answer = match firing.len() {
                    0 => "never".to_string(),
                    n if n == q.decode.len() => "always".to_string(),
                    _ => format!("at conc {}", firing.join(", ")),
                };
                line.push_str(&format!(
                    "; decode at conc {}-{} ({}-{}) {answer}",
                    first.conc.unwrap_or(0),
                    last.conc.unwrap_or(0),
                    bytes(first.bytes),
                    bytes(last.bytes)
                ));
            }
            if let Some(qmin) = q.quantization_min_bytes {
                line.push_str(&format!("; the {level} codec only from {} up (FP below)", bytes(qmin)));
            }
            line
        }
        None => format!("{level}: undecided here: {}", q.why.as_deref().unwrap_or("")),
    }
}

/// `12 KiB`, `3 MiB`, `16 MiB`, `1.5 GiB` (binary units).
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if (v - v.round()).abs() < 0.05 { format!("{} {}", v.round() as u64, UNITS[u]) } else { format!("{v:.1} {}", UNITS[u]) }
}

fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::knobs::QuickReduceSize;

    #[test]
    fn quick_reduce_line_reads_like_the_rule() {
        let q = QuickReduce {
            level: Some("INT4".into()),
            tp: Some(4),
            dtype: Some("bfloat16".into()),
            kernel_dtype: Some("bfloat16".into()),
            hidden_size: Some(6144),
            fires: Some("range".into()),
            min_bytes: Some(16 << 20),
            min_tokens: Some(1366),
            max_bytes: Some(2048 << 20),
            decode: [1u32, 256].iter().map(|&c| QuickReduceSize { conc: Some(c), bytes: u64::from(c) * 12288, fires: false, ..QuickReduceSize::default() }).collect(),
            prefill: Some(QuickReduceSize { tokens: Some(8192), bytes: 8192 * 12288, fires: true, codec: Some("INT4".into()), ..QuickReduceSize::default() }),
            ..QuickReduce::default()
        };
        assert_eq!(
            quick_reduce_line(&q),
            "INT4 quick all-reduce fires for 16 MiB-2 GiB (TP 4, bfloat16, hidden 6144: >= 1,366 tokens): prefill chunks (8,192 tokens, 96 MiB) yes (INT4); decode at conc 1-256 (12 KiB-3 MiB) never"
        );
    }

    #[test]
    fn byte_units() {
        assert_eq!(bytes(12288), "12 KiB");
        assert_eq!(bytes(3 << 20), "3 MiB");
        assert_eq!(bytes(1536 << 10), "1.5 MiB");
    }
}
