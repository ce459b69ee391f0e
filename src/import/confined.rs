//! A checkout's files, read only where they really are inside it: a master
//! config, `runners.yaml`, `thresholds.yaml` or a launcher (or a folder on
//! the way) that is a link pointing out of the checkout is an error that
//! names the link; what it points to is never opened. Links that stay
//! inside are followed (InferenceX links one runner script to another).
//! The files are the user's clone, which nothing writes while the import
//! runs (the sandbox binds it read-only).

use std::io::Read;
use std::path::{Path, PathBuf};

/// The most of one checkout file that is read (InferenceX's largest master
/// config is a few hundred KiB).
pub const FILE_BYTES: u64 = 16 << 20;

/// The real path of `path`, which must lie inside `root` (a real path:
/// canonical, no links).
///
/// Errors: `path` resolves outside `root` (naming `path`, not where it
/// points), or cannot be resolved (absent, a loop).
pub fn inside(root: &Path, path: &Path) -> Result<PathBuf, String> {
    let real = path.canonicalize().map_err(|e| format!("{}: {e}", path.display()))?;
    if !real.starts_with(root) {
        return Err(format!("{}: a link that points outside {}: not read", path.display(), root.display()));
    }
    Ok(real)
}

/// The text of `path`, a regular file inside `root`, at most [`FILE_BYTES`].
///
/// Errors: as [`inside`]; not a regular file; larger than the cap;
/// unreadable.
pub fn read(root: &Path, path: &Path) -> Result<String, String> {
    let real = inside(root, path)?;
    let f = std::fs::File::open(&real).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if !f.metadata().is_ok_and(|m| m.is_file()) {
        return Err(format!("{}: not a regular file", path.display()));
    }
    let mut bytes = Vec::new();
    f.take(FILE_BYTES + 1).read_to_end(&mut bytes).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if bytes.len() as u64 > FILE_BYTES {
        return Err(format!("{}: larger than {} MiB: not read", path.display(), FILE_BYTES >> 20));
    }
    String::from_utf8(bytes).map_err(|_| format!("{}: not UTF-8 text", path.display()))
}

/// The checkout a master config given by its path belongs to (`import
/// inferencex LAUNCHER --master-config FILE`): the folder above its
/// `configs/` (`configs/deprecated/` for deprecated ones), in real terms.
///
/// Errors: the file cannot be resolved.
pub fn root_of_master(master: &Path) -> Result<PathBuf, String> {
    let real = master.canonicalize().map_err(|e| format!("master config {}: {e}", master.display()))?;
    let mut dir = real.parent().unwrap_or(Path::new("/"));
    if dir.file_name().is_some_and(|n| n == "deprecated") {
        dir = dir.parent().unwrap_or(dir);
    }
    Ok(dir.parent().unwrap_or(dir).to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_out_of_the_checkout_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "root:x:0:0").unwrap();
        let root = dir.path().join("ix");
        std::fs::create_dir_all(root.join("configs")).unwrap();
        std::fs::write(root.join("configs/a-master.yaml"), "a: {}\n").unwrap();
        std::os::unix::fs::symlink("a-master.yaml", root.join("configs/b-master.yaml")).unwrap();
        std::os::unix::fs::symlink(&secret, root.join("configs/c-master.yaml")).unwrap();
        std::os::unix::fs::symlink(dir.path(), root.join("up")).unwrap();
        let root = root.canonicalize().unwrap();
        assert_eq!(read(&root, &root.join("configs/b-master.yaml")).unwrap(), "a: {}\n", "a link inside is followed");
        for bad in [root.join("configs/c-master.yaml"), root.join("up/secret"), root.join("configs/../../secret")] {
            let err = read(&root, &bad).unwrap_err();
            assert!(err.contains(&format!("{}: a link that points outside {}", bad.display(), root.display())), "{err}");
            assert!(!err.contains("root:x"), "{err}");
        }
        assert_eq!(root_of_master(&root.join("configs/a-master.yaml")).unwrap(), root);
    }
}
