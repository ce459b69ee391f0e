//! InferenceX's multi-node vLLM recipes: srt-slurm YAML under
//! `benchmarks/multi_node/srt-slurm-recipes/vllm/` (read, never run), as
//! recipes with a `[layout]` (docs/multi-node.md).
//!
//! What a file holds (srt-slurm's schema, `srtctl` backends/vllm.py):
//! - `backend.vllm_config.aggregated`: `vllm serve` keys. srt-slurm turns
//!   them into flags in key order (`_config_to_cli_args`: `_` to `-`, `true`
//!   a switch, `false` and null left out, a list its items); here they go
//!   through vLLM's serve parser as every recipe's flags do. Keys srt-slurm
//!   derives from the allocation (`--nnodes`, `--node-rank`,
//!   `--master-addr`, `--headless`, `--host`, `--port`, the DP placement
//!   flags) and Dynamo's own (`dyn-*`, `connector`) are not engine flags:
//!   named in the notes.
//! - `environment` (every worker's), then `backend.aggregated_environment`:
//!   the engine's environment.
//! - `resources`: `gpu_type`, `gpus_per_node`, `agg_nodes`, `agg_workers`,
//!   `gpus_per_agg`: the recipe's `[layout]` and hardware.
//! - `benchmark`: `type: custom` running `agentic_srt.sh` (AIPerf's trace
//!   replay: its `env` settings, the concurrencies of the master-config
//!   entry whose `CONFIG_FILE=recipes/vllm/<path>` names the file), or
//!   `type: sa-bench` (ISL/OSL, `concurrencies` "1x4x8", chat template,
//!   InferenceX's client defaults: range ratio 0.8, 10 prompts and 2
//!   warm-ups per concurrency, `srtctl` benchmarks/sa_bench.py).
//! - `frontend` (a Dynamo router, vLLM's router), `dynamo`, `infra`
//!   (etcd/NATS), `backend.kv_events_config`, `mooncake_kv_store`: servers
//!   beside the engine, recorded in the notes, not run.
//!
//! Prefill/decode files (`vllm_config.prefill`/`.decode`, issue 44) become
//! P/D recipes (docs/pd.md): each side's keys its `[roles.<side>] args`
//! (the keys both sides give alike, but the KV connector's config, the
//! shared `[engine] args`), `environment` and `backend.<side>_environment`
//! each side's env (what both see alike the shared `[env]`), `resources`
//! (`<side>_nodes`, `<side>_workers`, `gpus_per_<side>`, `gpus_per_node`)
//! each side's `layout`; the router between the sides, srt-slurm's node
//! packing and a MultiConnector's Mooncake store are named in the notes.
//!
//! A file is named by its `name:` or its path; only files whose real path
//! is inside the checkout are read (issue 47's rule).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use yaml_rust2::{Yaml, YamlLoader};

use super::client::{self, Client, Prompts};
use super::confined;
use super::inferencex::Imported;
use super::job::{Bench, Engine, Job, Service};
use super::master_config::Entry;
use super::sandbox::Call;
use super::workflow::{Kind, MatrixPoint, AGENTIC_DURATION_S};
use crate::recipe::layout::NodeLayout;
use crate::recipe::roles::{PdRole, Role, Roles};

/// Where the recipes live in a checkout.
pub const RECIPES_DIR: &str = "benchmarks/multi_node/srt-slurm-recipes/vllm";
/// The prefix InferenceX's master configs give them (`CONFIG_FILE=`).
const CONFIG_FILE_PREFIX: &str = "recipes/vllm/";

/// Flags srt-slurm sets from the allocation itself (it strips a recipe's):
/// where the engine's processes sit, and the API server's address.
const DERIVED_FLAGS: [&str; 11] = [
    "nnodes",
    "node-rank",
    "master-addr",
    "headless",
    "host",
    "port",
    "data-parallel-size-local",
    "data-parallel-start-rank",
    "data-parallel-address",
    "data-parallel-rpc-port",
    "data-parallel-hybrid-lb",
];
/// Flags only an API server reads (a headless rank rejects them).
const SERVER_ONLY: [&str; 1] = ["api-server-count"];

/// One srt-slurm recipe file, as read.
#[derive(Debug, Clone)]
pub struct SrtRecipe {
    /// The file, relative to the checkout.
    pub path: PathBuf,
    pub name: String,
    pub doc: Yaml,
    /// Keys the file gives twice in one mapping (the last value counts).
    pub twice: Vec<String>,
}

impl SrtRecipe {
    /// Aggregated (one engine configuration) or prefill/decode.
    pub fn is_disaggregated(&self) -> bool {
        let c = &self.doc["backend"]["vllm_config"];
        !c["prefill"].is_badvalue() || !c["decode"].is_badvalue()
    }
}

/// The recipe files of a checkout (relative paths, sorted), each with its
/// real path inside the checkout.
pub fn recipe_files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.join(RECIPES_DIR)];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "yaml" || x == "yml") && inside(root, &p) {
                if let Ok(rel) = p.strip_prefix(root) {
                    out.push(rel.to_path_buf());
                }
            }
        }
    }
    out.sort();
    out
}

/// Whether `path`'s real path (symlinks resolved) is inside `root`'s
/// ([`confined::inside`]).
fn inside(root: &Path, path: &Path) -> bool {
    confined::inside(root, path).is_ok()
}

