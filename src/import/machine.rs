//! Machine facts: the output of commands a launcher reads off the machine it
//! runs on (`$(hostname)`, `$(rocm-smi --showfw | ...)`, `$(df -BG
//! --output=avail /dev/shm | ...)`, `$(nvidia-smi -L)`).
//!
//! In the sandbox these commands are recorders (sandbox/prelude.sh): when
//! their output is read, the recorder prints the fact it was given, or notes
//! the command as needed and fails the point. The importer then resolves each
//! needed command once ([`Facts::resolve`]):
//!
//! 1. a value given on the command line, `--machine-fact 'CMD=OUTPUT'`
//!    (`CMD` exactly as the launcher wrote it, arguments included; `\n` in
//!    `OUTPUT` is a line break);
//! 2. else, when this machine is the kind the recipe is for ([`Target`]:
//!    the entry's runner is a CPU one, or one of this host's GPUs is the
//!    runner's), the command itself, run on this machine outside the
//!    sandbox, when it only reads ([`reads_only`]: `hostname` without a new name,
//!    `rocm-smi --show...`, `amd-smi static|metric|list|...`, `nvidia-smi
//!    -L|-q|--query-...`, `df`, `nproc`, `free`, `lscpu`, `rocminfo`, `ibstat`,
//!    `ibv_devinfo`, `numactl --hardware`) and answers (exit 0 within
//!    [`RUN_LIMIT`] with some output: `rocm-smi` on a machine without the
//!    amdgpu driver exits 0 having printed nothing, which is no answer);
//! 3. else the import stops (exit 2) naming the command, its line and the
//!    flag. A read that would answer here is still refused when the recipe
//!    is for other hardware (importing an MI355X entry on a laptop): the
//!    laptop's free `/dev/shm` is no fact about an MI355X node.
//!
//! and evaluates the points again with the facts. Every fact a point used is
//! written into the recipe's notes with the command, its output and where it
//! came from: a recipe imported on an MI355X node records that node's MEC
//! firmware, and says so.
//!
//! Files are machine facts too: what a launcher reads under a
//! [`MACHINE_FILE_ROOTS`] folder (the Kimi-K3 B300 agentic launcher picks
//! its Mooncake RDMA rail with `grep -q ACTIVE
//! /sys/class/infiniband/mlx5_N/ports/1/state`). The sandbox's `/sys` holds
//! only the file facts known so far; a text tool (`cat`, `grep`, `head`,
//! ...) given a path there that is not among them notes the path as needed
//! and stops the launcher at that read, so the facts are asked for one at a
//! time in the order the launcher reads them (a loop over rails stops at
//! the first active one). A file fact is resolved as a command is: the
//! content given with `--machine-fact 'PATH=CONTENT'`, else the file read
//! on this machine ([`Source::Read`]), else exit 2 naming the path and the
//! flag. Globs and `[ -e PATH ]` tests are bash's own and see only the known
//! facts; a file read must exist (absence is not a fact).

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long a machine command may take.
pub const RUN_LIMIT: Duration = Duration::from_secs(10);

/// The commands whose output the sandbox treats as a machine fact.
pub const MACHINE_COMMANDS: [&str; 13] = [
    "hostname", "nvidia-smi", "amd-smi", "rocm-smi", "rocminfo", "df", "nproc", "free", "lscpu", "ibstat",
    "ibv_devinfo", "numactl", "ibdev2netdev",
];

/// The folders whose files are machine facts (a path in a launcher that
/// starts with one of them, as the sandbox's prelude.sh matches it).
pub const MACHINE_FILE_ROOTS: [&str; 1] = ["/sys/"];

/// Whether the fact `key` is a file (an absolute path under a
/// [`MACHINE_FILE_ROOTS`] folder) rather than a command line.
pub fn is_file_fact(key: &str) -> bool {
    MACHINE_FILE_ROOTS.iter().any(|root| key.starts_with(root))
}

/// Where a fact's value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// `--machine-fact` on the command line.
    Given,
    /// The command ran on this machine.
    Ran,
    /// The file was read on this machine.
    Read,
}

/// A resolved fact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fact {
    pub output: String,
    pub source: Source,
}

/// Whether this machine is the kind a recipe is for, so that what it
/// answers is a fact about the recipe's machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// This machine: commands run and files are read here.
    Here,
    /// Another machine (the reason, for the message): nothing is run or
    /// read here; every fact must be given.
    Elsewhere(String),
}

