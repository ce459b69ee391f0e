//! Do a sweep's requests fit the engine's context? The limit is read before
//! any engine starts, from the recipe's `--max-model-len` (written as vLLM's
//! parser takes it: `2048`, `32k`, `32K`) or, without one, from the local
//! model's `config.json` (`max_position_embeddings`); the longest request
//! of a point is [`RandomDataset::longest_request`]. `run`, `eval`, `ab`
//! and `overhead` refuse a point that cannot fit (exit 2, before any
//! folder exists), `recipe check` reports it, and the worker checks again
//! against the engine it built (a limit only the engine knows).

use std::path::Path;

use crate::protocol::RandomDataset;
use crate::recipe::parallel::flag_value;

/// The context limit a configuration's engine will have, as far as it can be
/// known without vLLM: (tokens, where the figure came from). `None` when the
/// flags leave it to vLLM (`auto`, `-1`, none given) and the model's own
/// limit is not plain to read (see [`model_max_len`]; `--hf-overrides` may
/// change it).
pub fn context_limit(args: &[String], model_path: &str) -> Option<(u64, String)> {
    if let Some(v) = flag_value(args, &["--max-model-len", "--max_model_len"]) {
        if let Some(n) = human_readable_int(&v) {
            return Some((n, format!("--max-model-len {v}")));
        }
    }
    if flag_value(args, &["--hf-overrides", "--hf_overrides"]).is_some() {
        return None;
    }
    model_max_len(Path::new(model_path)).map(|n| (n, format!("the model's max_position_embeddings ({n})")))
}

/// `max_position_embeddings` of a local model folder's `config.json`;
/// `None` when there is none, or when the config scales its rope
/// (`rope_scaling` / `rope_parameters` with a `factor`: vLLM then derives a
/// longer context from it, vllm/config/model.py `_get_and_verify_max_len`).
pub fn model_max_len(dir: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(dir.join("config.json")).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    let scaled = ["rope_scaling", "rope_parameters"].iter().any(|k| v.get(*k).is_some_and(|r| r.get("factor").is_some()));
    if scaled {
        return None;
    }
    v.get("max_position_embeddings").and_then(|m| m.as_u64())
}

/// A length as vLLM's `--max-model-len` takes it (vllm/utils/argparse_utils.py
/// `human_readable_int`): a plain integer, a decimal multiple `k`/`m`/`g`/`t`
/// (`25.6k` = 25,600) or a binary one `K`/`M`/`G`/`T` (`1K` = 1,024, whole
/// numbers only). `None` for `-1`/`auto` (the model's own limit) and for
/// anything vLLM's parser would refuse (it says so when the engine starts).
pub fn human_readable_int(value: &str) -> Option<u64> {
    let v = value.trim();
    if let Ok(n) = v.parse::<u64>() {
        return Some(n);
    }
    let suffix = v.chars().last()?;
    let number = &v[..v.len() - suffix.len_utf8()];
    let decimal = match suffix {
        'k' => 1e3,
        'm' => 1e6,
        'g' => 1e9,
        't' => 1e12,
        _ => 0.0,
    };
    // vLLM's pattern: digits, optionally a point and more digits.
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if decimal > 0.0 {
        let (whole, frac) = number.split_once('.').unwrap_or((number, "0"));
        if !digits(whole) || !digits(frac) {
            return None;
        }
        return number.parse::<f64>().ok().map(|x| (x * decimal) as u64);
    }
    if !digits(number) {
        return None;
    }
    let shift = match suffix {
        'K' => 10,
        'M' => 20,
        'G' => 30,
        'T' => 40,
        _ => return None,
    };
    number.parse::<u64>().ok().and_then(|n| n.checked_mul(1 << shift))
}

/// The error for a dataset whose longest request needs more than `max`
/// tokens (`limit` says what the limit is, e.g. `--max-model-len 2048`), or
/// `None` when it fits.
pub fn too_long(d: &RandomDataset, max: u64, limit: &str) -> Option<String> {
    let need = d.longest_request();
    (need > max).then(|| {
        format!(
            "ISL {} + OSL {} needs up to {need} tokens per request (prefix and range ratio included) but {limit} allows {max}: raise --max-model-len or shorten the sweep",
            d.isl, d.osl
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::LengthConvention;

    #[test]
    fn lengths_are_read_as_vllms_parser_reads_them() {
        assert_eq!(human_readable_int("2048"), Some(2048));
        assert_eq!(human_readable_int("32k"), Some(32_000));
        assert_eq!(human_readable_int("25.6k"), Some(25_600));
        assert_eq!(human_readable_int("32K"), Some(32_768));
        assert_eq!(human_readable_int("1.5K"), None, "vLLM refuses decimals with binary suffixes");
        assert_eq!(human_readable_int("-1"), None);
        assert_eq!(human_readable_int("auto"), None);
        assert_eq!(human_readable_int("x"), None);
    }

    #[test]
    fn the_flag_wins_over_the_models_config_and_the_error_names_both_lengths() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.json"), r#"{"max_position_embeddings": 8192}"#).unwrap();
        let model = dir.path().to_str().unwrap();
        let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(context_limit(&args(&["--max-model-len", "2k"]), model), Some((2000, "--max-model-len 2k".into())));
        assert_eq!(context_limit(&args(&["--max-model-len=auto"]), model).map(|l| l.0), Some(8192));
        assert_eq!(context_limit(&args(&[]), model).map(|l| l.0), Some(8192));
        assert_eq!(context_limit(&args(&[]), "org/hub-model"), None);
        assert_eq!(context_limit(&args(&["--hf-overrides", "{}"]), model), None, "overrides may change the limit");
        std::fs::write(dir.path().join("config.json"), r#"{"max_position_embeddings": 8192, "rope_scaling": {"type": "yarn", "factor": 4.0}}"#).unwrap();
        assert_eq!(context_limit(&args(&[]), model), None, "a scaled rope: vLLM derives the limit");

        let d = RandomDataset { isl: 999_999, osl: 128, convention: LengthConvention::Vllm, range_ratio: 0.0, prefix_len: 0, seed: 0 };
        let e = too_long(&d, 2048, "--max-model-len 2048").unwrap();
        assert!(e.starts_with("ISL 999999 + OSL 128 needs up to 1000127 tokens") && e.contains("--max-model-len 2048 allows 2048"), "{e}");
        let fits = RandomDataset { isl: 1920, ..d };
        assert_eq!(too_long(&fits, 2048, "x"), None);
        // The range ratio's upper bound counts: 1920 * 1.1 + 128 * 1.1 > 2048.
        assert!(too_long(&RandomDataset { range_ratio: 0.1, ..fits }, 2048, "x").is_some());
    }
}
