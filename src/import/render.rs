//! The recipe TOML of imported jobs, and the round trip that checks it.
//!
//! The first job is the base, the others variants that replace the flag
//! list and environment, each with its own search space and workload
//! settings: for fixed-length jobs the client's (`workload`, InferenceX's
//! length convention, range ratio, prompts and warm-ups per concurrency,
//! ignore-eos, percentiles); for agentic jobs the replay's (`workload =
//! "trace"`, `[sweep.trace]` with the dataset's address
//! (`hf://datasets/...`, fetched before any engine starts), duration, start ratio,
//! warm-ups per lane, idle caps; the duration, not a request budget, ends
//! a point). Where every point of a job has one TP and the flags carry it
//! (`-tp 8`, or `-dp 8` under DP attention), the flag's value becomes
//! `${TP}` and the search space says `tp = 8`: the recipe's TP is then
//! InferenceX's, which its per-GPU figures divide by. A prefill/decode job
//! (an srt-slurm P/D file) also writes `[roles.prefill]` / `[roles.decode]`
//! (each side's own flags, environment and layout; `[engine]` and `[env]`
//! hold what both share) and names no TP in its sweep.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use toml::Value;

use super::client::{Prompts, REPLAY_SEED, REPLAY_START_RATIO, REPLAY_SYSTEM_IDLE_CAP_S, Replay};
use super::job::{Bench, Job};
use super::master_config::Entry;
use crate::protocol::{LengthConvention, Workload};
use crate::recipe::args::is_flag;
use crate::recipe::layout::NodeLayout;
use crate::recipe::roles::PdRole;
use crate::recipe::sweep::{INFERENCEX_PERCENTILES, INFERENCEX_WARMUPS_PER_CONC};

/// What an InferenceX checkout says about evals: its thresholds file
/// (`utils/evals/thresholds.yaml`) and where its task files live.
#[derive(Debug, Clone, Default)]
pub struct CheckoutEvals {
    /// `utils/evals/` of the checkout, when found.
    pub dir: Option<PathBuf>,
    pub thresholds: Option<crate::eval::thresholds::Thresholds>,
}

impl CheckoutEvals {
    /// The checkout's evals beside a master config (`configs/X.yaml`, or
    /// `configs/deprecated/X.yaml`): `utils/evals/` one or two folders up,
    /// within the checkout `root` (a real path).
    ///
    /// Errors: a thresholds.yaml that is there but does not read, or is a
    /// link out of the checkout ([`super::confined::read`]; its target is
    /// never read).
    pub fn beside(master: &Path, root: &Path) -> Result<CheckoutEvals, String> {
        let configs = master.parent().unwrap_or(Path::new("."));
        let dir = configs.ancestors().skip(1).take(2).filter(|d| d.starts_with(root)).map(|d| d.join("utils/evals")).find(|d| d.is_dir());
        let thresholds = match dir.as_ref().map(|d| d.join("thresholds.yaml")).filter(|f| f.symlink_metadata().is_ok()) {
            Some(f) => {
                let text = super::confined::read(root, &f)?;
                Some(crate::eval::thresholds::Thresholds::parse(&text, &f.display().to_string()).map_err(|e| e.to_string())?)
            }
            None => None,
        };
        Ok(CheckoutEvals { dir, thresholds })
    }
}