/// How an AMD GPU shows in a host's GPU names: the KFD topology names the
/// ISA, not the product (AMD's LLVM AMDGPU processor table: gfx942 is the
/// MI300X and MI325X, gfx950 the MI350X and MI355X). NVIDIA's driver names
/// the product (`NVIDIA H200`).
const AMD_ISA: [(&str, &str); 5] = [("mi300x", "gfx942"), ("mi300a", "gfx942"), ("mi325x", "gfx942"), ("mi350x", "gfx950"), ("mi355x", "gfx950")];

impl Target {
    /// Judges `runner` (an InferenceX runner name: `mi355x`, `h200`,
    /// `b200-dgxc`, `cluster:b200-demo`, `cpu`) against this host's GPU
    /// names (`host_gpus`, as [`crate::report::host::Host`] reads them).
    /// No runner, or a CPU one: here (its facts are this kind of machine's).
    pub fn of(runner: Option<&str>, host_gpus: &[String]) -> Target {
        let Some(runner) = runner else { return Target::Here };
        let name = runner.rsplit(':').next().unwrap_or(runner).to_lowercase();
        let gpu = name.split(['-', '_']).next().unwrap_or(&name).to_string();
        if gpu == "cpu" {
            return Target::Here;
        }
        let isa = AMD_ISA.iter().find(|(g, _)| *g == gpu).map(|(_, isa)| *isa);
        let matches = |n: &String| {
            let n = n.to_lowercase().replace(' ', "");
            n.contains(&gpu) || isa.is_some_and(|isa| n.contains(isa))
        };
        if host_gpus.iter().any(matches) {
            return Target::Here;
        }
        let has = if host_gpus.is_empty() { "no GPU".to_string() } else { host_gpus.join(", ") };
        Target::Elsewhere(format!("the recipe is for {runner} and this machine is not one (it has {has})"))
    }
}

/// The facts of one import: those given, and those resolved so far.
#[derive(Debug, Clone)]
pub struct Facts {
    /// `--machine-fact` strings, `CMD=OUTPUT`, as given.
    given: Vec<String>,
    /// Whether facts not given may be read on this machine.
    target: Target,
    /// Resolved facts by command line.
    pub known: BTreeMap<String, Fact>,
}

impl Facts {
    /// Facts from `--machine-fact` values (each `CMD=OUTPUT`) for a recipe
    /// whose machine is `target`.
    ///
    /// Errors: a value without `=` (the message shows the right shape).
    pub fn new(given: &[String], target: Target) -> Result<Facts, String> {
        if let Some(bad) = given.iter().find(|g| !g.contains('=')) {
            return Err(format!(
                "--machine-fact {bad:?}: give the command and its output, e.g. --machine-fact 'rocm-smi --showfw=MEC firmware version: 177', or a file and its content, e.g. --machine-fact '/sys/class/infiniband/mlx5_0/ports/1/state=4: ACTIVE'"
            ));
        }
        Ok(Facts { given: given.to_vec(), target, known: BTreeMap::new() })
    }

    /// The output of command line `cmd`, or the content of file `cmd` when
    /// it is a path ([`is_file_fact`]): given, else run or read here (see
    /// the module overview); cached for the rest of the import.
    ///
    /// Errors: why it has no value on this machine (not the recipe's kind
    /// of machine; not installed, refused as not read-only, failed, too
    /// slow; a file that is not here).
    pub fn resolve(&mut self, cmd: &str) -> Result<&Fact, String> {
        if !self.known.contains_key(cmd) {
            let fact = match (self.given_value(cmd), &self.target) {
                (Some(output), _) => Fact { output, source: Source::Given },
                (None, Target::Elsewhere(why)) => return Err(format!("is not read on this machine: {why}")),
                (None, Target::Here) => match () {
                    _ if is_file_fact(cmd) => Fact { output: read_here(cmd)?, source: Source::Read },
                    _ => Fact { output: run_here(cmd)?, source: Source::Ran },
                },
            };
            self.known.insert(cmd.to_string(), fact);
        }
        Ok(&self.known[cmd])
    }

    /// The value given for `cmd`: the first `CMD=OUTPUT` whose `CMD` is
    /// exactly `cmd` (matched against the command, so a command holding `=`,
    /// `df --output=avail`, still splits right).
    fn given_value(&self, cmd: &str) -> Option<String> {
        self.given
            .iter()
            .filter_map(|g| g.strip_prefix(cmd)?.strip_prefix('='))
            .next()
            .map(|v| v.replace("\\n", "\n"))
    }

    /// `--machine-fact` values that matched no command a launcher read.
    pub fn unused_given(&self) -> Vec<&str> {
        self.given
            .iter()
            .filter(|g| !self.known.iter().any(|(c, f)| f.source == Source::Given && g.starts_with(&format!("{c}="))))
            .map(String::as_str)
            .collect()
    }
}

