//! The import sandbox against hostile launchers (issue 47), on
//! tests/fixtures/hostile-checkout copied into a temporary git repository:
//! one test per attack, run as `import inferencex` runs them (as root in
//! CI). Each checks that nothing outside the sandbox changed (the
//! checkout's files and its .git/config, the planted host file, /usr, the
//! kernel's core pattern), that no host content reached the output (a
//! planted secret never appears), and that the import ended within its
//! limits.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use crate::util::{command, repo, text};

/// A copy of the hostile checkout, made a git repository, beside a planted
/// host file, with what the host looked like before.
struct Hostile {
    _dir: tempfile::TempDir,
    dir: PathBuf,
    root: PathBuf,
    secret: PathBuf,
    secret_text: String,
    /// A host path an escaped command would create.
    marker: PathBuf,
    before: BTreeMap<PathBuf, Vec<u8>>,
    /// The kernel's core pattern (a sysctl a uid 0 could write from /proc/sys).
    core_pattern: String,
}

/// Where the remount launcher tries to plant a file outside the checkout.
const USR_PLANTED: &str = "/usr/local/share/enginebench-planted";

impl Hostile {
    fn new() -> Hostile {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().canonicalize().unwrap();
        let secret = dir.join("secret.txt");
        let secret_text = format!("enginebench-host-secret-{}-{:?}", std::process::id(), Instant::now());
        std::fs::write(&secret, &secret_text).unwrap();
        let marker = dir.join("escaped-marker");
        let root = dir.join("checkout");
        let cp = std::process::Command::new("cp").arg("-a").arg(repo().join("tests/fixtures/hostile-checkout")).arg(&root).status().unwrap();
        assert!(cp.success());
        let launchers = root.join("benchmarks/single_node/fixed_seq_len");
        for e in std::fs::read_dir(&launchers).unwrap().flatten() {
            let t = std::fs::read_to_string(e.path()).unwrap();
            let t = t
                .replace("@SECRET_DIR@", &dir.display().to_string())
                .replace("@SECRET@", &secret.display().to_string())
                .replace("@MARKER@", &marker.display().to_string());
            std::fs::write(e.path(), t).unwrap();
        }
        let git = |args: &[&str]| {
            let s = std::process::Command::new("git").arg("-C").arg(&root).args(["-c", "user.name=t", "-c", "user.email=t@example.com"]).args(args).output().unwrap();
            assert!(s.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&s.stderr));
        };
        git(&["init", "-q"]);
        git(&["add", "-A"]);
        git(&["commit", "-q", "-m", "hostile fixture"]);
        let core_pattern = std::fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap();
        let mut h = Hostile { _dir: tmp, dir, root, secret, secret_text, marker, before: BTreeMap::new(), core_pattern };
        h.before = h.snapshot();
        h
    }

    /// Every file under the folder (the checkout with its .git, and the
    /// secret): content, or a link's target.
    fn snapshot(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        fn walk(p: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
            let meta = std::fs::symlink_metadata(p).unwrap();
            if meta.file_type().is_symlink() {
                out.insert(p.to_path_buf(), std::fs::read_link(p).unwrap().into_os_string().into_encoded_bytes());
            } else if meta.is_dir() {
                for e in std::fs::read_dir(p).unwrap().flatten() {
                    walk(&e.path(), out);
                }
            } else {
                out.insert(p.to_path_buf(), std::fs::read(p).unwrap());
            }
        }
        let mut out = BTreeMap::new();
        walk(&self.dir, &mut out);
        out
    }

    /// `import inferencex --inferencex-checkout ROOT --key KEY ARGS -o FILE`:
    /// its output, log (with the recipe, when written) and wall time.
    fn import(&self, key: &str, args: &[&str]) -> (Output, String, Duration) {
        let recipe = self.dir.join(format!("{key}.toml"));
        let mut a = vec!["import", "inferencex", "--inferencex-checkout", self.root.to_str().unwrap(), "--key", key];
        a.extend_from_slice(args);
        a.extend(["-o", recipe.to_str().unwrap()]);
        let started = Instant::now();
        let out = command(&a).output().unwrap();
        let took = started.elapsed();
        let mut log = text(&out);
        if let Ok(r) = std::fs::read_to_string(&recipe) {
            log.push_str(&r);
            std::fs::remove_file(&recipe).unwrap();
        }
        eprintln!("{key}: {:.1} s, exit {:?}", took.as_secs_f64(), out.status.code());
        (out, log, took)
    }

    /// Nothing outside the sandbox changed, and the log holds no host content.
    fn assert_untouched(&self, log: &str) {
        assert!(!log.contains(&self.secret_text), "host content reached the output:\n{log}");
        let after = self.snapshot();
        let changed: Vec<&PathBuf> = after.keys().chain(self.before.keys()).filter(|p| after.get(*p) != self.before.get(*p)).collect();
        assert!(changed.is_empty(), "changed outside the sandbox: {changed:?}");
        assert!(!Path::new(USR_PLANTED).exists(), "{USR_PLANTED} was written");
        assert!(!self.marker.exists(), "a command ran on the host");
        assert_eq!(std::fs::read_to_string(&self.secret).unwrap(), self.secret_text);
        assert_eq!(std::fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap(), self.core_pattern, "the host's core pattern changed");
    }
}