/// The `[eval]` of an imported recipe: InferenceX's eval of the entry (the
/// task `EVAL_TASKS_DIR` names, `utils/evals/gsm8k.yaml` by default, which
/// the built-in `gsm8k_inferencex` reproduces; any other through lm-eval),
/// at the launcher's `EVAL_CONCURRENT_REQUESTS` or else the entry's highest
/// concurrency (InferenceX runs evals at `CONC` of its highest and median
/// eval points), and the checkout's thresholds for the entry's model prefix
/// (every task of its thresholds file, resolved), else InferenceX's 0.90.
fn eval_section(t: &mut Doc, e: &Entry, jobs: &[Job], evals: &CheckoutEvals) {
    let base = &jobs[0];
    t.data("\n[eval]");
    let tasks_dir = base.eval_env.get("EVAL_TASKS_DIR").filter(|d| !d.ends_with("gsm8k.yaml"));
    match tasks_dir {
        Some(d) => {
            let path = evals.dir.as_ref().and_then(|e| e.parent()).and_then(Path::parent).map_or_else(|| PathBuf::from(d), |root| root.join(d));
            t.comment(&format!("EVAL_TASKS_DIR={d}: run through lm-eval (needs `pip install lm-eval` in the engine's Python)"));
            t.data(&format!("tasks = [{}]", q(&path.display().to_string())));
        }
        None => {
            t.comment("InferenceX's utils/evals/gsm8k.yaml through lm-eval, built in (no lm-eval needed)");
            t.data("tasks = [\"gsm8k_inferencex\"]");
        }
    }
    let concurrency = match base.eval_env.get("EVAL_CONCURRENT_REQUESTS").and_then(|c| c.parse::<u32>().ok()) {
        Some(c) => {
            t.comment("EVAL_CONCURRENT_REQUESTS of the launcher");
            Some(c)
        }
        None => {
            t.comment("InferenceX evaluates at CONC of its highest (and median) eval point: the highest");
            jobs.iter().flat_map(|j| &j.points).map(|p| p.conc).max()
        }
    };
    if let Some(c) = concurrency {
        t.data(&format!("concurrency = {c}"));
    }
    match &evals.thresholds {
        Some(th) => {
            let prefix = e.model_prefix.as_deref();
            let mut tasks: Vec<&String> = th.default.keys().chain(prefix.and_then(|p| th.models.get(p)).into_iter().flat_map(|m| m.keys())).collect();
            tasks.sort();
            tasks.dedup();
            let resolved: Vec<String> = tasks
                .iter()
                .filter_map(|task| th.resolve(prefix, task).map(|(v, _)| format!("{} = {v}", q(task))))
                .collect();
            if let Some(p) = prefix {
                t.data(&format!("model_prefix = {}", q(p)));
            }
            t.comment(&format!("from {} for model prefix {}: models.<prefix> over default", th.origin, prefix.unwrap_or("(none)")));
            t.data(&format!("thresholds = {{ {} }}", resolved.join(", ")));
        }
        None => t.data("min_accuracy = 0.90"),
    }
}

/// Flags whose value may be the matrix TP.
const TP_VALUE_FLAGS: [&str; 4] = ["--tensor-parallel-size", "-tp", "--data-parallel-size", "-dp"];

/// A job's flags as written, with the matrix TP as `${TP}` where a
/// parallel-size flag carries it, and that TP (None: left as written).
///
/// A prefill/decode job's sides have their own TPs: its flags stay as
/// written and its sweep names no TP.
fn written_args(j: &Job) -> (Vec<String>, Option<u32>) {
    let Some(tp) = j.tp().filter(|_| j.roles.is_none()) else { return (j.engine.args.clone(), None) };
    let value = tp.to_string();
    let mut args = j.engine.args.clone();
    let mut replaced = false;
    for i in 0..args.len() {
        let (name, inline) = args[i].split_once('=').map_or((args[i].as_str(), None), |(n, v)| (n, Some(v)));
        if !TP_VALUE_FLAGS.contains(&name) {
            continue;
        }
        match inline {
            Some(v) if v == value => {
                args[i] = format!("{name}=${{TP}}");
                replaced = true;
            }
            None if args.get(i + 1) == Some(&value) => {
                args[i + 1] = "${TP}".into();
                replaced = true;
            }
            _ => {}
        }
    }
    if replaced { (args, Some(tp)) } else { (j.engine.args.clone(), None) }
}