/// Whether running `argv` only reads the machine (never sets, resets or
/// starts anything); commands outside this list are never run.
pub fn reads_only(argv: &[&str]) -> bool {
    let Some((&cmd, args)) = argv.split_first() else { return false };
    let all = |ok: &dyn Fn(&str) -> bool| args.iter().all(|a| ok(a));
    match cmd {
        // `hostname NAME` sets the name.
        "hostname" => all(&|a| {
            matches!(a, "-s" | "--short" | "-f" | "--fqdn" | "--long" | "-i" | "--ip-address" | "-I" | "--all-ip-addresses" | "-d" | "--domain" | "-A" | "--all-fqdns")
        }),
        "df" | "nproc" | "free" | "lscpu" | "rocminfo" | "ibstat" | "ibv_devinfo" | "ibdev2netdev" => true,
        "numactl" => all(&|a| matches!(a, "-H" | "--hardware" | "-s" | "--show")),
        "rocm-smi" => all(&|a| a.starts_with("--show") || matches!(a, "--json" | "--csv" | "-i" | "-d" | "--alldevices") || a.chars().all(|c| c.is_ascii_digit())),
        "amd-smi" => args.first().is_none_or(|sub| {
            matches!(*sub, "list" | "static" | "metric" | "firmware" | "ucode" | "version" | "process" | "topology" | "xgmi" | "bad-pages")
        }),
        "nvidia-smi" => all(&|a| {
            matches!(a, "-L" | "--list-gpus" | "-q" | "--query" | "topo" | "-m" | "--matrix" | "-i" | "-d")
                || a.starts_with("--query-")
                || a.starts_with("--format=")
                || a.starts_with("--id=")
                || a.starts_with("--display=")
                || (!a.starts_with('-') && a.chars().all(|c| c.is_ascii_alphanumeric() || ",_".contains(c)))
        }),
        _ => false,
    }
}

/// Runs `cmd` here (its words split at spaces: the recorder joined the
/// launcher's arguments with spaces), read-only commands only; its standard
/// output.
fn run_here(cmd: &str) -> Result<String, String> {
    let argv: Vec<&str> = cmd.split_whitespace().collect();
    if !MACHINE_COMMANDS.contains(&argv.first().copied().unwrap_or("")) || !reads_only(&argv) {
        return Err("is not run by the importer (not a read-only machine query)".into());
    }
    let mut child = Command::new(argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| if e.kind() == std::io::ErrorKind::NotFound { "is not installed".to_string() } else { format!("did not start: {e}") })?;
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if started.elapsed() > RUN_LIMIT => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("did not answer within {} s", RUN_LIMIT.as_secs()));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("could not be waited for: {e}")),
        }
    }
    let out = child.wait_with_output().map_err(|e| format!("output unreadable: {e}"))?;
    if !out.status.success() {
        return Err(format!("failed ({})", out.status));
    }
    if out.stdout.iter().all(u8::is_ascii_whitespace) {
        return Err("printed nothing (no such device here?)".into());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The content of machine file `path` on this machine.
///
/// Errors: not a machine file, absent here, a folder, unreadable.
fn read_here(path: &str) -> Result<String, String> {
    if !is_file_fact(path) || path.split('/').any(|c| c == "..") {
        return Err(format!("is not a machine file (only files under {} are read)", MACHINE_FILE_ROOTS.join(", ")));
    }
    let p = std::path::Path::new(path);
    if p.is_dir() {
        return Err("is a folder here (only a file's content is a fact)".into());
    }
    std::fs::read_to_string(p).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => "does not exist on this machine".to_string(),
        _ => format!("cannot be read here: {e}"),
    })
}

