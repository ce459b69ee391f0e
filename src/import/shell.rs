//! Reading an InferenceX shell launcher without executing it.
//!
//! What is understood, at the top level of the script (outside any
//! `if`/`case`/`for`/`while` block or function):
//! * `export NAME=VALUE` and `NAME=VALUE`, with quotes, `$VAR`/`${VAR}`
//!   references and the `${VAR:-default}` form (the default is taken);
//! * array assignments `NAME=(a "b" ...)`, used as `"${NAME[@]}"`;
//! * the `vllm serve ...` command, with line continuations, quoted JSON and
//!   redirections/`&` stripped.
//!
//! Everything else that could change the engine (exports or `vllm serve`
//! flags inside conditional blocks, `source`d files) is reported as not
//! imported, with its line number. Nothing is ever run by a shell.

use std::collections::BTreeMap;

/// A logical line: continuations joined, with the number of its first line.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub number: usize,
    pub text: String,
}

/// Joins `\`-newline continuations and drops comments and blank lines.
pub fn logical_lines(script: &str) -> Vec<Line> {
    let mut out = Vec::new();
    let mut current: Option<Line> = None;
    for (i, raw) in script.lines().enumerate() {
        let trimmed = raw.trim_end();
        let (body, continues) = match trimmed.strip_suffix('\\') {
            Some(b) => (b, true),
            None => (trimmed, false),
        };
        let line = current.get_or_insert_with(|| Line { number: i + 1, text: String::new() });
        if !line.text.is_empty() {
            line.text.push(' ');
        }
        line.text.push_str(body.trim());
        if !continues {
            let done = current.take().expect("just set");
            let t = done.text.trim();
            if !t.is_empty() && !t.starts_with('#') {
                out.push(Line { number: done.number, text: t.to_string() });
            }
        }
    }
    if let Some(done) = current {
        if !done.text.trim().is_empty() {
            out.push(done);
        }
    }
    out
}

/// What the launcher holds.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Launcher {
    /// Exported variables (in order), values expanded where possible.
    pub exports: Vec<(String, String)>,
    /// Every top-level assignment (exported or not), for expansion.
    pub vars: BTreeMap<String, String>,
    pub arrays: BTreeMap<String, Vec<String>>,
    /// The `vllm serve` tokens after `serve` (model first), unexpanded.
    pub serve: Option<(usize, Vec<String>)>,
    /// (line, what, why) of things not imported.
    pub skipped: Vec<(usize, String, String)>,
}

const OPENERS: [&str; 5] = ["if ", "case ", "for ", "while ", "until "];
const CLOSERS: [&str; 3] = ["fi", "esac", "done"];

/// Parses a launcher script.
pub fn parse_launcher(script: &str) -> Launcher {
    let mut l = Launcher::default();
    let mut depth = 0usize;
    for line in logical_lines(script) {
        let t = line.text.as_str();
        let first = t.split(|c: char| c.is_whitespace() || c == ';').next().unwrap_or("");
        let opens = OPENERS.iter().any(|o| t.starts_with(o)) || t.ends_with("() {") || t.starts_with("function ");
        if opens {
            depth += 1;
        }
        let inside = depth > 0;
        // `... fi` closes even on the same line (`if x; then y; fi`).
        let closes = CLOSERS.iter().filter(|c| first == **c || t.ends_with(&format!("; {c}")) || t.ends_with(&format!(";{c}"))).count()
            + usize::from(t == "}");
        if inside {
            if is_engine_relevant(t) {
                l.skipped.push((line.number, t.to_string(), "inside a conditional block or function".into()));
            }
        } else {
            top_level(&mut l, &line);
        }
        depth = depth.saturating_sub(closes);
    }
    l
}

/// Lines that would change the engine if they ran.
fn is_engine_relevant(t: &str) -> bool {
    t.starts_with("export ") || t.contains("vllm serve") || t.contains("_ARGS") || t.contains("+=(")
}

fn top_level(l: &mut Launcher, line: &Line) {
    let t = line.text.as_str();
    if let Some(rest) = t.strip_prefix("export ") {
        if let Some((name, value)) = assignment(rest) {
            let v = expand_value(&value, &l.vars);
            l.vars.insert(name.clone(), v.clone());
            l.exports.push((name, v));
        }
    } else if let Some(idx) = t.find("vllm serve") {
        let cmd = strip_redirections(&t[idx + "vllm serve".len()..]);
        match shell_words::split(&cmd) {
            Ok(tokens) => l.serve = Some((line.number, tokens)),
            Err(e) => l.skipped.push((line.number, t.to_string(), format!("cannot split the command: {e}"))),
        }
    } else if let Some((name, value)) = assignment(t) {
        if let Some(items) = value.strip_prefix('(').and_then(|v| v.strip_suffix(')')) {
            let items = shell_words::split(items).unwrap_or_default();
            l.arrays.insert(name, items);
        } else {
            let v = expand_value(&value, &l.vars);
            l.vars.insert(name, v);
        }
    } else if t.starts_with("source ") || t.starts_with(". ") {
        l.skipped.push((line.number, t.to_string(), "sourced file: its settings are not imported".into()));
    }
}