/// `(key, TOML value)` of a job's sweep.
fn sweep_keys(j: &Job) -> Vec<(&'static str, String)> {
    let tp = written_args(j).1;
    let mut concs: Vec<(u32, u32, u32)> = j.points.iter().map(|p| (p.isl, p.osl, p.conc)).collect();
    concs.sort_unstable();
    concs.dedup();
    let mut pairs: Vec<(u32, u32)> = Vec::new();
    for p in &j.points {
        if !pairs.contains(&(p.isl, p.osl)) {
            pairs.push((p.isl, p.osl));
        }
    }
    let tp_key = tp.map(|t| format!("tp = {t}, ")).unwrap_or_default();
    let entry = |pair: Option<(u32, u32)>| {
        let c: Vec<u32> = concs.iter().filter(|(i, o, _)| pair.is_none_or(|p| p == (*i, *o))).map(|(_, _, c)| *c).collect();
        let isl_osl = pair.map(|(i, o)| format!(", isl_osl = [[{i}, {o}]]")).unwrap_or_default();
        format!("{{ {tp_key}conc = {c:?}{isl_osl} }}")
    };
    let mut keys: Vec<(&str, String)> = Vec::new();
    match &j.bench {
        Bench::Fixed(c) => {
            keys.push(("workload", q(if c.chat { "chat_random" } else { "random" })));
            keys.push(("length_convention", q("inferencex")));
            keys.push(("range_ratio", Value::Float(c.range_ratio).to_string()));
            match c.prompts {
                Prompts::PerConc(k) => keys.push(("prompts_per_conc", k.to_string())),
                Prompts::Fixed(n) => keys.push(("num_prompts", n.to_string())),
            }
            keys.push(("warmups_per_conc", INFERENCEX_WARMUPS_PER_CONC.to_string()));
            keys.push(("ignore_eos", "true".into()));
            keys.push(("percentiles", Value::Array(INFERENCEX_PERCENTILES.iter().map(|p| Value::Float(*p)).collect()).to_string()));
            let all: Vec<String> = pairs.iter().map(|(i, o)| format!("[{i}, {o}]")).collect();
            keys.push(("isl_osl", format!("[{}]", all.join(", "))));
            let entries: Vec<String> = pairs.iter().map(|p| entry(Some(*p))).collect();
            keys.push(("search_space", format!("[{}]", entries.join(", "))));
        }
        Bench::Agentic(r) => {
            keys.push(("workload", q("trace")));
            keys.push(("seed", REPLAY_SEED.to_string()));
            keys.push(("search_space", format!("[{}]", entry(None))));
            keys.push(("trace", trace_table(r)));
        }
    }
    keys
}

/// The replay's dataset as a trace address (`hf://datasets/OWNER/NAME`).
fn dataset_address(r: &Replay) -> String {
    format!("{}{}", crate::workload::hub::SCHEME, r.dataset)
}

/// `[sweep.trace]` of a replay, as an inline table.
fn trace_table(r: &Replay) -> String {
    let f = |x: u32| Value::Float(f64::from(x)).to_string();
    format!(
        "{{ file = {}, format = \"agentx\", duration_s = {}, start_ratio = [{}, {}], warmup_requests_per_lane = {}, tree_idle_cap_s = {}, system_idle_cap_s = {}, cache_bust = true, request_budget = false, split_chains = {} }}",
        q(&dataset_address(r)),
        f(r.duration_s),
        REPLAY_START_RATIO[0],
        REPLAY_START_RATIO[1],
        r.warmup_requests_per_lane,
        f(r.tree_idle_cap_s),
        f(REPLAY_SYSTEM_IDLE_CAP_S),
        r.split_chains
    )
}

/// What every imported agentic job does differently from InferenceX's HTTP
/// replay, and where its trace comes from.
pub fn agentic_notes(r: &Replay) -> Vec<String> {
    vec![
        format!(
            "trace: InferenceX replays AIPerf's public dataset {} (Hugging Face {}): the recipe names it by address ({}), which a run reads from the Hugging Face cache or downloads before any engine starts; --trace-file FILE replays another",
            r.loader, r.dataset, dataset_address(r)
        ),
        "replay as InferenceX's (duration, start ratio 0.25-0.75, warm-ups per lane, idle caps 300/10 s, cache-bust marker, seed 42, parallel agent chains as AIPerf's detection splits them unless AIPERF_DATASET_WEKA_SPLIT_FLATTENED_AGENTS turns it off); a point ends at the duration (request_budget = false; --num-prompts brings a budget back)".into(),
        "differs in-process from InferenceX's HTTP replay (AIPerf against `vllm serve`): requests go to the engine directly (no HTTP, no chat endpoint, no streaming; TTFT lacks the server's share); prompts are token ids built from the hash ids (no text corpus, no chat template, no role boundaries), plus an 8-token cache-bust marker; parallel agent chains (AIPerf's detection, run on the top-level turns and each subagent's) form a tree of one level: a chain forked inside a worker chain spawns from a root turn; primers are sent together rather than spread; a lane's traces come from a seeded shuffle; token counts are the engine's, not the server's usage fields".into(),
    ]
}

/// A recipe being written: its whole text, and its data lines alone (no
/// comment), which [`verify`] parses against the whole.
#[derive(Debug, Clone, Default)]
pub struct Doc {
    /// The recipe, comments included.
    pub toml: String,
    data: String,
}

