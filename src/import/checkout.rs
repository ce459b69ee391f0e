//! An InferenceX checkout as a recipe source: finds the master config that
//! defines a key and, per point, the launcher InferenceX's runner scripts
//! would start (DESIGN.md, "InferenceX's runner rules"):
//! `benchmarks/single_node/fixed_seq_len/` (then its `deprecated/`), or
//! `benchmarks/single_node/agentic/` for agentic points (the workflow's
//! `SCENARIO_SUBDIR`), + `{model-prefix}_{precision}_{hw}` +
//! `_{framework}` (tried first) or the bare name (`_trt`/`_atom` for those
//! frameworks) + `_mtp` when the point's spec-decoding is mtp, `.sh`.

use std::path::{Path, PathBuf};

use super::confined;
use super::inferencex::{Imported, import_with};
use super::master_config::{Entry, keys, read_entry};
use super::sandbox::Settings;
use super::workflow::{Kind, MatrixPoint, hardware_for};

/// Folders of single-node fixed-seq-len launchers, in the order tried.
const LAUNCHER_DIRS: [&str; 3] =
    ["benchmarks/single_node/fixed_seq_len", "benchmarks/single_node/fixed_seq_len/deprecated", "benchmarks/single_node"];
/// The folder of single-node agentic launchers.
const AGENTIC_DIRS: [&str; 1] = ["benchmarks/single_node/agentic"];

/// The master configs of a checkout: `configs/*master*.yaml`, then
/// `configs/deprecated/*master*.yaml`, each folder sorted by name.
pub fn master_configs(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for dir in [root.join("configs"), root.join("configs/deprecated")] {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                let n = p.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
                n.contains("master") && (n.ends_with(".yaml") || n.ends_with(".yml"))
            })
            .collect();
        files.sort();
        out.extend(files);
    }
    out
}

/// The master config defining `key` and its entry; `root` is a real path
/// (canonical).
///
/// Errors: not a checkout (no master configs), a master config that is a
/// link out of the checkout ([`confined::read`]), or no file defines the
/// key.
pub fn find_entry(root: &Path, key: &str) -> Result<(PathBuf, Entry), String> {
    let files = master_configs(root);
    if files.is_empty() {
        return Err(format!("{}: no configs/*master*.yaml: not an InferenceX checkout?", root.display()));
    }
    for f in &files {
        let yaml = confined::read(root, f)?;
        if keys(&yaml).map_err(|e| format!("{}: {e}", f.display()))?.iter().any(|k| k == key) {
            let entry = read_entry(&yaml, key).map_err(|e| format!("{}: {e}", f.display()))?;
            return Ok((f.clone(), entry));
        }
    }
    Err(format!("no master config of {} defines {key:?} (looked in {} files under configs/)", root.display(), files.len()))
}