/// `NAME=VALUE` (VALUE raw, quotes kept) when `t` is an assignment.
fn assignment(t: &str) -> Option<(String, String)> {
    let (name, value) = t.split_once('=')?;
    let valid = !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    valid.then(|| (name.to_string(), value.trim().to_string()))
}

/// Unquotes and expands a scalar value: `${VAR:-default}` takes the default
/// when VAR is unknown, `$VAR`/`${VAR}` take known values and stay
/// `${VAR}` otherwise.
pub fn expand_value(raw: &str, vars: &BTreeMap<String, String>) -> String {
    let unquoted = shell_words::split(raw).ok().and_then(|w| w.into_iter().next()).unwrap_or_default();
    expand(&unquoted, vars)
}

/// Expands `$VAR`, `${VAR}` and `${VAR:-default}` in a token.
pub fn expand(token: &str, vars: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let chars: Vec<char> = token.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '$' || i + 1 >= chars.len() {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        if chars[i + 1] == '{' {
            let Some(end) = chars[i + 2..].iter().position(|&c| c == '}') else {
                out.extend(&chars[i..]);
                break;
            };
            let inner: String = chars[i + 2..i + 2 + end].iter().collect();
            let (name, default) = match inner.split_once(":-") {
                Some((n, d)) => (n.to_string(), Some(d.to_string())),
                None => (inner.clone(), None),
            };
            out.push_str(&match (vars.get(&name), default) {
                (Some(v), _) => v.clone(),
                (None, Some(d)) => expand(&d, vars),
                (None, None) => format!("${{{name}}}"),
            });
            i += 3 + end;
        } else {
            let len = chars[i + 1..].iter().take_while(|c| c.is_ascii_alphanumeric() || **c == '_').count();
            if len == 0 {
                out.push('$');
                i += 1;
                continue;
            }
            let name: String = chars[i + 1..i + 1 + len].iter().collect();
            out.push_str(&vars.get(&name).cloned().unwrap_or_else(|| format!("${{{name}}}")));
            i += 1 + len;
        }
    }
    out
}

/// Drops `> file`, `2>&1`, `&` and the like from the end of a command.
fn strip_redirections(cmd: &str) -> String {
    let mut s = cmd.trim().trim_end_matches('&').trim().to_string();
    while let Some(pos) = s.rfind(['>', '<']) {
        // Only strip redirections outside quotes: count quotes before pos.
        let before = &s[..pos];
        if before.matches('"').count() % 2 == 1 || before.matches('\'').count() % 2 == 1 {
            break;
        }
        let start = before.rfind(char::is_whitespace).map_or(0, |p| p + 1);
        let after_target = s[pos + 1..].trim_start_matches(['>', '&']);
        let rest = after_target.trim_start().split_once(char::is_whitespace).map_or("", |(_, r)| r);
        s = format!("{} {}", &s[..start], rest).trim().to_string();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continuations_and_comments() {
        let lines = logical_lines("# c\nvllm serve m \\\n   --a 1 \\\n   --b\n\nexport X=1\n");
        assert_eq!(lines, vec![
            Line { number: 2, text: "vllm serve m --a 1 --b".into() },
            Line { number: 6, text: "export X=1".into() },
        ]);
    }

    #[test]
    fn expansion_forms() {
        let vars: BTreeMap<String, String> = [("A".to_string(), "1".to_string())].into();
        assert_eq!(expand("${B:-112}", &vars), "112");
        assert_eq!(expand("${A:-9}x$A/${A}", &vars), "1x1/1");
        assert_eq!(expand("$TP", &vars), "${TP}");
        assert_eq!(expand("cost $", &vars), "cost $");
        assert_eq!(expand_value("\"${NCCL:-112}\"", &vars), "112");
    }

    #[test]
    fn redirections_are_dropped() {
        assert_eq!(strip_redirections("m --x 1 > \"$LOG\" 2>&1 &"), "m --x 1");
        assert_eq!(strip_redirections("m --j '{\"a\": \"x>y\"}'"), "m --j '{\"a\": \"x>y\"}'");
    }
}