impl Doc {
    /// A `# ` comment line: `text` from a checkout or a launcher cannot end
    /// it and start a TOML line, its control characters are escaped
    /// ([`printable`]).
    fn comment(&mut self, text: &str) {
        self.toml.push_str(&format!("# {}\n", printable(text)));
    }

    /// TOML lines, written by this module with every value quoted ([`q`]).
    fn data(&mut self, lines: &str) {
        for t in [&mut self.toml, &mut self.data] {
            t.push_str(lines);
            t.push('\n');
        }
    }

    /// TOML lines an importer adds (e.g. srt-slurm's `[layout]`), written
    /// with every value quoted as [`q`] does.
    pub fn push_data(&mut self, lines: &str) {
        self.data(lines);
    }

    /// This recipe with `header` as its first comment lines and its own
    /// comment lines that `drop` matches left out (an importer that read a
    /// file rather than ran a launcher says so in place of render's header).
    pub fn with_header(&self, header: &[String], drop: impl Fn(&str) -> bool) -> Doc {
        let mut out = Doc { toml: String::new(), data: self.data.clone() };
        for h in header {
            out.comment(h);
        }
        for line in self.toml.lines().filter(|l| !(l.starts_with('#') && drop(l))) {
            out.toml.push_str(line);
            out.toml.push('\n');
        }
        out
    }
}

/// `text` with every control character but the tab escaped as Rust writes
/// it (`\n`, `\r`, `\u{1b}`): one line a terminal shows as it is, and a
/// valid TOML comment (TOML 1.0: no control characters but tab).
pub fn printable(text: &str) -> String {
    text.chars().map(|c| if c.is_control() && c != '\t' { c.escape_default().to_string() } else { c.to_string() }).collect()
}

/// The recipe for `jobs`: the first is the base, the others variants that
/// replace the flag list and environment; each with its own search space
/// and workload settings.
pub fn render(e: &Entry, jobs: &[Job], notes: &[String], evals: &CheckoutEvals) -> Doc {
    let base = &jobs[0];
    let mut t = Doc::default();
    t.comment(&format!("Imported by `enginebench import inferencex` from master-config entry {}:", e.key));
    t.comment("the launcher ran under bash at every search-space point (vllm serve and the client recorded, not run).");
    if let Some(img) = &e.image {
        t.comment(&format!("InferenceX ran it in image {img}."));
    }
    for j in jobs {
        t.comment(&format!(
            "job {}{}: {} line {} ({} line {}), {} point(s)",
            j.name,
            if std::ptr::eq(j, base) { " (the base)" } else { "" },
            j.launcher.display(),
            j.line,
            match j.bench {
                Bench::Fixed(_) => "client",
                Bench::Agentic(_) => "replay",
            },
            j.bench_line,
            j.points.len()
        ));
    }
    if jobs.len() > 1 {
        let names: Vec<&str> = std::iter::once("base").chain(jobs[1..].iter().map(|j| j.name.as_str())).collect();
        t.comment(&format!("Run every job: enginebench run FILE --variants {}", names.join(",")));
    }
    for n in notes {
        t.comment(n);
    }
    t.data(&format!("name = {}\nmodel = {}", q(&e.key), q(&base.engine.model)));
    if let Some(r) = &e.runner {
        t.data(&format!("hardware = {}", q(r)));
    }
    if let Some(p) = &e.precision {
        t.data(&format!("precision = {}", q(p)));
    }
    if let Some(img) = &e.image {
        t.data(&format!("image = {}", q(img)));
    }
    t.data("framework = \"vllm\"\n\n[env]");
    for (k, v) in &base.engine.env {
        t.data(&format!("{} = {}", q(k), q(v)));
    }
    t.data(&format!("\n[engine]\nargs = {}", list(&written_args(base).0)));
    if let Some(roles) = &base.roles {
        roles_section(&mut t, roles);
    }
    t.data("\n[sweep]");
    for (k, v) in sweep_keys(base) {
        t.data(&format!("{k} = {v}"));
    }
    if jobs.iter().any(|j| matches!(j.bench, Bench::Fixed(_))) {
        eval_section(&mut t, e, jobs, evals);
    }
    for j in &jobs[1..] {
        t.data(&format!("\n[variants.{}]", q(&j.name)));
        let removed: Vec<String> = flag_names(&base.engine.args);
        if !removed.is_empty() {
            t.data(&format!("args_remove = {}", list(&removed)));
        }
        t.data(&format!("args_add = {}", list(&written_args(j).0)));
        let unset: Vec<String> = base.engine.env.keys().filter(|k| !j.engine.env.contains_key(*k)).cloned().collect();
        if !unset.is_empty() {
            t.data(&format!("env_unset = {}", list(&unset)));
        }
        let env: Vec<String> = j
            .engine
            .env
            .iter()
            .filter(|(k, v)| base.engine.env.get(*k) != Some(*v))
            .map(|(k, v)| format!("{} = {}", q(k), q(v)))
            .collect();
        if !env.is_empty() {
            t.data(&format!("env = {{ {} }}", env.join(", ")));
        }
        let sweep: Vec<String> = sweep_keys(j).into_iter().map(|(k, v)| format!("{k} = {v}")).collect();
        t.data(&format!("sweep = {{ {} }}", sweep.join(", ")));
    }
    t
}