/// Each write of the remount launcher failed: refused by the read-only
/// mount, or first by the file's owner (root's, not the sandbox's uid).
/// /proc/sys is hidden (it is not there to write).
fn assert_remount_writes_refused(log: &str) {
    let refused = ["Read-only file system", "Permission denied"];
    for (line, path, whys) in [
        (8, "/inferencex/PLANTED", &refused[..]),
        (9, USR_PLANTED, &refused[..]),
        (10, "/inferencex/.git/config", &refused[..]),
        (11, "/proc/sys/kernel/core_pattern", &["No such file or directory"][..]),
    ] {
        let found = whys.iter().any(|why| log.contains(&format!("line {line}: bash (remount_fp32_cpu_vllm.sh): {path}: {why}")));
        assert!(found, "line {line} ({path}) not refused:\n{log}");
    }
}

/// A remount of the read-only binds fails (no capability, not uid 0
/// inside): the checkout, its .git/config (a `core.fsmonitor` command the
/// host's next `git status` would run), /usr and the kernel's core pattern
/// (/proc/sys is hidden) stay as they were.
#[test]
fn a_remount_cannot_make_the_binds_writable() {
    let h = Hostile::new();
    let (out, log, took) = h.import("remount-fp32-cpu-vllm", &[]);
    assert_eq!(out.status.code(), Some(2), "{log}");
    assert_remount_writes_refused(&log);
    h.assert_untouched(&log);
    // The host's git runs nothing the launcher wrote.
    let status = std::process::Command::new("git").arg("-C").arg(&h.root).arg("status").output().unwrap();
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    assert!(!h.marker.exists(), "git status ran the launcher's command");
    assert!(took < Duration::from_secs(20), "{took:?}");
}

/// Record files made links to a host file (and a record folder made a link
/// to a host folder) are refused by name, never read through.
#[test]
fn record_files_linked_to_host_files_are_not_followed() {
    let h = Hostile::new();
    let (out, log, took) = h.import("reclinks-fp32-cpu-vllm", &[]);
    assert_eq!(out.status.code(), Some(2), "{log}");
    assert!(log.contains("is a symbolic link (the launcher made it): not followed"), "{log}");
    h.assert_untouched(&log);
    assert!(took < Duration::from_secs(20), "{took:?}");
}