/// The first document of `text` as PyYAML reads it for srt-slurm
/// (`yaml.safe_load`): a key given twice in one mapping keeps its last
/// value (yaml-rust2's loader refuses the file), and a merge key
/// (`<<: *anchor`) brings the anchored mapping's keys in under the
/// mapping's own. Returns the document and
/// the keys that were given twice.
///
/// Errors: YAML syntax, with line and column.
pub fn load_last_key_wins(text: &str) -> Result<(Yaml, Vec<String>), String> {
    use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
    use yaml_rust2::scanner::{Marker, TScalarStyle};

    /// Builds the tree from the parser's events.
    #[derive(Default)]
    struct Tree {
        /// Open collections, with their anchor id; a mapping's pending key.
        stack: Vec<(Yaml, usize, Option<Yaml>)>,
        anchors: BTreeMap<usize, Yaml>,
        done: Option<Yaml>,
        twice: Vec<String>,
    }

    impl Tree {
        fn add(&mut self, node: Yaml, anchor: usize) {
            if anchor > 0 {
                self.anchors.insert(anchor, node.clone());
            }
            match self.stack.last_mut() {
                None => {
                    self.done.get_or_insert(node);
                }
                Some((Yaml::Array(items), _, _)) => items.push(node),
                Some((Yaml::Hash(map), _, key)) => match key.take() {
                    None => *key = Some(node),
                    Some(k) => {
                        if map.insert(k.clone(), node).is_some() {
                            self.twice.push(k.as_str().map_or_else(|| format!("{k:?}"), String::from));
                        }
                    }
                },
                Some(_) => {}
            }
        }
    }

    impl MarkedEventReceiver for Tree {
        fn on_event(&mut self, ev: Event, _: Marker) {
            match ev {
                Event::SequenceStart(anchor, _) => self.stack.push((Yaml::Array(Vec::new()), anchor, None)),
                Event::MappingStart(anchor, _) => self.stack.push((Yaml::Hash(Default::default()), anchor, None)),
                Event::SequenceEnd | Event::MappingEnd => {
                    if let Some((node, anchor, _)) = self.stack.pop() {
                        self.add(merged(node), anchor);
                    }
                }
                Event::Scalar(v, style, anchor, _) => {
                    let node = if style == TScalarStyle::Plain { Yaml::from_str(&v) } else { Yaml::String(v) };
                    self.add(node, anchor);
                }
                Event::Alias(id) => {
                    let node = self.anchors.get(&id).cloned().unwrap_or(Yaml::BadValue);
                    self.add(node, 0);
                }
                _ => {}
            }
        }
    }

    /// A mapping's merge key (`<<: *anchor`, or a list of anchors) resolved
    /// as PyYAML's `flatten_mapping` does: the merged mappings' keys first
    /// (an earlier one in a list over a later one), the mapping's own keys
    /// over them.
    fn merged(node: Yaml) -> Yaml {
        let Yaml::Hash(mut map) = node else { return node };
        let Some(sources) = map.remove(&Yaml::String("<<".into())) else { return Yaml::Hash(map) };
        let sources = match sources {
            Yaml::Array(items) => items,
            one => vec![one],
        };
        let mut out = yaml_rust2::yaml::Hash::new();
        for source in sources.iter().rev() {
            for (k, v) in source.as_hash().into_iter().flatten() {
                out.insert(k.clone(), v.clone());
            }
        }
        for (k, v) in map {
            out.insert(k, v);
        }
        Yaml::Hash(out)
    }

    let mut tree = Tree::default();
    Parser::new_from_str(text).load(&mut tree, false).map_err(|e| format!("invalid YAML: {e}"))?;
    Ok((tree.done.unwrap_or(Yaml::BadValue), tree.twice))
}

/// Reads one recipe file (`rel` under `root`).
///
/// Errors: a path outside the checkout, unreadable or invalid YAML, no `name:`.
pub fn read(root: &Path, rel: &Path) -> Result<SrtRecipe, String> {
    let text = confined::read(root, &root.join(rel))?;
    let (doc, twice) = load_last_key_wins(&text).map_err(|e| format!("{}: {e}", rel.display()))?;
    if doc.is_badvalue() {
        return Err(format!("{}: empty YAML file", rel.display()));
    }
    let name = doc["name"].as_str().map(String::from).ok_or_else(|| format!("{}: no `name:`", rel.display()))?;
    Ok(SrtRecipe { path: rel.to_path_buf(), name, doc, twice })
}

/// The recipe a `--key` names: a path (relative to the checkout, or to its
/// srt-slurm recipe folder) or a `name:`. `None` when nothing matches.
///
/// Errors: a matching file that cannot be read, or two files with the name.
pub fn find(root: &Path, key: &str) -> Result<Option<SrtRecipe>, String> {
    for candidate in [PathBuf::from(key), Path::new(RECIPES_DIR).join(key), Path::new(RECIPES_DIR).join(key.strip_prefix(CONFIG_FILE_PREFIX).unwrap_or(key))] {
        if root.join(&candidate).is_file() && (key.ends_with(".yaml") || key.ends_with(".yml")) {
            return read(root, &candidate).map(Some);
        }
    }
    let mut found: Vec<SrtRecipe> = Vec::new();
    for rel in recipe_files(root) {
        // Files another part of InferenceX broke are skipped in the search
        // (named when asked for by path).
        if let Ok(r) = read(root, &rel) {
            if r.name == key {
                found.push(r);
            }
        }
    }
    match found.len() {
        0 => Ok(None),
        1 => Ok(found.pop()),
        _ => Err(format!(
            "{key}: {} srt-slurm recipes have this name ({}); name one by its path",
            found.len(),
            found.iter().map(|r| r.path.display().to_string()).collect::<Vec<_>>().join(", ")
        )),
    }
}

/// A YAML scalar as srt-slurm writes it on a command line (`str(value)`),
/// `None` for null; a mapping or list as JSON (srt-slurm would write
/// Python's repr of it, which vLLM's JSON flags do not read).
fn scalar(y: &Yaml) -> Option<String> {
    match y {
        Yaml::String(s) | Yaml::Real(s) => Some(s.clone()),
        Yaml::Integer(i) => Some(i.to_string()),
        Yaml::Boolean(b) => Some(if *b { "True" } else { "False" }.into()),
        Yaml::Null | Yaml::BadValue => None,
        other => Some(to_json(other).to_string()),
    }
}

fn to_json(y: &Yaml) -> serde_json::Value {
    use serde_json::Value;
    match y {
        Yaml::String(s) => Value::String(s.clone()),
        Yaml::Real(s) => s.parse::<f64>().ok().and_then(serde_json::Number::from_f64).map_or(Value::String(s.clone()), Value::Number),
        Yaml::Integer(i) => Value::from(*i),
        Yaml::Boolean(b) => Value::Bool(*b),
        Yaml::Array(a) => Value::Array(a.iter().map(to_json).collect()),
        Yaml::Hash(h) => Value::Object(h.iter().filter_map(|(k, v)| k.as_str().map(|k| (k.to_string(), to_json(v)))).collect()),
        _ => Value::Null,
    }
}

