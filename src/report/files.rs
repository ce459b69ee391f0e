//! Writing results so that killing the process at any moment leaves valid
//! files: points are appended and flushed one JSON line at a time, and the
//! summary document is replaced atomically (temp file + rename).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;

/// Writes `value` as pretty JSON to `path` through `path.tmp` + rename.
pub fn write_json_atomic(path: &Path, value: &impl Serialize) -> Result<()> {
    let tmp = path.with_extension("json.tmp");
    let mut f = File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    serde_json::to_writer_pretty(&mut f, value)?;
    f.write_all(b"\n")?;
    f.sync_all()?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))?;
    Ok(())
}

/// An append-only JSON-lines file, flushed after every line.
pub struct JsonLines {
    file: File,
}

impl JsonLines {
    pub fn create(path: PathBuf) -> Result<JsonLines> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        Ok(JsonLines { file })
    }

    pub fn append(&mut self, value: &impl Serialize) -> Result<()> {
        let mut line = serde_json::to_vec(value)?;
        line.push(b'\n');
        self.file.write_all(&line)?;
        self.file.flush()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_and_appended() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.json");
        write_json_atomic(&p, &serde_json::json!({"a": 1})).unwrap();
        write_json_atomic(&p, &serde_json::json!({"a": 2})).unwrap();
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        assert_eq!(v["a"], 2);
        assert!(!dir.path().join("r.json.tmp").exists());

        let path = dir.path().join("p.jsonl");
        let mut jl = JsonLines::create(path.clone()).unwrap();
        jl.append(&1).unwrap();
        jl.append(&"x").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "1\n\"x\"\n");
    }
}
