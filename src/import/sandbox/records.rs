//! The sandbox's record folder, read from the host without following
//! anything in it: the launcher can write there too, so every name is
//! opened relative to the folder's descriptor with `O_NOFOLLOW` (a link is
//! refused, never read through), anything but a regular file or folder is
//! refused (a FIFO cannot block the read: `O_NONBLOCK`), and a file is
//! read up to [`FILE_BYTES`].

use std::ffi::CString;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The most of one record file that is read: a record holds a line
/// number, an argv or an environment (a few KiB).
pub const FILE_BYTES: u64 = 1 << 20;

/// An open folder of the record tree.
#[derive(Debug)]
pub struct Folder(OwnedFd);

impl Folder {
    /// Opens the folder at `path` (the last component not followed).
    ///
    /// Errors: it cannot be opened as a folder (the OS error).
    pub fn open(path: &Path) -> Result<Folder, String> {
        let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| format!("{}: a NUL in the path", path.display()))?;
        // SAFETY: a valid C string; the descriptor is owned from here on.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(format!("{}: {}", path.display(), std::io::Error::last_os_error()));
        }
        // SAFETY: fd is a fresh descriptor owned by nothing else.
        Ok(Folder(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// The names in the folder, sorted (names that are not UTF-8 lossily).
    pub fn names(&self) -> Vec<String> {
        let mut out: Vec<String> = std::fs::read_dir(format!("/proc/self/fd/{}", self.0.as_raw_fd()))
            .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        out.sort();
        out
    }

    /// The sub-folder `name`.
    ///
    /// Errors: absent, a link, or not a folder (naming it).
    pub fn folder(&self, name: &str) -> Result<Folder, String> {
        let fd = self.open_at(name, libc::O_RDONLY | libc::O_DIRECTORY)?;
        Ok(Folder(fd))
    }

    /// The content of regular file `name`; `None` when there is none.
    ///
    /// Errors: a link (not followed), not a regular file, larger than
    /// [`FILE_BYTES`], or unreadable: each naming the record.
    pub fn read(&self, name: &str) -> Result<Option<Vec<u8>>, String> {
        let fd = match self.open_at(name, libc::O_RDONLY | libc::O_NONBLOCK) {
            Ok(fd) => fd,
            Err(e) if e.ends_with(NOT_FOUND) => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut f = std::fs::File::from(fd);
        let meta = f.metadata().map_err(|e| format!("record {name}: {e}"))?;
        if !meta.is_file() {
            return Err(format!("record {name} is not a regular file: not read"));
        }
        let mut out = Vec::new();
        (&mut f).take(FILE_BYTES + 1).read_to_end(&mut out).map_err(|e| format!("record {name}: {e}"))?;
        if out.len() as u64 > FILE_BYTES {
            return Err(format!("record {name} is larger than {} KiB: not read", FILE_BYTES >> 10));
        }
        Ok(Some(out))
    }

    /// `read`, as text (lossily); empty when absent.
    pub fn text(&self, name: &str) -> Result<String, String> {
        Ok(self.read(name)?.map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default())
    }

    fn open_at(&self, name: &str, flags: libc::c_int) -> Result<OwnedFd, String> {
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return Err(format!("record {name:?}: not a name in the record folder"));
        }
        let c = CString::new(name).map_err(|_| format!("record {name:?}: a NUL in the name"))?;
        // SAFETY: a valid folder descriptor and C string; the result is owned from here on.
        let fd = unsafe { libc::openat(self.0.as_raw_fd(), c.as_ptr(), flags | libc::O_NOFOLLOW | libc::O_CLOEXEC) };
        if fd < 0 {
            let e = std::io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::ELOOP) => format!("record {name} is a symbolic link (the launcher made it): not followed"),
                // O_DIRECTORY on a link says ENOTDIR.
                Some(libc::ENOTDIR) if self.is_link(&c) => format!("record {name} is a symbolic link (the launcher made it): not followed"),
                Some(libc::ENOTDIR) => format!("record {name} is not a folder"),
                Some(libc::ENOENT) => format!("record {name}: {NOT_FOUND}"),
                _ => format!("record {name}: {e}"),
            });
        }
        // SAFETY: fd is a fresh descriptor owned by nothing else.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// Whether `name` in this folder is a symbolic link (not followed).
    fn is_link(&self, name: &CString) -> bool {
        // SAFETY: zeroed stat is a valid out-parameter; valid folder descriptor and C string.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        let r = unsafe { libc::fstatat(self.0.as_raw_fd(), name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) };
        r == 0 && st.st_mode & libc::S_IFMT == libc::S_IFLNK
    }
}

const NOT_FOUND: &str = "not found";

#[cfg(test)]
mod tests {
    use super::*;

    /// Links, FIFOs and oversized files in a record folder are refused
    /// without being followed, read or waited on.
    #[test]
    fn links_fifos_and_large_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let secret = d.join("secret");
        std::fs::write(&secret, "host content").unwrap();
        std::fs::write(d.join("problems"), "3\tsomething\n").unwrap();
        std::os::unix::fs::symlink(&secret, d.join("services")).unwrap();
        std::fs::create_dir(d.join("serve.a")).unwrap();
        std::os::unix::fs::symlink(d, d.join("serve.b")).unwrap();
        let fifo = CString::new(d.join("lasterr").as_os_str().as_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        std::fs::write(d.join("big"), vec![b'x'; FILE_BYTES as usize + 1]).unwrap();

        let f = Folder::open(d).unwrap();
        assert_eq!(f.text("problems").unwrap(), "3\tsomething\n");
        assert_eq!(f.read("absent").unwrap(), None);
        let link = f.read("services").unwrap_err();
        assert!(link.contains("symbolic link") && !link.contains("host content"), "{link}");
        assert!(f.read("lasterr").unwrap_err().contains("not a regular file"));
        assert!(f.read("big").unwrap_err().contains("larger than 1024 KiB"));
        assert!(f.read("serve.a").unwrap_err().contains("not a regular file"));
        assert!(f.folder("serve.a").is_ok());
        assert!(f.folder("serve.b").unwrap_err().contains("symbolic link"));
        assert!(f.read("../secret").unwrap_err().contains("not a name"));
        assert!(f.names().contains(&"serve.b".to_string()));
        assert!(Folder::open(&d.join("services")).is_err(), "the folder itself is not followed either");
    }
}