/// The engine of a `vllm_config` mode: its flags (srt-slurm's order and
/// spelling) and, for the notes, what was not passed on.
pub fn flags_of(mode: &Yaml) -> Result<(Vec<String>, Vec<String>), String> {
    let Yaml::Hash(h) = mode else { return Err("vllm_config mode is not a mapping of vllm serve keys".into()) };
    let mut keys: Vec<(String, &Yaml)> = h.iter().filter_map(|(k, v)| k.as_str().map(|k| (k.replace('_', "-"), v))).collect();
    keys.sort_by(|a, b| a.0.cmp(&b.0));
    let (mut args, mut notes) = (Vec::new(), Vec::new());
    for (key, value) in keys {
        let shown = scalar(value).unwrap_or_else(|| "null".into());
        if DERIVED_FLAGS.contains(&key.as_str()) {
            notes.push(format!("--{key} {shown}: srt-slurm sets it from the allocation; enginebench places the processes itself ([layout])"));
            continue;
        }
        if SERVER_ONLY.contains(&key.as_str()) {
            notes.push(format!("--{key} {shown}: an API-server setting; the engine runs in-process"));
            continue;
        }
        if key == "connector" || key.starts_with("dyn-") {
            notes.push(format!("{key}: {shown}: a Dynamo worker setting (dynamo.vllm), not a vllm serve flag; not reproduced"));
            continue;
        }
        match value {
            Yaml::Boolean(true) => args.push(format!("--{key}")),
            Yaml::Boolean(false) => notes.push(format!("--{key}: false in the recipe: srt-slurm leaves it out (vLLM's default applies)")),
            Yaml::Null => {}
            Yaml::Array(items) => {
                args.push(format!("--{key}"));
                args.extend(items.iter().filter_map(scalar));
            }
            v => {
                if matches!(v, Yaml::Hash(_)) {
                    notes.push(format!("--{key}: a mapping in the recipe, written as JSON"));
                }
                args.push(format!("--{key}"));
                args.push(scalar(v).unwrap_or_default());
            }
        }
    }
    Ok((args, notes))
}

/// A mapping of strings (an environment), values as srt-slurm exports them.
fn env_of(y: &Yaml) -> BTreeMap<String, String> {
    y.as_hash()
        .map(|h| h.iter().filter_map(|(k, v)| Some((k.as_str()?.to_string(), scalar(v)?))).collect())
        .unwrap_or_default()
}

/// The master-config entry and search-space concurrencies that name a
/// recipe (`CONFIG_FILE=recipes/vllm/<path>`, else
/// `EVAL_CONFIG_FILE=recipes/vllm/<path>`), if one does.
struct MasterRef {
    entry: Entry,
    concs: Vec<u32>,
    /// The setting that names the recipe: `CONFIG_FILE`, or
    /// `EVAL_CONFIG_FILE` (the recipe InferenceX's multi-node launchers run
    /// in place of CONFIG_FILE when `EVAL_ONLY=true`, e.g.
    /// runners/launch_gb300-nv.sh, at the same search-space point).
    setting: &'static str,
}

fn master_ref(masters: &[PathBuf], rel_to_recipes: &str) -> Result<Option<MasterRef>, String> {
    for setting in ["CONFIG_FILE", "EVAL_CONFIG_FILE"] {
        let wanted = format!("{setting}={CONFIG_FILE_PREFIX}{rel_to_recipes}");
        for file in masters {
            let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
            if !text.contains(&wanted) {
                continue;
            }
            let docs = YamlLoader::load_from_str(&text).map_err(|e| format!("{}: invalid YAML: {e}", file.display()))?;
            let Some(top) = docs.first().and_then(Yaml::as_hash) else { continue };
            for (key, e) in top {
                let Some(key) = key.as_str() else { continue };
                let mut concs: Vec<u32> = Vec::new();
                for (_, scenario) in e["scenarios"].as_hash().into_iter().flatten() {
                    for config in scenario.as_vec().into_iter().flatten() {
                        for space in config["search-space"].as_vec().into_iter().flatten() {
                            let names =
                                space["prefill"]["additional-settings"].as_vec().into_iter().flatten().chain(space["additional-settings"].as_vec().into_iter().flatten());
                            if names.filter_map(Yaml::as_str).any(|s| s == wanted) {
                                let one = Yaml::Array(vec![space.clone()]);
                                concs.extend(super::master_config::spaces(&one).iter().flat_map(|s| s.concs()));
                            }
                        }
                    }
                }
                if !concs.is_empty() {
                    concs.sort_unstable();
                    concs.dedup();
                    let entry = super::master_config::read_entry(&text, key).map_err(|e| format!("{}: {e}", file.display()))?;
                    return Ok(Some(MasterRef { entry, concs, setting }));
                }
            }
        }
    }
    Ok(None)
}

/// For the first note: where the concurrencies came from.
fn concs_from(m: &MasterRef) -> String {
    let how = match m.setting {
        "CONFIG_FILE" => "",
        _ => " (which names it as EVAL_CONFIG_FILE: InferenceX runs it in place of the point's CONFIG_FILE in eval-only runs, EVAL_ONLY=true)",
    };
    format!("; concurrencies from master-config entry {}{how}", m.entry.key)
}

/// The engine part of a recipe file: the shared `[engine] args` and
/// `[env]`, the aggregated engine's `[layout]` or a P/D file's two sides,
/// the first note (what came from where) and the notes on what was not
/// carried.
struct Engines {
    args: Vec<String>,
    env: BTreeMap<String, String>,
    /// An aggregated file's `[layout]`.
    layout: Option<NodeLayout>,
    /// A P/D file's `[roles.prefill]` / `[roles.decode]`.
    roles: Option<Roles>,
    /// What the engine part came from, for the recipe's first note.
    summary: String,
    notes: Vec<String>,
}

/// The `vllm_config` key that configures the KV connector: each side of a
/// P/D recipe keeps its own, even when both give the same.
const KV_TRANSFER_KEY: &str = "kv-transfer-config";