/// `[roles.prefill]` and `[roles.decode]` of a prefill/decode job: each
/// side's flags (after the shared `[engine] args`), its layout (serde's own
/// TOML of [`crate::recipe::layout::NodeLayout`]), the variables it removes
/// and, as a table of its own, the ones it sets over `[env]`.
fn roles_section(t: &mut Doc, roles: &crate::recipe::roles::Roles) {
    for (side, role) in [("prefill", &roles.prefill), ("decode", &roles.decode)] {
        let Some(role) = role else { continue };
        t.data(&format!("\n[roles.{side}]\nargs = {}", list(&role.args)));
        if let Some(layout) = role.layout.as_ref().and_then(|l| Value::try_from(l).ok()) {
            t.data(&format!("layout = {layout}"));
        }
        if !role.env_unset.is_empty() {
            t.data(&format!("env_unset = {}", list(&role.env_unset)));
        }
        if !role.env.is_empty() {
            t.data(&format!("\n[roles.{side}.env]"));
            for (k, v) in &role.env {
                t.data(&format!("{} = {}", q(k), q(v)));
            }
        }
    }
}

/// Distinct flag names of an argument list, in order.
fn flag_names(args: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for a in args.iter().filter(|a| is_flag(a)) {
        let name = a.split_once('=').map_or(a.as_str(), |(n, _)| n).to_string();
        if !out.contains(&name) {
            out.push(name);
        }
    }
    out
}

