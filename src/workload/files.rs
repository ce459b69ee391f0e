//! Reading session files: JSON lines one at a time, and JSON parse errors
//! that name the file, line and column (usage errors, exit code 2).

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use anyhow::Result;

use crate::error::usage;

/// Calls `each(line_number, text)` (1-based) for every non-blank line.
///
/// Errors: the file cannot be read (usage), or what `each` returned.
pub fn for_each_line(path: &Path, mut each: impl FnMut(usize, &str) -> Result<()>) -> Result<()> {
    let file = File::open(path).map_err(|e| usage(format!("cannot read {}: {e}", path.display())))?;
    let mut reader = BufReader::new(file);
    let mut line = String::new();
    let mut number = 0;
    loop {
        line.clear();
        let n = reader
            .read_line(&mut line)
            .map_err(|e| usage(format!("{}:{}: cannot read: {e}", path.display(), number + 1)))?;
        if n == 0 {
            return Ok(());
        }
        number += 1;
        if !line.trim().is_empty() {
            each(number, line.trim_end())?;
        }
    }
}

/// Parses `text` (line `line` of `path`, or the whole file when `None`)
/// as a `T`.
///
/// Errors (usage): [`json_error`]'s, naming the field that failed.
pub fn parse_json<T: serde::de::DeserializeOwned>(path: &Path, line: Option<usize>, text: &str) -> Result<T> {
    let mut de = serde_json::Deserializer::from_str(text);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| json_error(path, line, &e.path().to_string(), e.inner()))?;
    de.end().map_err(|e| json_error(path, line, ".", &e))?;
    Ok(value)
}

/// A usage error for a JSON parse failure at `line` of `path` (for a whole
/// file parsed at once, `line` is `None` and serde's own line is used), at
/// the field `field` (serde_path_to_error's path, e.g. `requests[3].hash_ids`;
/// `.` for the document itself, which is not named).
fn json_error(path: &Path, line: Option<usize>, field: &str, e: &serde_json::Error) -> anyhow::Error {
    let text = e.to_string();
    // serde appends " at line L column C"; we say where ourselves.
    let message = text.rsplit_once(" at line ").map_or(text.as_str(), |(m, _)| m);
    let line = line.unwrap_or(e.line());
    let field = if field == "." || field.is_empty() { String::new() } else { format!("field `{field}`: ") };
    usage(format!("{}:{}:{}: {field}{message}", path.display(), line, e.column()))
}