/// The launcher names tried for a point, in order (relative to the checkout).
///
/// Errors: the entry's fields (model prefix, precision, runner, framework)
/// make a name that is not a plain file name (`/`, a leading `.`, NUL):
/// it could leave its folder.
pub fn candidates(e: &Entry, p: &MatrixPoint) -> Result<Vec<PathBuf>, String> {
    let prefix = e.model_prefix.clone().unwrap_or_else(|| e.key.split('-').next().unwrap_or("").to_string());
    // `mi355x`, `b200-dgxc` and `cluster:mi325x` all name the hardware `mi355x`/`b200`/`mi325x`.
    let runner = e.runner.as_deref().unwrap_or("");
    let hw = runner.rsplit(':').next().unwrap_or("").split('-').next().unwrap_or("").to_string();
    let base = format!("{prefix}_{}_{hw}", e.precision.as_deref().unwrap_or(""));
    let framework = e.framework.as_deref().unwrap_or("vllm");
    let spec = if p.spec == "mtp" { "_mtp" } else { "" };
    let fw_suffix = match framework {
        "trt" => "_trt",
        "atom" => "_atom",
        _ => "",
    };
    let names = [format!("{base}_{framework}{spec}.sh"), format!("{base}{fw_suffix}{spec}.sh")];
    if let Some(bad) = names.iter().find(|n| n.contains(['/', '\0']) || n.starts_with('.')) {
        return Err(format!(
            "entry {}: the launcher name {bad:?} (from its model-prefix, precision, runner and framework) is not a plain file name",
            e.key
        ));
    }
    let dirs: &[&str] = match p.kind {
        Kind::FixedSeqLen => &LAUNCHER_DIRS,
        Kind::Agentic => &AGENTIC_DIRS,
    };
    let mut out = Vec::new();
    for dir in dirs {
        for n in &names {
            let p = Path::new(dir).join(n);
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    Ok(out)
}

/// The launcher for a point: the first candidate that exists; `root` is a
/// real path (canonical).
///
/// Errors: as [`candidates`]; no candidate exists; the launcher found (or
/// `benchmarks/`) is a link out of the checkout's `benchmarks/`
/// ([`confined::inside`]).
pub fn launcher_for(root: &Path, e: &Entry, p: &MatrixPoint) -> Result<PathBuf, String> {
    let c = candidates(e, p)?;
    let benchmarks = root.join("benchmarks");
    let benchmarks = if benchmarks.symlink_metadata().is_ok() { confined::inside(root, &benchmarks)? } else { benchmarks };
    for rel in &c {
        let path = root.join(rel);
        if std::fs::symlink_metadata(&path).is_ok() && confined::inside(&benchmarks, &path)?.is_file() {
            return Ok(rel.clone());
        }
    }
    Err(format!(
        "no launcher for entry {} (spec-decoding {}): tried {}",
        e.key,
        p.spec,
        c.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
    ))
}

/// Imports `key` of the checkout at `root`: a master-config entry (a
/// single-node one, whose launcher runs in the sandbox as `settings` say),
/// else a multi-node srt-slurm recipe by its `name:` or path
/// ([`super::srt_slurm`]). Returns the file the recipe came from (the
/// master config or the YAML recipe).
///
/// Errors: as [`find_entry`], [`launcher_for`] and the imports; a
/// multi-node master-config entry names its srt-slurm recipes.
pub fn import_key(
    root: &Path,
    key: &str,
    scenario: Option<&str>,
    machine_facts: &[String],
    settings: &Settings,
) -> Result<(PathBuf, Imported), String> {
    let root = root.canonicalize().map_err(|e| format!("InferenceX checkout {}: {e}", root.display()))?;
    let (master, entry) = match find_entry(&root, key) {
        Ok(found) => found,
        Err(not_an_entry) => match super::srt_slurm::find(&root, key)? {
            Some(r) => {
                let evals = super::render::CheckoutEvals::beside(&root.join("configs/x-master.yaml"), &root)?;
                let imported = super::srt_slurm::import(&r, &master_configs(&root), &evals)?;
                return Ok((root.join(&r.path), imported));
            }
            None => return Err(format!("{not_an_entry}, and no srt-slurm recipe under {} has this name or path", super::srt_slurm::RECIPES_DIR)),
        },
    };
    if entry.framework.as_deref().is_some_and(|f| f != "vllm" && f != "dynamo-vllm") || (entry.framework.as_deref() == Some("dynamo-vllm") && !entry.multinode) {
        return Err(format!("entry {key} runs framework {:?}: only vllm entries can be imported", entry.framework.as_deref().unwrap_or("")));
    }
    if entry.multinode {
        let yaml = confined::read(&root, &master)?;
        let files = config_files(&yaml, key);
        return Err(format!(
            "entry {key} is multi-node: its engines are srt-slurm recipes; import one with --key NAME or --key PATH{}",
            if files.is_empty() { String::new() } else { format!(" ({})", files.join(", ")) }
        ));
    }
    let hardware = hardware_for(&master, &entry, &root)?;
    let evals = super::render::CheckoutEvals::beside(&master, &root)?;
    let imported = import_with(&root, &|p| launcher_for(&root, &entry, p), &entry, scenario, hardware, &evals, machine_facts, settings)?;
    Ok((master, imported))
}

/// The srt-slurm recipe files a master-config entry names
/// (`CONFIG_FILE=recipes/vllm/...` in its search space), as paths under the
/// checkout.
fn config_files(yaml: &str, key: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let Some(at) = yaml.find(&format!("\n{key}:")) else { return out };
    let rest = &yaml[at + 1..];
    let end = rest[key.len() + 1..].find("\n\n\n").map_or(rest.len(), |e| e + key.len() + 1);
    for line in rest[..end].lines() {
        if let Some(f) = line.split("CONFIG_FILE=recipes/vllm/").nth(1) {
            let f = format!("{}/{}", super::srt_slurm::RECIPES_DIR, f.trim_end_matches(['"', '\'']));
            if !out.contains(&f) {
                out.push(f);
            }
        }
    }
    out
}

/// An imported checkout entry, written where `run`, `recipe show` and
/// `recipe check` read recipes.
pub struct Prepared {
    /// The recipe file (under the system temp folder; `import` writes a
    /// permanent one).
    pub recipe: PathBuf,
    /// The jobs to run unless some are picked: `base` and the variants.
    pub variants: Vec<String>,
}

/// `--inferencex-checkout DIR --key KEY [--scenario S] [--machine-fact
/// 'CMD=OUTPUT' ...]` (and the sandbox's `settings`): imports the entry,
/// prints the resolved plan (jobs, launcher lines, points) to stderr and
/// writes the recipe to a temp file.
///
/// Errors (usage, exit 2): as [`import_key`]; the file cannot be written.
pub fn prepare(root: &Path, key: &str, scenario: Option<&str>, machine_facts: &[String], settings: &Settings) -> anyhow::Result<Prepared> {
    let (master, imported) = import_key(root, key, scenario, machine_facts, settings).map_err(crate::error::usage)?;
    let dir = std::env::temp_dir().join("enginebench-inferencex");
    std::fs::create_dir_all(&dir).map_err(|e| crate::error::usage(format!("cannot make {}: {e}", dir.display())))?;
    let file = dir.join(format!("{key}{}.toml", scenario.map(|s| format!("-{s}")).unwrap_or_default()));
    std::fs::write(&file, &imported.toml).map_err(|e| crate::error::usage(format!("cannot write {}: {e}", file.display())))?;
    // What the checkout and its launchers wrote, with control characters escaped.
    let say = |line: String| errln!("{}", super::render::printable(&line));
    say(format!("InferenceX entry {key} ({}): {} job(s)", master.display(), imported.jobs.len()));
    for (i, j) in imported.jobs.iter().enumerate() {
        let concs: Vec<String> = j.points.iter().map(|p| format!("{}:{}", p.scenario(), p.conc)).collect();
        say(format!(
            "  {} ({}): {} line {}; model {}; {} point(s) [{}]",
            j.name,
            if i == 0 { "base" } else { "variant" },
            j.launcher.display(),
            j.line,
            j.engine.model,
            j.points.len(),
            concs.join(" ")
        ));
        say(format!("    vllm serve {} {}", j.engine.model, shell_words::join(&j.engine.args)));
        for (k, v) in &j.engine.env {
            say(format!("    env {k}={v}"));
        }
        // A P/D job: what each side adds to the shared flags and environment.
        for (side, role) in j.roles.as_ref().and_then(|r| r.pair().ok()).into_iter().flatten() {
            let layout = role.layout.clone().unwrap_or_default();
            say(format!("    {side} ({} worker(s) of {} node(s)): + {}", layout.workers, layout.nodes, shell_words::join(&role.args)));
            for (k, v) in &role.env {
                say(format!("      env {k}={v}"));
            }
        }
    }
    for n in &imported.notes {
        say(format!("  note: {n}"));
    }
    errln!("  recipe: {}", file.display());
    // Every job runs, data-parallel ones too (one worker per DP rank).
    let variants = imported.jobs.iter().enumerate().map(|(i, j)| if i == 0 { "base".to_string() } else { j.name.clone() }).collect();
    Ok(Prepared { recipe: file, variants })
}