/// Imports a recipe file: an aggregated one (`vllm_config.aggregated`) as a
/// recipe with a `[layout]`, a prefill/decode one (`vllm_config.prefill` /
/// `.decode`) as a P/D recipe (`[roles.prefill]` / `[roles.decode]`, each
/// with its layout); `masters`: the checkout's master configs (where its
/// concurrencies are).
///
/// Errors (naming the file and the part): no engine configuration or only
/// one side of a P/D pair, a benchmark type other than the agentic replay
/// or sa-bench, an agentic replay no master-config entry gives
/// concurrencies for, GPUs that do not add up (`gpus_per_agg` /
/// `gpus_per_prefill` / `gpus_per_decode` against TP x PP x PCP x DP), a
/// recipe that does not parse back or fails the P/D checks
/// ([`crate::recipe::roles::check_pair`], the sides' layouts).
pub fn import(r: &SrtRecipe, masters: &[PathBuf], evals: &super::render::CheckoutEvals) -> Result<Imported, String> {
    let arm = format!("{} ({})", r.name, r.path.display());
    if d_is_cpu(&r.doc) && r.doc["resources"]["gpus_per_node"].as_i64().is_some() {
        return Err(format!("{arm}: resources.gpu_type cpu with gpus_per_node: a CPU recipe counts no GPUs"));
    }
    let d = &r.doc;
    if let Some(t) = d["backend"]["type"].as_str().filter(|t| *t != "vllm") {
        return Err(format!("{arm}: backend.type {t}: only vllm recipes import"));
    }
    let engines = if r.is_disaggregated() { pd_engines(d) } else { aggregated_engine(d) }.map_err(|e| format!("{arm}: {e}"))?;
    let Engines { args, env, layout, roles, summary, notes: engine_notes } = engines;
    let mut notes = engine_notes;
    for k in &r.twice {
        notes.push(format!("{k}: given twice in one mapping of the file; the last value counts, as srt-slurm's YAML reader (PyYAML) takes it"));
    }
    let configs = &d["backend"]["vllm_config"];
    let model = d["identity"]["model"]["repo"]
        .as_str()
        .or(["aggregated", "prefill", "decode"].iter().find_map(|m| configs[*m]["served-model-name"].as_str()))
        .or(d["model"]["path"].as_str())
        .ok_or_else(|| format!("{arm}: no model (identity.model.repo, served-model-name or model.path)"))?
        .to_string();
    if d["identity"]["model"]["repo"].as_str().is_some() {
        if let Some(alias) = d["model"]["path"].as_str().filter(|a| *a != model) {
            notes.push(format!("model {model} (identity.model.repo); srt-slurm mounts it by its alias {alias:?} (model.path)"));
        }
    }
    let rel_to_recipes = r.path.strip_prefix(RECIPES_DIR).unwrap_or(&r.path).display().to_string();
    let master = master_ref(masters, &rel_to_recipes)?;
    let (bench, points) = bench_of(d, &args, master.as_ref()).map_err(|e| format!("{arm}: {e}"))?;
    notes.extend(server_notes(d, r.is_disaggregated()));
    let mut entry = master.as_ref().map(|m| m.entry.clone()).unwrap_or_default();
    entry.key = r.name.clone();
    entry.model = Some(model.clone());
    entry.image = d["identity"]["container"]["image"].as_str().or(d["model"]["container"].as_str()).map(String::from).or(entry.image);
    entry.precision = d["model"]["precision"].as_str().map(String::from).or(entry.precision);
    entry.runner = d["resources"]["gpu_type"].as_str().map(String::from).or(entry.runner);
    let job = Job {
        name: "base".into(),
        engine: Engine { model, args, env },
        bench: bench.clone(),
        launcher: r.path.clone(),
        line: 0,
        bench_line: 0,
        points,
        services: Vec::new(),
        eval_env: BTreeMap::new(),
        facts_used: Vec::new(),
        checkpoints: Vec::new(),
        roles,
    };
    let mut all_notes = vec![format!(
        "srt-slurm recipe {} ({}): {summary}{}",
        r.name,
        r.path.display(),
        master.as_ref().map(concs_from).unwrap_or_default()
    )];
    if let Bench::Agentic(rp) = &bench {
        all_notes.extend(super::render::agentic_notes(rp));
    }
    all_notes.extend(notes);
    all_notes.extend(job.notes());
    let rendered = super::render::render(&entry, std::slice::from_ref(&job), &all_notes, evals);
    // The header says where the recipe came from: a YAML file read, not a
    // launcher run (render's first three lines say the latter).
    let mut header =
        vec![format!("Imported by `enginebench import inferencex` from the srt-slurm recipe {} ({}): read, not run.", r.name, r.path.display())];
    if let Some(img) = &entry.image {
        header.push(format!("InferenceX ran it in image {img}."));
    }
    let launcher_said = |l: &str| ["# Imported by", "# the launcher ran", "# InferenceX ran it", "# job base"].iter().any(|p| l.starts_with(p));
    let mut doc = rendered.with_header(&header, launcher_said);
    if let Some(layout) = &layout {
        doc.push_data(&render_layout(layout));
    }
    super::render::verify(&doc, std::slice::from_ref(&job)).map_err(|e| format!("{arm}: {e}"))?;
    let recipe = crate::recipe::Recipe::parse(&doc.toml, "the imported recipe").map_err(|e| format!("{e:#}"))?;
    if recipe.layout != layout {
        return Err(format!("{arm}: the written recipe gives a different [layout]"));
    }
    Ok(Imported { toml: doc.toml, jobs: vec![job], notes: all_notes })
}