/// Checkout files that are links out of it (thresholds, a master config,
/// a launcher) are errors naming the link; links inside are followed.
#[test]
fn checkout_links_out_are_errors_naming_the_link() {
    let h = Hostile::new();
    let thresholds = h.root.join("utils/evals/thresholds.yaml");
    let launcher = h.root.join("benchmarks/single_node/fixed_seq_len/plain_fp32_cpu_vllm.sh");
    // Read before the master config that defines the key.
    let master = h.root.join("configs/aa-master.yaml");
    let outside = h.dir.join("outside.sh");
    std::fs::write(&outside, format!("#!/usr/bin/env bash\ncat {}\n", h.secret.display())).unwrap();
    let saved = (std::fs::read(&thresholds).unwrap(), std::fs::read(&launcher).unwrap());
    let mut took_all = Duration::ZERO;
    let cases: [(&Path, &Path); 3] = [(&thresholds, &h.secret), (&launcher, &outside), (&master, &h.secret)];
    for (link, target) in cases {
        let _ = std::fs::remove_file(link);
        std::os::unix::fs::symlink(target, link).unwrap();
        let (out, log, took) = h.import("plain-fp32-cpu-vllm", &[]);
        took_all += took;
        assert_eq!(out.status.code(), Some(2), "{log}");
        let named = format!("{}: a link that points outside", link.display());
        assert!(log.contains(&named), "{named}\n{log}");
        assert!(!log.contains(&h.secret_text), "{log}");
        std::fs::remove_file(link).unwrap();
    }
    std::fs::write(&thresholds, &saved.0).unwrap();
    std::fs::write(&launcher, &saved.1).unwrap();
    // A link that stays inside the checkout is read as its target.
    let other = h.root.join("utils/evals/thresholds-copy.yaml");
    std::fs::write(&other, &saved.0).unwrap();
    std::fs::remove_file(&thresholds).unwrap();
    std::os::unix::fs::symlink("thresholds-copy.yaml", &thresholds).unwrap();
    let (out, log, took) = h.import("plain-fp32-cpu-vllm", &[]);
    assert_eq!(out.status.code(), Some(0), "{log}");
    assert!(log.contains("thresholds = { \"gsm8k\" = 0.9 }"), "{log}");
    std::fs::remove_file(&thresholds).unwrap();
    std::fs::remove_file(&other).unwrap();
    std::fs::remove_file(&outside).unwrap();
    std::fs::write(&thresholds, &saved.0).unwrap();
    h.assert_untouched(&log);
    assert!(took_all + took < Duration::from_secs(20), "{:?}", took_all + took);
}

/// A model-prefix with `../`, or an absolute one, makes no launcher path.
#[test]
fn a_launcher_path_cannot_leave_benchmarks() {
    let h = Hostile::new();
    for (key, name) in [
        ("traversal-fp32-cpu-vllm", "\"../../../../../../../tmp/escape_fp32_cpu_vllm.sh\""),
        ("absolute-fp32-cpu-vllm", "\"/tmp/escape_fp32_cpu_vllm.sh\""),
    ] {
        let (out, log, took) = h.import(key, &[]);
        assert_eq!(out.status.code(), Some(2), "{log}");
        assert!(log.contains(&format!("the launcher name {name}")) && log.contains("is not a plain file name"), "{log}");
        h.assert_untouched(&log);
        assert!(took < Duration::from_secs(20), "{took:?}");
    }
}

/// A newline in the master config's `image:` stays inside its string: the
/// comment shows it escaped, and the recipe has no key the checkout wrote.
#[test]
fn a_newline_in_image_starts_no_recipe_line() {
    let h = Hostile::new();
    let (out, log, took) = h.import("inject-fp32-cpu-vllm", &[]);
    assert_eq!(out.status.code(), Some(0), "{log}");
    assert!(log.contains("# InferenceX ran it in image vllm-cpu:0.32.0\\nstart_timeout_s = 1.0."), "{log}");
    let toml_start = log.find("# Imported by").unwrap();
    let recipe: toml::Table = toml::from_str(&log[toml_start..]).unwrap();
    assert!(!recipe.contains_key("start_timeout_s"), "{recipe:?}");
    assert_eq!(recipe["image"].as_str(), Some("vllm-cpu:0.32.0\nstart_timeout_s = 1.0"));
    h.assert_untouched(&log);
    assert!(took < Duration::from_secs(20), "{took:?}");
}

