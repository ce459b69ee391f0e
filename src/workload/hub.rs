//! Trace datasets named by their Hugging Face address,
//! `hf://datasets/OWNER/NAME` (huggingface_hub's file-system URL form), as
//! AgentX's `semianalysisai/cc-traces-weka-062126` is published: one
//! `traces.jsonl` at the top of the dataset repository.
//!
//! [`locate`] finds the file in the Hugging Face cache that huggingface_hub
//! and InferenceX's replay read (`$HF_HUB_CACHE`, else `$HF_HOME/hub`, else
//! `~/.cache/huggingface/hub`; `datasets--OWNER--NAME/snapshots/REV/`, the
//! revision `refs/main` names first), and otherwise downloads it into that
//! cache with the user's Python (`huggingface_hub.hf_hub_download`, which
//! honours `HF_TOKEN`, `HF_ENDPOINT` and `HF_HUB_OFFLINE`). Neither working is
//! a usage error (exit 2) that says how to fetch the file by hand.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Result;

use crate::error::usage;

/// The URL prefix of a dataset repository.
pub const SCHEME: &str = "hf://datasets/";

/// The file a trace dataset holds (AgentX's layout).
pub const TRACE_FILE: &str = "traces.jsonl";

/// True for an `hf://datasets/...` address rather than a local path.
pub fn is_dataset(path: &Path) -> bool {
    path.to_str().is_some_and(|p| p.starts_with(SCHEME))
}

/// The local `traces.jsonl` of the dataset at `url`
/// (`hf://datasets/OWNER/NAME`), from the cache or downloaded with `python`.
///
/// Errors (usage): a malformed address; neither the cache nor the download
/// has the file (the message carries the download's own last error line).
pub fn locate(url: &Path, python: &Path) -> Result<PathBuf> {
    let repo = repo_id(url)?;
    let cache = hub_cache();
    if let Some(found) = cached(&cache, &repo) {
        return Ok(found);
    }
    eprintln!("[enginebench] {repo}: not in the Hugging Face cache {}; downloading {TRACE_FILE} with {}", cache.display(), python.display());
    download(&repo, python).map_err(|why| {
        usage(format!(
            "trace dataset {repo}: not in the Hugging Face cache ({}) and the download failed: {}. \
             Download it where this machine can reach the Hub (`hf download {repo} {TRACE_FILE} --repo-type dataset \
             --local-dir DIR`) and pass --trace-file DIR, or set HF_HUB_CACHE to a cache that holds it",
            cache.display(),
            why.trim_end_matches('.')
        ))
    })
}

/// `OWNER/NAME` of an `hf://datasets/OWNER/NAME` address.
fn repo_id(url: &Path) -> Result<String> {
    let text = url.to_string_lossy();
    let rest = text.strip_prefix(SCHEME).unwrap_or(&text).trim_end_matches('/');
    let parts: Vec<&str> = rest.split('/').collect();
    let ok = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    match parts.as_slice() {
        [owner, name] if ok(owner) && ok(name) => Ok(format!("{owner}/{name}")),
        _ => Err(usage(format!("trace dataset `{text}`: give {SCHEME}OWNER/NAME (e.g. {SCHEME}semianalysisai/cc-traces-weka-062126)"))),
    }
}

/// The hub cache folder, as huggingface_hub picks it.
fn hub_cache() -> PathBuf {
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    var("HF_HUB_CACHE")
        .or_else(|| var("HF_HOME").map(|h| h.join("hub")))
        .or_else(|| var("XDG_CACHE_HOME").map(|x| x.join("huggingface/hub")))
        .or_else(|| var("HOME").map(|h| h.join(".cache/huggingface/hub")))
        .unwrap_or_else(|| PathBuf::from(".cache/huggingface/hub"))
}

/// The cached `traces.jsonl` of `repo`: the snapshot `refs/main` names, else
/// the newest snapshot that has the file.
fn cached(cache: &Path, repo: &str) -> Option<PathBuf> {
    let root = cache.join(format!("datasets--{}", repo.replace('/', "--")));
    if let Ok(rev) = std::fs::read_to_string(root.join("refs/main")) {
        let file = root.join("snapshots").join(rev.trim()).join(TRACE_FILE);
        if file.is_file() {
            return Some(file);
        }
    }
    let snapshots = std::fs::read_dir(root.join("snapshots")).ok()?;
    snapshots
        .flatten()
        .map(|e| e.path().join(TRACE_FILE))
        .filter(|f| f.is_file())
        .max_by_key(|f| f.metadata().and_then(|m| m.modified()).ok())
}

/// Downloads the file with huggingface_hub; the error is the last line the
/// download printed.
fn download(repo: &str, python: &Path) -> std::result::Result<PathBuf, String> {
    const SCRIPT: &str = "import sys\nfrom huggingface_hub import hf_hub_download\n\
                          print(hf_hub_download(repo_id=sys.argv[1], filename=sys.argv[2], repo_type='dataset'))";
    let out = Command::new(python)
        .args(["-c", SCRIPT, repo, TRACE_FILE])
        .output()
        .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
    let last = |b: &[u8]| String::from_utf8_lossy(b).lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim().to_string();
    if !out.status.success() {
        return Err(last(&out.stderr));
    }
    let path = PathBuf::from(last(&out.stdout));
    if path.is_file() { Ok(path) } else { Err(format!("huggingface_hub returned `{}`, not a file", path.display())) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_the_cache_layout() {
        assert!(is_dataset(Path::new("hf://datasets/a/b")));
        assert!(!is_dataset(Path::new("traces/hf.jsonl")));
        assert_eq!(repo_id(Path::new("hf://datasets/semianalysisai/cc-traces-weka-062126/")).unwrap(), "semianalysisai/cc-traces-weka-062126");
        for bad in ["hf://datasets/only-owner", "hf://datasets/a/b/c", "hf://datasets/a b/c"] {
            let e = repo_id(Path::new(bad)).unwrap_err().to_string();
            assert!(e.contains(bad) && e.contains("OWNER/NAME"), "{e}");
        }
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("datasets--o--n");
        assert_eq!(cached(dir.path(), "o/n"), None);
        for rev in ["old", "main-rev"] {
            std::fs::create_dir_all(root.join("snapshots").join(rev)).unwrap();
            std::fs::write(root.join("snapshots").join(rev).join(TRACE_FILE), "{}\n").unwrap();
        }
        std::fs::create_dir_all(root.join("refs")).unwrap();
        std::fs::write(root.join("refs/main"), "main-rev\n").unwrap();
        assert_eq!(cached(dir.path(), "o/n"), Some(root.join("snapshots/main-rev").join(TRACE_FILE)));
        // A python that fails the download names why, and how to fetch by hand.
        let py = dir.path().join("python");
        std::fs::write(&py, "#!/bin/sh\necho 'OSError: offline mode is enabled' >&2\nexit 1\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&py, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(download("o/n", &py).unwrap_err(), "OSError: offline mode is enabled");
    }
}