/// `backend.vllm_config.aggregated` with `environment` and
/// `backend.aggregated_environment` (srt-slurm's environment of every
/// worker, then the mode's) and `resources` as `[layout]`.
fn aggregated_engine(d: &Yaml) -> Result<Engines, String> {
    let mode = &d["backend"]["vllm_config"]["aggregated"];
    if mode.is_badvalue() {
        return Err("no backend.vllm_config.aggregated (the vllm serve keys of an aggregated recipe) nor .prefill/.decode (a P/D recipe's)".into());
    }
    let (args, notes) = flags_of(mode)?;
    let env = mode_env(d, "aggregated");
    let layout = layout_of(d, "agg", &args, &env)?;
    let summary = format!(
        "{} node(s) of {} {} GPUs; the vllm serve keys of backend.vllm_config.aggregated as flags in srt-slurm's order, environment and backend.aggregated_environment as [env]",
        layout.nodes,
        layout.gpus_per_node.map_or("?".into(), |g| g.to_string()),
        d["resources"]["gpu_type"].as_str().unwrap_or_default(),
    );
    Ok(Engines { args, env, layout: Some(layout), roles: None, summary, notes })
}

/// srt-slurm's environment of a mode's workers: `environment` (every
/// worker's), then `backend.<mode>_environment` over it.
fn mode_env(d: &Yaml, mode: &str) -> BTreeMap<String, String> {
    let mut env = env_of(&d["environment"]);
    env.extend(env_of(&d["backend"][format!("{mode}_environment").as_str()]));
    env
}

/// A mapping's keys as srt-slurm spells the flags (`_` as `-`).
fn keys_as_flags(mode: &Yaml) -> Result<BTreeMap<String, Yaml>, String> {
    let Yaml::Hash(h) = mode else { return Err("not a mapping of vllm serve keys".into()) };
    Ok(h.iter().filter_map(|(k, v)| k.as_str().map(|k| (k.replace('_', "-"), v.clone()))).collect())
}

/// A prefill/decode file's two sides: `vllm_config.prefill` / `.decode` as
/// each side's flags (the keys both give with the same value, but the KV
/// connector's config, go to the shared `[engine] args`), `environment`
/// and each side's `backend.<side>_environment` as the shared `[env]` and
/// each side's env (what both sides see alike is shared), `resources` as
/// each side's layout.
///
/// Errors: one side missing or not a mapping, a side's flags or layout
/// ([`layout_of`]).
fn pd_engines(d: &Yaml) -> Result<Engines, String> {
    let configs = &d["backend"]["vllm_config"];
    let mut sides = Vec::new();
    for side in PdRole::BOTH {
        let mode = &configs[side.name()];
        if mode.is_badvalue() {
            let other = PdRole::BOTH.into_iter().find(|s| *s != side).unwrap_or(side);
            return Err(format!("backend.vllm_config has {other} but no {side}: a prefill/decode recipe needs both sides' vllm serve keys"));
        }
        sides.push(keys_as_flags(mode).map_err(|e| format!("backend.vllm_config.{side}: {e}"))?);
    }
    let shared: BTreeMap<String, Yaml> =
        sides[0].iter().filter(|(k, v)| k.as_str() != KV_TRANSFER_KEY && sides[1].get(*k) == Some(*v)).map(|(k, v)| (k.clone(), v.clone())).collect();
    let as_yaml = |m: BTreeMap<String, Yaml>| Yaml::Hash(m.into_iter().map(|(k, v)| (Yaml::String(k), v)).collect());
    let (args, shared_notes) = flags_of(&as_yaml(shared.clone()))?;
    let mut notes: Vec<String> = shared_notes.into_iter().map(|n| format!("both sides: {n}")).collect();
    let envs: Vec<BTreeMap<String, String>> = PdRole::BOTH.iter().map(|s| mode_env(d, s.name())).collect();
    let env: BTreeMap<String, String> = envs[0].iter().filter(|(k, v)| envs[1].get(*k) == Some(*v)).map(|(k, v)| (k.clone(), v.clone())).collect();
    let mut roles = Roles::default();
    let mut shown = Vec::new();
    for (i, side) in PdRole::BOTH.into_iter().enumerate() {
        let own: BTreeMap<String, Yaml> = sides[i].iter().filter(|(k, _)| !shared.contains_key(*k)).map(|(k, v)| (k.clone(), v.clone())).collect();
        let (own_args, own_notes) = flags_of(&as_yaml(own))?;
        notes.extend(own_notes.into_iter().map(|n| format!("[roles.{side}] {n}")));
        let all_args: Vec<String> = args.iter().chain(&own_args).cloned().collect();
        let layout = layout_of(d, side.name(), &all_args, &envs[i])?;
        notes.extend(packing_note(d, side.name(), &layout));
        notes.extend(kv_notes(side, &all_args));
        shown.push(format!("{side} {} worker(s) of {} node(s) each", layout.workers, layout.nodes));
        let role = Role {
            args: own_args,
            env: envs[i].iter().filter(|(k, _)| !env.contains_key(*k)).map(|(k, v)| (k.clone(), v.clone())).collect(),
            env_unset: Vec::new(),
            layout: Some(layout),
        };
        match side {
            PdRole::Prefill => roles.prefill = Some(role),
            PdRole::Decode => roles.decode = Some(role),
        }
    }
    let res = &d["resources"];
    let summary = format!(
        "prefill/decode on nodes of {} {} GPUs: {}; the vllm serve keys of backend.vllm_config.prefill/.decode as [roles.prefill]/[roles.decode] args in srt-slurm's order (the keys both sides give alike, but {KV_TRANSFER_KEY}, as [engine] args), environment and backend.prefill_environment/decode_environment as each side's env (what both see alike as [env]), resources as each side's layout",
        res["gpus_per_node"].as_i64().map_or("?".into(), |g| g.to_string()),
        res["gpu_type"].as_str().unwrap_or_default(),
        shown.join(", ")
    );
    for (key, what) in [
        ("het_jobs", "a Slurm heterogeneous job per side"),
        ("spread_workers", "workers spread over the nodes"),
    ] {
        if res[key].as_bool() == Some(true) {
            notes.push(format!("resources.{key} true ({what}): srt-slurm's placement of the workers; not carried (each side's layout gives its engines' nodes)"));
        }
    }
    for key in ["allow_prefill_decode_colocation", "allow_prefill_decode_colocation_across_nodes"] {
        if d["backend"][key].as_bool() == Some(true) {
            notes.push(format!("backend.{key} true: srt-slurm may put prefill and decode workers on one node; not carried (each side's layout gives its own nodes)"));
        }
    }
    if let Some(m) = d["backend"]["dp_launch_mode"].as_str() {
        notes.push(format!("backend.dp_launch_mode {m}: how srt-slurm starts a DP worker's processes (per node or per GPU); enginebench places DP ranks itself (docs/data-parallel.md, docs/multi-node.md)"));
    }
    Ok(Engines { args, env, layout: None, roles: Some(roles), summary, notes })
}