/// A TOML string literal.
fn q(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

fn list(items: &[String]) -> String {
    format!("[{}]", items.iter().map(|s| q(s)).collect::<Vec<_>>().join(", "))
}

/// What one engine configuration of a job must be: its side of a P/D pair
/// (none for one engine), its flags, environment and layout.
type Wanted = (Option<PdRole>, Vec<String>, BTreeMap<String, String>, NodeLayout);

/// The round trip: the whole recipe must parse to exactly what its data
/// lines alone parse to (every key: nothing a comment carried became
/// data), and the recipe loader must read it and give each job exactly its
/// recorded flags, environment, TP, points and workload settings (the
/// client's or the replay's).
pub fn verify(doc: &Doc, jobs: &[Job]) -> Result<(), String> {
    let whole: toml::Table = toml::from_str(&doc.toml).map_err(|e| format!("the imported recipe is not TOML: {e}"))?;
    let data: toml::Table = toml::from_str(&doc.data).map_err(|e| format!("the imported recipe's data is not TOML: {e}"))?;
    if whole != data {
        let keys = |t: &toml::Table| t.keys().cloned().collect::<Vec<_>>().join(", ");
        return Err(format!("the imported recipe's comments changed its data (keys {} against {}): not written", keys(&whole), keys(&data)));
    }
    let recipe = crate::recipe::Recipe::parse(&doc.toml, "the imported recipe").map_err(|e| format!("{e:#}"))?;
    for (i, j) in jobs.iter().enumerate() {
        let variant = if i == 0 { vec![] } else { vec![j.name.clone()] };
        let configs = recipe.engine_configs(&variant, &crate::recipe::Sweep::default())?;
        let bad = |what: &str| Err(format!("job {}: the written recipe gives different {what} than the launcher", j.name));
        // What each engine configuration must be: the job's one, or each
        // side's (the shared flags and environment, then the side's own).
        let wanted: Vec<Wanted> = match &j.roles {
            None => vec![(None, j.engine.args.clone(), j.engine.env.clone(), recipe.layout.clone().unwrap_or_default())],
            Some(roles) => roles
                .pair()?
                .into_iter()
                .map(|(side, role)| {
                    let args = j.engine.args.iter().chain(&role.args).cloned().collect();
                    let mut env = j.engine.env.clone();
                    env.extend(role.env.clone());
                    env.retain(|k, _| !role.env_unset.contains(k));
                    (Some(side), args, env, role.layout.clone().unwrap_or_default())
                })
                .collect(),
        };
        if configs.len() != wanted.len() {
            return Err(format!("job {}: {} engine configurations, not {}", j.name, configs.len(), wanted.len()));
        }
        for (c, (role, args, env, layout)) in configs.iter().zip(&wanted) {
            if c.role != *role || c.layout != *layout {
                return bad("prefill/decode sides or layout");
            }
            if c.args != *args {
                return bad("flags");
            }
            if c.env != *env || !c.env_unset.iter().all(|k| !env.contains_key(k)) {
                return bad("environment");
            }
            if c.tp != written_args(j).1 {
                return bad("TP");
            }
        }
        let c = &configs[0];
        let s = &c.sweep;
        let mut want: Vec<(u32, u32, u32, u32, u32)> = Vec::new();
        match &j.bench {
            Bench::Fixed(cl) => {
                let workload = if cl.chat { Workload::ChatRandom } else { Workload::Random };
                let same = s.workload == workload
                    && s.length_convention == LengthConvention::Inferencex
                    && s.range_ratio == cl.range_ratio
                    && s.ignore_eos
                    && s.request_rate.is_none()
                    && s.percentiles == INFERENCEX_PERCENTILES;
                if !same {
                    return bad("client settings (workload, length convention, range ratio, ignore-eos, request rate, percentiles)");
                }
                for p in &j.points {
                    want.push((p.isl, p.osl, p.conc, cl.prompts.count(p.conc), INFERENCEX_WARMUPS_PER_CONC * p.conc));
                }
            }
            Bench::Agentic(r) => {
                let Workload::Trace(t) = &s.workload else { return bad("workload") };
                let same = t.path == std::path::Path::new(&dataset_address(r))
                    && t.duration_s == Some(f64::from(r.duration_s))
                    && [t.start_min_ratio, t.start_max_ratio] == REPLAY_START_RATIO
                    && t.warmup_requests_per_lane == r.warmup_requests_per_lane
                    && t.tree_idle_cap_s == Some(f64::from(r.tree_idle_cap_s))
                    && t.system_idle_cap_s == Some(f64::from(REPLAY_SYSTEM_IDLE_CAP_S))
                    && t.cache_bust
                    && t.split_chains == r.split_chains
                    && t.seed == REPLAY_SEED
                    && !s.request_budget;
                if !same {
                    return bad("replay settings (dataset, duration, start ratio, warm-ups, idle caps, cache bust, seed, request budget)");
                }
            }
        }
        let mut got: Vec<(u32, u32, u32, u32, u32)> = c.points.iter().map(|p| (p.isl, p.osl, p.conc, p.num_prompts, p.warmups)).collect();
        if matches!(j.bench, Bench::Agentic(_)) {
            // A replay's points are concurrencies: its length is the duration.
            want = j.points.iter().map(|p| (0, 0, p.conc, 0, 0)).collect();
            got = c.points.iter().map(|p| (p.isl, p.osl, p.conc, 0, 0)).collect();
        }
        want.sort_unstable();
        got.sort_unstable();
        if want != got {
            return bad("points");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A comment cannot carry data: its control characters are escaped, and
    /// the round trip refuses a recipe whose comments hold a TOML line.
    #[test]
    fn comments_stay_comments() {
        let mut d = Doc::default();
        d.comment("image x\nstart_timeout_s = 1.0\r\u{1b}[2J\tend");
        d.data("name = \"n\"");
        assert_eq!(d.toml, "# image x\\nstart_timeout_s = 1.0\\r\\u{1b}[2J\tend\nname = \"n\"\n");
        let whole: toml::Table = toml::from_str(&d.toml).unwrap();
        assert_eq!(whole.keys().collect::<Vec<_>>(), ["name"]);
        // Written raw, the newline would start a key of its own: verify says so.
        let forged = Doc { toml: "# image x\nstart_timeout_s = 1.0\nname = \"n\"\n".into(), data: "name = \"n\"\n".into() };
        let err = verify(&forged, &[]).unwrap_err();
        assert!(err.contains("comments changed its data") && err.contains("start_timeout_s"), "{err}");
    }
}