/// 2,000 processes stop at the process limit: no uid of a sandbox ever
/// has more than 128 (watched from the host), and the import ends at the
/// launcher's time limit.
#[test]
fn two_thousand_processes_stop_at_the_process_limit() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "this test checks the uid a sandbox gets from root: run the suite as root (as CI does)");
    // Never fork 2,000 without the limit: a sandbox as root's import runs it
    // must show the process limit inside before the launcher runs at all.
    use enginebench::import::sandbox::{launch, probe};
    let found = probe::run(launch::Identity::Switched(launch::sandbox_uid())).expect("a sandbox with a uid of its own runs here");
    assert_eq!(found.get("processes").map(String::as_str), Some(launch::PROCESSES.to_string().as_str()), "no process limit inside: {found:?}");
    assert!(probe::switched().is_ok(), "import would not run as a uid of its own here: {:?}", probe::switched());
    let h = Hostile::new();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watch = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            // The most processes any one sandbox uid had at once.
            let mut most = 0usize;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let mut per_uid: BTreeMap<u32, usize> = BTreeMap::new();
                for e in std::fs::read_dir("/proc").unwrap().flatten() {
                    use std::os::unix::fs::MetadataExt;
                    if let Ok(m) = e.metadata() {
                        if m.uid() >= enginebench::import::sandbox::launch::SANDBOX_UID_BASE && e.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
                            *per_uid.entry(m.uid()).or_default() += 1;
                        }
                    }
                }
                most = most.max(per_uid.values().copied().max().unwrap_or(0));
                std::thread::sleep(Duration::from_millis(20));
            }
            most
        })
    };
    let (out, log, took) = h.import("forks-fp32-cpu-vllm", &["--launcher-timeout", "4"]);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let most = watch.join().unwrap();
    eprintln!("most processes of one sandbox uid: {most}");
    assert_eq!(out.status.code(), Some(2), "{log}");
    assert!(log.contains("the launcher did not finish within 4 s"), "{log}");
    let limit = enginebench::import::sandbox::launch::PROCESSES as usize;
    assert!(most <= limit, "{most} processes of one sandbox, limit {limit}");
    assert!(most >= limit / 2, "the launcher did not reach the limit ({most} processes): the test did not test it");
    h.assert_untouched(&log);
    assert!(took < Duration::from_secs(12), "{took:?}");
}

/// 2 GB written to each writable place stops at the sizes: 128 MiB for the
/// sandbox's root tmpfs (the working folder, /tmp, /dev/shm, /), 16 MiB
/// for the record folder. The launcher passes what each write took to
/// `vllm serve`, so the recipe shows it.
#[test]
fn two_gigabytes_stop_at_the_tmpfs_sizes() {
    let h = Hostile::new();
    let (out, log, took) = h.import("fill-fp32-cpu-vllm", &[]);
    assert_eq!(out.status.code(), Some(0), "{log}");
    let recipe: toml::Table = toml::from_str(&log[log.find("# Imported by").unwrap()..]).unwrap();
    let args: Vec<&str> = recipe["engine"]["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    let took_of = |flag: &str| -> u64 { args[args.iter().position(|a| *a == flag).unwrap_or_else(|| panic!("{flag}: {args:?}")) + 1].parse().unwrap() };
    let scratch = enginebench::import::sandbox::launch::SCRATCH_BYTES;
    let records = enginebench::import::sandbox::launch::RECORD_BYTES;
    for flag in ["--took-_workspace", "--took-_tmp", "--took-_dev_shm", "--took-"] {
        let n = took_of(flag);
        assert!(n > scratch / 2 && n <= scratch, "{flag} {n}: not stopped at {scratch}");
    }
    let n = took_of("--took-_eb_rec");
    assert!(n > records / 2 && n <= records, "record folder {n}: not stopped at {records}");
    h.assert_untouched(&log);
    assert!(took < Duration::from_secs(20), "{took:?}");
}

/// 100 MB of standard error: 1 MiB is kept, the rest read and dropped (the
/// importer's memory stays small), and the point fails saying so.
#[test]
fn a_hundred_megabytes_of_stderr_are_not_held() {
    let h = Hostile::new();
    let mut c = command(&["import", "inferencex", "--inferencex-checkout", h.root.to_str().unwrap(), "--key", "stderr-fp32-cpu-vllm"]);
    let child = c.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let started = Instant::now();
    let pid = child.id() as libc::pid_t;
    let mut stderr = child.stderr.unwrap();
    let mut log = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut log).unwrap();
    let (mut status, mut usage) = (0, unsafe { std::mem::zeroed::<libc::rusage>() });
    // SAFETY: waits for our own child, whose Child handle is not waited on.
    assert_eq!(unsafe { libc::wait4(pid, &mut status, 0, &mut usage) }, pid);
    let took = started.elapsed();
    eprintln!("stderr attack: {:.1} s, importer's peak RSS {} KiB", took.as_secs_f64(), usage.ru_maxrss);
    assert_eq!(libc::WEXITSTATUS(status), 2, "{log}");
    assert!(log.contains("the launcher wrote more than 1024 KiB to standard error"), "{log}");
    assert!(usage.ru_maxrss < 64 * 1024, "the importer held {} KiB", usage.ru_maxrss);
    h.assert_untouched(&log);
    assert!(took < Duration::from_secs(20), "{took:?}");
}