/// For the notes: srt-slurm's node count of a side when its workers share
/// nodes (several on one node, or on the other side's nodes); the layout
/// gives each worker its own.
fn packing_note(d: &Yaml, side: &str, layout: &NodeLayout) -> Option<String> {
    let nodes = d["resources"][format!("{side}_nodes").as_str()].as_i64()?;
    if nodes == 0 {
        return Some(format!("resources.{side}_nodes 0: srt-slurm puts the {side} workers on the other side's nodes; here each {side} worker has {} node(s) of its own", layout.nodes));
    }
    let own = i64::from(layout.workers) * i64::from(layout.nodes);
    (nodes != own).then(|| {
        format!(
            "resources.{side}_nodes {nodes} for {} {side} worker(s): srt-slurm packs several workers on one node; here each has {} node(s) of its own ({own} in all)",
            layout.workers, layout.nodes
        )
    })
}

/// For the notes: what a side's KV connector config holds that runs
/// beside the engine or is the harness's to give.
fn kv_notes(side: PdRole, args: &[String]) -> Vec<String> {
    let Some(text) = crate::recipe::parallel::flag_value(args, &crate::recipe::roles::KV_TRANSFER_FLAGS) else { return Vec::new() };
    let Ok(kv) = serde_json::from_str::<serde_json::Value>(&text) else { return Vec::new() };
    let mut out = Vec::new();
    let inner: Vec<&serde_json::Value> = kv["kv_connector_extra_config"]["connectors"].as_array().into_iter().flatten().collect();
    if let Some(id) = std::iter::once(&kv).chain(inner.iter().copied()).find_map(|c| c["engine_id"].as_str()) {
        out.push(format!("[roles.{side}] --kv-transfer-config engine_id {id:?}: the harness gives each worker its own engine id and NIXL side-channel port; the recipe's is not used"));
    }
    let parts: Vec<&str> = inner.iter().filter_map(|c| c["kv_connector"].as_str()).collect();
    if parts.iter().any(|c| c.starts_with("Mooncake")) {
        out.push(format!(
            "[roles.{side}] --kv-transfer-config is a {} of {}: kept as the recipe gives it; the Mooncake store its MooncakeStore connector reads and writes (srt-slurm's backend.mooncake_kv_store) is not set up by enginebench",
            kv["kv_connector"].as_str().unwrap_or("MultiConnector"),
            parts.join(" + ")
        ));
    }
    out
}

fn d_is_cpu(d: &Yaml) -> bool {
    d["resources"]["gpu_type"].as_str() == Some("cpu")
}

/// `resources` as the layout of one mode's engines (`mode`: `agg`,
/// `prefill` or `decode`): `<mode>_workers` engines, each on the nodes its
/// GPUs need (`gpus_per_<mode>`, else srt-slurm's `<mode>_nodes` x
/// `gpus_per_node` / workers, over `gpus_per_node`).
///
/// Errors: no `<mode>_nodes` / `gpus_per_node`, or GPUs per worker unequal
/// to TP x PP x PCP x DP of `args`.
fn layout_of(d: &Yaml, mode: &str, args: &[String], env: &BTreeMap<String, String>) -> Result<NodeLayout, String> {
    let res = &d["resources"];
    let int = |k: &str| res[k].as_i64().and_then(|v| u32::try_from(v).ok());
    let nodes = int(&format!("{mode}_nodes")).ok_or(format!("resources.{mode}_nodes missing"))?;
    let workers = int(&format!("{mode}_workers")).unwrap_or(1).max(1);
    let shape = crate::recipe::parallel::Layout::of(args, None, env.get(crate::recipe::parallel::DP_SIZE_VAR).map(String::as_str));
    // A CPU recipe (gpu_type cpu) counts no GPUs: its nodes split cores.
    if res["gpu_type"].as_str() == Some("cpu") {
        return Ok(NodeLayout { nodes: (nodes / workers).max(1), gpus_per_node: None, dp_ranks_per_node: None, workers });
    }
    let gpus_per_node = int("gpus_per_node").ok_or("resources.gpus_per_node missing")?;
    let key = format!("gpus_per_{mode}");
    let per_worker = int(&key).unwrap_or(nodes * gpus_per_node / workers);
    if per_worker != shape.gpus() {
        let given = if int(&key).is_some() { format!("resources.{key} {per_worker}") } else { format!("resources ({mode}_nodes x gpus_per_node / {mode}_workers) give {per_worker} GPUs per worker") };
        return Err(format!(
            "{given} but the {} flags make TP {} x PP {} x PCP {} x DP {} = {} GPUs",
            if mode == "agg" { "engine's".to_string() } else { format!("{mode} side's") },
            shape.tp,
            shape.pp,
            shape.pcp,
            shape.dp,
            shape.gpus()
        ));
    }
    Ok(NodeLayout { nodes: per_worker.div_ceil(gpus_per_node).max(1), gpus_per_node: Some(gpus_per_node), dp_ranks_per_node: None, workers })
}

fn render_layout(l: &NodeLayout) -> String {
    let mut t = format!("\n[layout]\nnodes = {}\n", l.nodes);
    if let Some(g) = l.gpus_per_node {
        t.push_str(&format!("gpus_per_node = {g}\n"));
    }
    if let Some(k) = l.dp_ranks_per_node {
        t.push_str(&format!("dp_ranks_per_node = {k}\n"));
    }
    t.push_str(&format!("workers = {}\n", l.workers));
    t
}