/// The file name of `cmd`'s fact in the sandbox: its bytes in hex (what
/// prelude.sh computes with `od`).
pub fn fact_file_name(cmd: &str) -> String {
    cmd.bytes().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_reads_are_run() {
        for ok in [
            &["hostname"][..],
            &["hostname", "-s"],
            &["rocm-smi", "--showfw"],
            &["rocm-smi", "--showproductname", "--json"],
            &["amd-smi", "static", "--gpu", "0"],
            &["nvidia-smi", "-L"],
            &["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
            &["df", "-BG", "--output=avail", "/dev/shm"],
            &["numactl", "--hardware"],
        ] {
            assert!(reads_only(ok), "{ok:?}");
        }
        for bad in [
            &["hostname", "newname"][..],
            &["rocm-smi", "--setperfdeterminism", "1900"],
            &["amd-smi", "reset", "-G"],
            &["nvidia-smi", "-pm", "1"],
            &["nvidia-smi", "-r"],
            &["numactl", "--cpunodebind=0", "true"],
            &["rm", "-rf", "/"],
        ] {
            assert!(!reads_only(bad), "{bad:?}");
        }
    }

    #[test]
    fn given_facts_win_and_commands_with_equals_split_right() {
        let mut f = Facts::new(&["rocm-smi --showfw=MEC firmware version: 177".into(), "df -BG --output=avail /dev/shm=Avail\\n 100G".into()], Target::Here).unwrap();
        assert_eq!(f.resolve("rocm-smi --showfw").unwrap().output, "MEC firmware version: 177");
        let df = f.resolve("df -BG --output=avail /dev/shm").unwrap();
        assert_eq!((df.output.as_str(), &df.source), ("Avail\n 100G", &Source::Given));
        assert!(f.unused_given().is_empty());
        assert!(Facts::new(&["hostname".into()], Target::Here).unwrap_err().contains("--machine-fact 'rocm-smi --showfw="));
        // Not a machine query: never run.
        let mut f = Facts::new(&[], Target::Here).unwrap();
        assert!(f.resolve("curl example.com").unwrap_err().contains("not a read-only machine query"));
        // `nproc` answers on every Linux machine.
        let n = f.resolve("nproc").unwrap();
        assert_eq!(n.source, Source::Ran);
        assert!(n.output.trim().parse::<u32>().unwrap() >= 1);
        assert_eq!(fact_file_name("df -h"), "6466202d68");
    }

    #[test]
    fn facts_of_another_machine_are_not_read_here() {
        // An MI355X entry imported on a machine without one: this machine's
        // free /dev/shm is no fact about the MI355X node; it must be given.
        let none: Vec<String> = Vec::new();
        let target = Target::of(Some("mi355x"), &none);
        let Target::Elsewhere(why) = &target else { panic!("{target:?}") };
        assert_eq!(why, "the recipe is for mi355x and this machine is not one (it has no GPU)");
        let df = "df -BG --output=avail /dev/shm";
        let mut f = Facts::new(&[], target.clone()).unwrap();
        assert_eq!(f.resolve(df).unwrap_err(), format!("is not read on this machine: {why}"));
        assert!(f.resolve("/sys/class/net/lo/operstate").unwrap_err().starts_with("is not read on this machine"), "files neither");
        let mut f = Facts::new(&[format!("{df}=Avail\\n 3000G")], target).unwrap();
        assert_eq!(f.resolve(df).unwrap().output, "Avail\n 3000G", "a given fact still answers");
        // On the target itself (KFD names an MI355X gfx950; NVIDIA names the product), or for a CPU runner: read here.
        for (runner, gpus) in [("mi355x", vec!["gfx950"]), ("h200-dgxc", vec!["NVIDIA H200"]), ("cluster:b200-demo", vec!["NVIDIA B200"]), ("cpu", vec![])] {
            let gpus: Vec<String> = gpus.into_iter().map(String::from).collect();
            assert_eq!(Target::of(Some(runner), &gpus), Target::Here, "{runner} on {gpus:?}");
        }
        assert!(matches!(Target::of(Some("mi355x"), &["gfx942".to_string()]), Target::Elsewhere(_)), "an MI300X is not an MI355X");
        assert!(matches!(Target::of(Some("h200"), &["NVIDIA B200".to_string()]), Target::Elsewhere(_)));
        let mut f = Facts::new(&[], Target::Here).unwrap();
        assert_eq!(f.resolve("nproc").unwrap().source, Source::Ran);
    }

    #[test]
    fn files_under_sys_are_facts_given_or_read_here() {
        let state = "/sys/class/infiniband/mlx5_0/ports/1/state";
        assert!(is_file_fact(state) && !is_file_fact("hostname") && !is_file_fact("/etc/passwd"));
        let mut f = Facts::new(&[format!("{state}=4: ACTIVE")], Target::Here).unwrap();
        let given = f.resolve(state).unwrap();
        assert_eq!((given.output.as_str(), &given.source), ("4: ACTIVE", &Source::Given));
        // Read on this machine: a /sys file every Linux machine has.
        let lo = f.resolve("/sys/class/net/lo/operstate").unwrap();
        assert_eq!(lo.source, Source::Read);
        assert_eq!(lo.output, std::fs::read_to_string("/sys/class/net/lo/operstate").unwrap());
        // Absent here (no RDMA device on a test machine), a folder, a way out of /sys.
        let missing = "/sys/class/infiniband/mlx5_99/ports/1/state";
        assert!(f.resolve(missing).unwrap_err().contains("does not exist on this machine"));
        assert!(f.resolve("/sys/class/net").unwrap_err().contains("is a folder"));
        assert!(f.resolve("/sys/../etc/hostname").unwrap_err().contains("not a machine file"));
    }
}
