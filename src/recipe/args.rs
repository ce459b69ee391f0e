//! Editing a `vllm serve` flag list the way a person would on the command
//! line: remove a flag with its values, set a flag's value, substitute
//! `${NAME}` placeholders.

use std::collections::BTreeMap;

/// True for a token that starts a flag (`-tp`, `--dtype`, `--x=y`), not a
/// negative number or a value.
pub fn is_flag(token: &str) -> bool {
    token.starts_with('-') && token.len() > 1 && !token[1..].starts_with(|c: char| c.is_ascii_digit() || c == '.')
}

/// The flag name of a token (`--x=y` -> `--x`).
fn flag_name(token: &str) -> &str {
    token.split_once('=').map_or(token, |(name, _)| name)
}

/// Index ranges (start, end exclusive) of every occurrence of flag `name`
/// with its values.
fn occurrences(args: &[String], name: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        if is_flag(&args[i]) && flag_name(&args[i]) == name {
            let mut end = i + 1;
            if !args[i].contains('=') {
                while end < args.len() && !is_flag(&args[end]) {
                    end += 1;
                }
            }
            out.push((i, end));
            i = end;
        } else {
            i += 1;
        }
    }
    out
}

/// True when `args` contain any of `names`.
pub fn has_flag(args: &[String], names: &[&str]) -> bool {
    names.iter().any(|n| !occurrences(args, n).is_empty())
}

/// Removes every occurrence of flag `name` and its values. Returns whether
/// anything was removed.
pub fn remove_flag(args: &mut Vec<String>, name: &str) -> bool {
    let occ = occurrences(args, name);
    for &(start, end) in occ.iter().rev() {
        args.drain(start..end);
    }
    !occ.is_empty()
}

/// Sets flag `name` to `value` (replacing the values of its first occurrence
/// and dropping any others), or appends `name value` when absent. An empty
/// `value` sets a switch without a value.
pub fn set_flag(args: &mut Vec<String>, name: &str, value: &str) {
    let occ = occurrences(args, name);
    let replacement: Vec<String> =
        if value.is_empty() { vec![name.to_string()] } else { vec![name.to_string(), value.to_string()] };
    match occ.first() {
        Some(&(start, end)) => {
            for &(s, e) in occ[1..].iter().rev() {
                args.drain(s..e);
            }
            args.splice(start..end, replacement);
        }
        None => args.extend(replacement),
    }
}

/// Replaces `${NAME}` placeholders in `text` from `vars`.
///
/// Errors: an unknown name (with the known ones) or an unclosed `${`.
pub fn substitute(text: &str, vars: &BTreeMap<String, String>) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find('}').ok_or_else(|| format!("unclosed ${{ in {text:?}"))?;
        let name = &after[..end];
        match vars.get(name) {
            Some(v) => out.push_str(v),
            None => {
                let known: Vec<&str> = vars.keys().map(String::as_str).collect();
                return Err(format!(
                    "unknown placeholder ${{{name}}} in {text:?}; known: {}",
                    if known.is_empty() { "none (set [vars] or sweep.tp)".to_string() } else { known.join(", ") }
                ));
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn remove_and_set() {
        let mut a = v(&["--dtype", "float32", "--enforce-eager", "--kv-cache-dtype=fp8", "-tp", "8"]);
        assert!(remove_flag(&mut a, "--kv-cache-dtype"));
        assert!(remove_flag(&mut a, "--enforce-eager"));
        assert!(!remove_flag(&mut a, "--nope"));
        assert_eq!(a, v(&["--dtype", "float32", "-tp", "8"]));
        set_flag(&mut a, "--dtype", "bfloat16");
        set_flag(&mut a, "--block-size", "128");
        set_flag(&mut a, "--no-enable-prefix-caching", "");
        assert_eq!(a, v(&["--dtype", "bfloat16", "-tp", "8", "--block-size", "128", "--no-enable-prefix-caching"]));
        assert!(has_flag(&a, &["--tensor-parallel-size", "-tp"]));
    }

    #[test]
    fn negative_numbers_are_values() {
        let mut a = v(&["--seed", "-1", "--x"]);
        remove_flag(&mut a, "--seed");
        assert_eq!(a, v(&["--x"]));
        assert!(is_flag("-tp") && !is_flag("-1") && !is_flag("-0.5") && !is_flag("-"));
    }

    #[test]
    fn placeholders() {
        let vars: BTreeMap<String, String> = [("TP".to_string(), "8".to_string())].into();
        assert_eq!(substitute("tp=${TP}/${TP}", &vars).unwrap(), "tp=8/8");
        assert_eq!(substitute("plain", &vars).unwrap(), "plain");
        let e = substitute("${MAX_MODEL_LEN}", &vars).unwrap_err();
        assert!(e.contains("MAX_MODEL_LEN") && e.contains("TP"), "{e}");
        assert!(substitute("${TP", &vars).is_err());
    }
}