/// The workload and points of `benchmark`.
fn bench_of(d: &Yaml, args: &[String], master: Option<&MasterRef>) -> Result<(Bench, Vec<MatrixPoint>), String> {
    let b = &d["benchmark"];
    let tp = crate::recipe::parallel::Layout::of(args, None, None).tp;
    let point = |kind, isl, osl, conc| MatrixPoint {
        kind,
        isl,
        osl,
        conc,
        tp,
        ep: 1,
        dp_attn: false,
        pp: 1,
        dcp: 1,
        pcp: 1,
        spec: "none".into(),
        offload: None,
        env: BTreeMap::new(),
    };
    match b["type"].as_str() {
        Some("custom") => {
            let command = b["command"].as_str().unwrap_or("");
            if !command.contains("agentic_srt.sh") {
                return Err(format!("benchmark.type custom runs {command:?}: only InferenceX's agentic replay (agentic_srt.sh) imports"));
            }
            let mut env = env_of(&b["env"]);
            env.entry("DURATION".into()).or_insert_with(|| AGENTIC_DURATION_S.to_string());
            let loader = env.get("WEKA_LOADER_OVERRIDE").cloned().ok_or("benchmark.env has no WEKA_LOADER_OVERRIDE: which trace the replay reads is not in the recipe")?;
            let call = Call { line: 0, args: vec![], env };
            let trace = Call { line: 0, args: vec![loader], env: BTreeMap::new() };
            let replay = client::replay(&call, Some(&trace))?;
            let m = master.ok_or(
                "no master-config entry names this recipe (CONFIG_FILE=recipes/vllm/... or EVAL_CONFIG_FILE=...): the replay's concurrencies (CONC_LIST) come from there",
            )?;
            Ok((Bench::Agentic(replay), m.concs.iter().map(|&c| point(Kind::Agentic, 0, 0, c)).collect()))
        }
        Some("sa-bench") => {
            let int = |k: &str| b[k].as_i64().and_then(|v| u32::try_from(v).ok());
            let (isl, osl) = (int("isl").ok_or("benchmark.isl missing")?, int("osl").ok_or("benchmark.osl missing")?);
            let concs: Vec<u32> = match &b["concurrencies"] {
                Yaml::Array(a) => a.iter().filter_map(|c| c.as_i64().and_then(|v| u32::try_from(v).ok())).collect(),
                y => scalar(y).unwrap_or_default().split('x').filter_map(|c| c.trim().parse().ok()).collect(),
            };
            if concs.is_empty() {
                return Err("benchmark.concurrencies gives no concurrency".into());
            }
            if let Some(rate) = scalar(&b["req_rate"]).filter(|r| r != "inf") {
                return Err(format!("benchmark.req_rate {rate}: a request rate; only InferenceX's closed loop (inf) imports"));
            }
            let ratio = b["random_range_ratio"].as_f64().unwrap_or(0.8);
            let per_conc = int("num_prompts_mult").unwrap_or(10);
            let tokenizer = b["custom_tokenizer"].as_str().unwrap_or("");
            let dsv4 = tokenizer.contains("deepseek_v4");
            let mut unsupported = Vec::new();
            if !tokenizer.is_empty() && !dsv4 {
                unsupported.push(format!("sa-bench custom_tokenizer {tokenizer}: in-process prompts use the engine's tokenizer"));
            }
            if int("num_warmup_mult").is_some_and(|w| w != crate::recipe::sweep::INFERENCEX_WARMUPS_PER_CONC) {
                unsupported.push("sa-bench num_warmup_mult: the recipe uses InferenceX's 2 warm-ups per concurrency".into());
            }
            let chat = dsv4 || b["use_chat_template"].as_bool().unwrap_or(false);
            let client = Client { chat, dsv4, range_ratio: ratio, prompts: Prompts::PerConc(per_conc), unsupported };
            Ok((Bench::Fixed(client), concs.iter().map(|&c| point(Kind::FixedSeqLen, isl, osl, c)).collect()))
        }
        Some(other) => Err(format!("benchmark.type {other}: only the agentic replay (custom agentic_srt.sh) and sa-bench import")),
        None => Err("no benchmark.type".into()),
    }
}

