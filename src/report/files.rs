//! Writing results so that killing the process at any moment leaves valid
//! files: points are appended and flushed one JSON line at a time, and the
//! summary document is replaced atomically (temp file + rename).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;

/// Writes `value` as pretty JSON to `path` through `path.tmp` + rename. On
/// failure (a full disk, a folder gone read-only) the temporary file is
/// removed and `path` is left as it was.
///
/// Errors: the message names `path` and the system's reason.
pub fn write_json_atomic(path: &Path, value: &impl Serialize) -> Result<()> {
    let tmp = path.with_extension("json.tmp");
    let written = (|| -> std::io::Result<()> {
        let mut f = File::create(&tmp)?;
        serde_json::to_writer_pretty(&mut f, value)?;
        f.write_all(b"\n")?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    written.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        anyhow::Error::new(e).context(format!("writing {}", path.display()))
    })
}

/// How [`write_json_last`] wrote its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LastWrite {
    /// Atomically, as [`write_json_atomic`].
    Atomic,
    /// There was no room for a second copy: the file was rewritten in
    /// place as compact JSON (smaller than the pretty one it replaces).
    InPlace,
}

/// The last write of a document when an earlier write failed (a full
/// disk): [`write_json_atomic`] first; when that fails, `path` is truncated
/// and rewritten in place as compact JSON, which fits in the space the
/// pretty copy held. Not atomic: only for a run's final status after a
/// write error, when the alternative is a result that says `running`.
///
/// Errors: both writes failed (the second's reason, naming `path`).
pub fn write_json_last(path: &Path, value: &impl Serialize) -> Result<LastWrite> {
    if write_json_atomic(path, value).is_ok() {
        return Ok(LastWrite::Atomic);
    }
    let text = serde_json::to_vec(value)?;
    let written = (|| -> std::io::Result<()> {
        let mut f = OpenOptions::new().write(true).truncate(true).create(true).open(path)?;
        f.write_all(&text)?;
        f.write_all(b"\n")?;
        f.sync_all()
    })();
    written.with_context(|| format!("rewriting {} in place", path.display()))?;
    Ok(LastWrite::InPlace)
}

/// An append-only JSON-lines file, flushed after every line. A line that
/// cannot be written whole is taken back (the file is cut to where it
/// was), so the file holds whole lines only.
pub struct JsonLines {
    file: File,
    path: PathBuf,
}

impl JsonLines {
    /// Opens (creates) `path` for appending.
    ///
    /// Errors: the file cannot be opened; the message names it.
    pub fn create(path: PathBuf) -> Result<JsonLines> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        Ok(JsonLines { file, path })
    }

    /// The file's length now: where [`JsonLines::rollback`] cuts it back to.
    pub fn mark(&self) -> Result<u64> {
        Ok(self.file.metadata().with_context(|| format!("reading the length of {}", self.path.display()))?.len())
    }

    /// Cuts the file back to `mark` (lines appended since are taken back).
    pub fn rollback(&mut self, mark: u64) {
        let _ = self.file.set_len(mark);
    }

    /// Appends `value` as one line and flushes it.
    ///
    /// Errors: the line cannot be written (the message names the file and
    /// the system's reason, e.g. "No space left on device"); the file is
    /// left as it was before the call.
    pub fn append(&mut self, value: &impl Serialize) -> Result<()> {
        let mut line = serde_json::to_vec(value)?;
        line.push(b'\n');
        let before = self.file.metadata().map(|m| m.len());
        if let Err(e) = self.file.write_all(&line).and_then(|_| self.file.flush()) {
            if let Ok(len) = before {
                let _ = self.file.set_len(len);
            }
            return Err(anyhow::Error::new(e).context(format!("writing {}", self.path.display())));
        }
        Ok(())
    }
}

/// The current lines of a run's `points.jsonl` / `requests.jsonl` /
/// `steps.jsonl`: of each point's lines (`key` gives a line's job, point
/// and attempt), only those of the point's highest attempt. After
/// `--resume` the files also hold the superseded lines of an interrupted
/// attempt; files written before lines carried `attempt` read it as 0.
pub fn current_attempt<T>(lines: Vec<T>, key: impl Fn(&T) -> (usize, usize, u32)) -> Vec<T> {
    let mut latest = std::collections::BTreeMap::new();
    for l in &lines {
        let (job, point, attempt) = key(l);
        let a = latest.entry((job, point)).or_insert(attempt);
        *a = (*a).max(attempt);
    }
    lines
        .into_iter()
        .filter(|l| {
            let (job, point, attempt) = key(l);
            latest.get(&(job, point)) == Some(&attempt)
        })
        .collect()
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
        let mark = jl.mark().unwrap();
        jl.append(&2).unwrap();
        jl.rollback(mark);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "1\n\"x\"\n", "rolled back to the mark");
    }

    #[test]
    fn a_failed_write_leaves_no_temporary_file_and_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        // A folder where the document should be: the rename fails.
        let p = dir.path().join("r.json");
        std::fs::create_dir(&p).unwrap();
        std::fs::write(p.join("x"), "").unwrap();
        let err = write_json_atomic(&p, &serde_json::json!({"a": 1})).unwrap_err();
        assert!(format!("{err:#}").starts_with(&format!("writing {}", p.display())), "{err:#}");
        assert!(!dir.path().join("r.json.tmp").exists(), "the temporary file is removed");
    }

    #[test]
    fn superseded_attempts_are_left_out() {
        // (job, point, attempt): point 1 was interrupted in attempt 0 and re-run in attempt 1.
        let lines = vec![(0, 0, 0), (0, 1, 0), (0, 1, 0), (0, 1, 1), (1, 0, 1)];
        assert_eq!(current_attempt(lines, |l| *l), vec![(0, 0, 0), (0, 1, 1), (1, 0, 1)]);
    }
}