/// A launcher that never ends stops at the launcher's time limit, and the
/// entry's other points are not run; a slow one stops at the import's.
#[test]
fn endless_and_slow_launchers_stop_at_the_time_limits() {
    let h = Hostile::new();
    let (out, log, took) = h.import("spin-fp32-cpu-vllm", &["--launcher-timeout", "2"]);
    assert_eq!(out.status.code(), Some(2), "{log}");
    assert!(log.contains("conc 1: the launcher did not finish within 2 s"), "{log}");
    assert!(log.contains("conc 2: not evaluated: an earlier point ran past the launcher's time limit (--launcher-timeout)"), "{log}");
    assert!(took < Duration::from_secs(8), "{took:?}");
    // 1.5 s a point, six points, 4 s for the import.
    let (out, log, took) = h.import("slow-fp32-cpu-vllm", &["--launcher-timeout", "3", "--import-timeout", "4"]);
    assert_eq!(out.status.code(), Some(2), "{log}");
    assert!(log.contains("not evaluated: the import ran past its limit of 4 s (--import-timeout)"), "{log}");
    assert!(took < Duration::from_secs(9), "{took:?}");
    h.assert_untouched(&log);
}

/// The recorded programs' own files cannot be run by their path.
#[test]
fn programs_by_path_pass_no_recorder() {
    let h = Hostile::new();
    let (out, log, took) = h.import("bypass-fp32-cpu-vllm", &[]);
    assert_eq!(out.status.code(), Some(2), "{log}");
    let refused = |p: &str| format!("`{p}` was run by its path, which bypasses its recorder");
    assert!(log.contains(&refused("/usr/bin/python3")) || !Path::new("/usr/bin/python3").exists(), "{log}");
    assert!(log.contains(&refused("/usr/bin/curl")) || !Path::new("/usr/bin/curl").exists(), "{log}");
    assert!(!log.contains("A tree laid out like an InferenceX checkout"), "python ran:\n{log}");
    h.assert_untouched(&log);
    assert!(took < Duration::from_secs(20), "{took:?}");
}

/// As root where bubblewrap cannot run as an unprivileged uid (here a
/// `bwrap` first on PATH that refuses, as a kernel without unprivileged
/// user namespaces does, and runs the real one for root), nothing runs
/// without `--unsafe-import`; with it, the launcher runs as root without
/// capabilities, and the remount attack still changes nothing.
#[test]
fn without_unprivileged_namespaces_root_needs_unsafe_import() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "this test is about root: run the suite as root (as CI does)");
    let h = Hostile::new();
    let bin = h.dir.join("bin");
    std::fs::create_dir(&bin).unwrap();
    let real = ["/usr/bin/bwrap", "/bin/bwrap"].into_iter().find(|p| Path::new(p).exists()).expect("bubblewrap installed");
    let fake = bin.join("bwrap");
    std::fs::write(
        &fake,
        format!("#!/bin/sh\nif [ \"$(id -u)\" != 0 ]; then echo 'bwrap: setting up uid map: Permission denied' >&2; exit 1; fi\nexec {real} \"$@\"\n"),
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let run = |extra: &[&str]| {
        let mut a = vec!["import", "inferencex", "--inferencex-checkout", h.root.to_str().unwrap(), "--key", "remount-fp32-cpu-vllm"];
        a.extend_from_slice(extra);
        let out = command(&a).env("PATH", &path).output().unwrap();
        let log = text(&out);
        (out, log)
    };
    let (out, log) = run(&[]);
    assert_eq!(out.status.code(), Some(2), "{log}");
    assert!(log.contains("bwrap: setting up uid map: Permission denied") && log.contains("or give --unsafe-import"), "{log}");
    assert!(!log.contains("remount_fp32_cpu_vllm.sh"), "a launcher ran:\n{log}");
    let (out, log) = run(&["--unsafe-import"]);
    assert_eq!(out.status.code(), Some(2), "{log}");
    assert_remount_writes_refused(&log);
    std::fs::remove_dir_all(&bin).unwrap();
    h.assert_untouched(&log);
}