/// What runs beside the engine in srt-slurm and is not reproduced; `pd`:
/// a prefill/decode file.
fn server_notes(d: &Yaml, pd: bool) -> Vec<String> {
    let mut out = Vec::new();
    let f = &d["frontend"];
    if let Some(t) = f["type"].as_str() {
        let args = scalar(&f["args"]).map(|a| format!(" with {a}")).unwrap_or_default();
        let env = f["env"].as_hash().filter(|h| !h.is_empty()).map(|_| format!(" and env {}", to_json(&f["env"]))).unwrap_or_default();
        let more = match f["num_additional_frontends"].as_i64() {
            Some(n) if f["enable_multiple_frontends"].as_bool() == Some(true) && n > 0 => format!(" ({} frontends behind nginx)", n + 1),
            _ => String::new(),
        };
        let engines = if pd {
            "requests go to the engines directly (no HTTP; between the sides the harness is the proxy, docs/pd.md)"
        } else {
            "requests go to the engine directly (no HTTP, no router; with DP, enginebench's balancer spreads them as vLLM's does)"
        };
        out.push(format!(
            "frontend {t}{args}{env}{more}: the {} in front of the {} is not reproduced: {engines}",
            if t == "dynamo" { "Dynamo frontend and router" } else { "API server" },
            if pd { "prefill and decode workers" } else { "engine" }
        ));
    }
    if let Some(v) = d["dynamo"]["version"].as_str().or(d["identity"]["frameworks"]["dynamo"].as_str()) {
        out.push(format!("Dynamo {v}: its worker wrapper (dynamo.vllm) and runtime are not run; the engine is vLLM's"));
    }
    if !d["infra"].is_badvalue() || d["frontend"]["type"].as_str() == Some("dynamo") {
        out.push("etcd and NATS (Dynamo's discovery and messaging) are not started".into());
    }
    if !d["backend"]["kv_events_config"].is_badvalue() {
        out.push("backend.kv_events_config: KV events for the Dynamo router's KV-aware routing are not published".into());
    }
    if !d["backend"]["mooncake_kv_store"].is_badvalue() {
        out.push(Service { name: "mooncake_master".into(), line: 0, concs: vec![] }.reason().to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml(s: &str) -> Yaml {
        YamlLoader::load_from_str(s).unwrap().remove(0)
    }

    #[test]
    fn a_key_given_twice_keeps_its_last_value() {
        let (doc, twice) = load_last_key_wins("a:\n  x: 1\n  y: '2'\n  x: 3\nb: [1, two]\n").unwrap();
        assert_eq!((doc["a"]["x"].as_i64(), doc["a"]["y"].as_str(), doc["b"][1].as_str()), (Some(3), Some("2"), Some("two")));
        assert_eq!(twice, ["x"]);
        // A merge key: the anchored mapping's keys under the mapping's own.
        let (doc, twice) = load_last_key_wins("p: &base {a: 1, b: 2}\nd:\n  <<: *base\n  b: 3\n  c: 4\n").unwrap();
        assert_eq!((doc["d"]["a"].as_i64(), doc["d"]["b"].as_i64(), doc["d"]["c"].as_i64(), doc["p"]["b"].as_i64()), (Some(1), Some(3), Some(4), Some(2)));
        assert!(doc["d"]["<<"].is_badvalue() && twice.is_empty());
        let (doc, _) = load_last_key_wins("x: &x {a: 1}\ny: &y {a: 2, b: 2}\nz: {<<: [*x, *y]}\n").unwrap();
        assert_eq!((doc["z"]["a"].as_i64(), doc["z"]["b"].as_i64()), (Some(1), Some(2)));
        assert!(load_last_key_wins("a: [1,").unwrap_err().contains("invalid YAML"));
    }

    #[test]
    fn vllm_config_keys_become_flags_as_srt_slurm_writes_them() {
        let (args, notes) = flags_of(&yaml(
            "tensor-parallel-size: 1\ndata-parallel-size: 8\nenable-expert-parallel: true\nenforce-eager: false\ngpu-memory-utilization: 0.95\ndata-parallel-rpc-port: 13345\ncompilation-config: '{\"cudagraph_mode\":\"FULL_DECODE_ONLY\"}'\ndyn-tool-call-parser: minimax_m3\nspeculative_config: {method: mtp, num_speculative_tokens: 2}\nx-list: [a, b]\nnothing: null",
        ))
        .unwrap();
        assert_eq!(
            args,
            [
                "--compilation-config", "{\"cudagraph_mode\":\"FULL_DECODE_ONLY\"}", "--data-parallel-size", "8", "--enable-expert-parallel",
                "--gpu-memory-utilization", "0.95", "--speculative-config", "{\"method\":\"mtp\",\"num_speculative_tokens\":2}",
                "--tensor-parallel-size", "1", "--x-list", "a", "b",
            ]
        );
        let n = notes.join("\n");
        assert!(n.contains("--data-parallel-rpc-port 13345: srt-slurm sets it"), "{n}");
        assert!(n.contains("dyn-tool-call-parser") && n.contains("--enforce-eager: false"), "{n}");
    }

    /// A P/D file's sides: keys both give alike (but the KV connector's
    /// config) shared, the rest each side's; the environment split the same
    /// way; each side's layout from `resources`.
    #[test]
    fn a_pd_file_splits_into_shared_flags_and_two_sides() {
        let (d, _) = load_last_key_wins(
            "environment: {G: '1'}\nresources: {gpu_type: gb200, gpus_per_node: 8, prefill_nodes: 2, prefill_workers: 1, gpus_per_prefill: 16, decode_nodes: 1, decode_workers: 2, gpus_per_decode: 4}\nbackend:\n  prefill_environment: {A: '1', B: p}\n  decode_environment: {A: '1', B: d}\n  vllm_config:\n    prefill: &p {kv-transfer-config: '{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"kv_both\"}', tensor-parallel-size: 8, data-parallel-size: 2, block_size: 64, dyn-tool-call-parser: x}\n    decode: {<<: *p, data-parallel-size: 1, tensor-parallel-size: 4}\n",
        )
        .unwrap();
        let e = pd_engines(&d).unwrap();
        assert_eq!(e.args, ["--block-size", "64"]);
        assert_eq!(e.env, BTreeMap::from([("A".to_string(), "1".to_string()), ("G".to_string(), "1".to_string())]));
        let roles = e.roles.unwrap();
        let (p, dd) = (roles.prefill.unwrap(), roles.decode.unwrap());
        assert_eq!(p.args[..2], ["--data-parallel-size", "2"]);
        assert!(p.args.contains(&"--kv-transfer-config".to_string()) && dd.args.contains(&"--kv-transfer-config".to_string()), "each side keeps its connector: {p:?} {dd:?}");
        assert_eq!((p.env.get("B").map(String::as_str), dd.env.get("B").map(String::as_str)), (Some("p"), Some("d")));
        assert_eq!(p.layout, Some(NodeLayout { nodes: 2, gpus_per_node: Some(8), dp_ranks_per_node: None, workers: 1 }));
        assert_eq!(dd.layout, Some(NodeLayout { nodes: 1, gpus_per_node: Some(8), dp_ranks_per_node: None, workers: 2 }));
        let n = e.notes.join("\n");
        assert!(n.contains("both sides: dyn-tool-call-parser") && n.contains("resources.decode_nodes 1 for 2 decode worker(s)"), "{n}");
    }

    #[test]
    fn a_pd_file_with_one_side_or_gpus_that_do_not_add_up_is_refused() {
        let one = yaml("resources: {gpus_per_node: 4, prefill_nodes: 1}\nbackend: {vllm_config: {prefill: {tensor-parallel-size: 4}}}");
        let e = pd_engines(&one).err().unwrap();
        assert!(e.contains("backend.vllm_config has prefill but no decode"), "{e}");
        let gpus = yaml(
            "resources: {gpus_per_node: 4, prefill_nodes: 1, decode_nodes: 1, gpus_per_prefill: 4, gpus_per_decode: 8}\nbackend: {vllm_config: {prefill: {tensor-parallel-size: 4}, decode: {tensor-parallel-size: 4}}}",
        );
        let e = pd_engines(&gpus).err().unwrap();
        assert!(e.contains("resources.gpus_per_decode 8 but the decode side's flags make TP 4 x PP 1 x PCP 1 x DP 1 = 4 GPUs"), "{e}");
    }
}
