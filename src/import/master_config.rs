//! One entry of an InferenceX master config (`configs/*-master.yaml`):
//!
//! ```yaml
//! minimaxm3-fp4-mi355x-vllm:
//!   image: vllm/vllm-openai-rocm:nightly-...
//!   model: amd/MiniMax-M3-MXFP4
//!   runner: mi355x
//!   precision: fp4
//!   framework: vllm
//!   scenarios:
//!     fixed-seq-len:
//!     - isl: 8192
//!       osl: 1024
//!       search-space:
//!       - { tp: 4, conc-start: 1, conc-end: 512 }
//! ```
//! Older files list `seq-len-configs:` at the entry's top level instead of
//! `scenarios: fixed-seq-len:`; `conc-list: [...]` may replace the range.
//!
//! Agentic entries list `scenarios: agentic-coding:` instead: configs with
//! a DRAM share for KV offload and a search space whose entries also name
//! the KV offload (`kv-offloading: none|dram`, `kv-offload-backend: {name,
//! version}`) and an optional `router: {name, version}`
//! (InferenceX utils/matrix_logic/validation.py `AgenticCodingConfig`):
//!
//! ```yaml
//!     agentic-coding:
//!     - dram-utilization: 0.95
//!       search-space:
//!       - { tp: 8, kv-offloading: dram, kv-offload-backend: { name: vllm-simple }, spec-decoding: mtp, conc-list: [1, 4] }
//! ```

use yaml_rust2::{Yaml, YamlLoader};

/// A search-space entry: TP and its concurrencies.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Space {
    pub tp: Option<u32>,
    pub ep: Option<u32>,
    /// `[start, end]` doubling range, or an explicit list.
    pub conc_range: Option<[u32; 2]>,
    pub conc_list: Option<Vec<u32>>,
    pub spec_decoding: Option<String>,
    /// `dp-attn`: data-parallel attention (InferenceX's default false).
    pub dp_attn: Option<bool>,
    /// `pp`, `dcp-size`, `pcp-size` (InferenceX's default 1).
    pub pp: Option<u32>,
    pub dcp: Option<u32>,
    pub pcp: Option<u32>,
    /// Agentic: `none` or `dram`.
    pub kv_offloading: Option<String>,
    /// Agentic: the offload backend (`{name, version?}`).
    pub kv_offload_backend: Option<Component>,
    /// Agentic: a router in front of the engine (`{name, version}`).
    pub router: Option<Component>,
    /// `kv-p2p-transfer` (multi-node; passed through when present).
    pub kv_p2p_transfer: Option<String>,
}

/// A separately versioned component the search space names
/// (`kv-offload-backend`, `router`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Component {
    pub name: String,
    pub version: Option<String>,
}

impl Component {
    /// The JSON InferenceX's workflow passes on (GitHub's `toJson`: keys in
    /// order, two-space indents), e.g. `KV_OFFLOAD_BACKEND_METADATA`.
    pub fn to_json(&self) -> String {
        let mut m = serde_json::Map::new();
        m.insert("name".into(), serde_json::Value::String(self.name.clone()));
        if let Some(v) = &self.version {
            m.insert("version".into(), serde_json::Value::String(v.clone()));
        }
        serde_json::to_string_pretty(&serde_json::Value::Object(m)).unwrap_or_default()
    }
}

/// One `agentic-coding` config: its DRAM share and search space.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AgenticConfig {
    /// `dram-utilization`: the share (0, 1] of the node's CPU DRAM a
    /// `kv-offloading: dram` point may use.
    pub dram_utilization: Option<f64>,
    pub spaces: Vec<Space>,
}

impl Space {
    /// The concurrencies InferenceX's sweep generator makes: the list, or
    /// start, 2 start, 4 start, ... up to end (its default step is x2).
    pub fn concs(&self) -> Vec<u32> {
        match (&self.conc_list, self.conc_range) {
            (Some(l), _) => l.clone(),
            (None, Some([a, b])) => std::iter::successors(Some(a.max(1)), |c| c.checked_mul(2)).take_while(|c| *c <= b).collect(),
            (None, None) => Vec::new(),
        }
    }
}

/// One ISL/OSL scenario with its search space.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    pub isl: u32,
    pub osl: u32,
    pub spaces: Vec<Space>,
}

/// The fields of an entry enginebench uses.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Entry {
    pub key: String,
    pub model: Option<String>,
    pub image: Option<String>,
    pub precision: Option<String>,
    pub runner: Option<String>,
    pub framework: Option<String>,
    /// `model-prefix`: the first part of the launcher's name (`dsv4` in `dsv4_fp4_mi355x_vllm.sh`).
    pub model_prefix: Option<String>,
    pub multinode: bool,
    /// True when the entry has `agentic-coding` scenarios.
    pub agentic: bool,
    /// The fixed-seq-len scenarios.
    pub scenarios: Vec<Scenario>,
    /// The agentic-coding configs.
    pub agentic_configs: Vec<AgenticConfig>,
}

/// The top-level keys of a master config, in file order (for finding the
/// file that defines an entry).
pub fn keys(yaml: &str) -> Result<Vec<String>, String> {
    let docs = YamlLoader::load_from_str(yaml).map_err(|e| format!("invalid YAML: {e}"))?;
    Ok(docs
        .first()
        .and_then(Yaml::as_hash)
        .map(|h| h.keys().filter_map(Yaml::as_str).map(String::from).collect())
        .unwrap_or_default())
}

/// Reads entry `key` from master-config YAML text.
///
/// Errors: YAML syntax (with line/column), a missing key (with the nearest
/// keys), or a scenario without isl/osl.
pub fn read_entry(yaml: &str, key: &str) -> Result<Entry, String> {
    let docs = YamlLoader::load_from_str(yaml).map_err(|e| format!("invalid YAML: {e}"))?;
    let doc = docs.first().ok_or("empty YAML file")?;
    let entry = &doc[key];
    if entry.is_badvalue() {
        let keys: Vec<&str> = doc.as_hash().map(|h| h.keys().filter_map(Yaml::as_str).collect()).unwrap_or_default();
        let mut near: Vec<&str> = keys.iter().copied().filter(|k| k.contains(key) || key.contains(*k)).collect();
        if near.is_empty() {
            near = keys.iter().copied().filter(|k| common_prefix(k, key) >= 6).take(5).collect();
        }
        return Err(format!(
            "no entry {key:?} in the master config{}",
            if near.is_empty() { String::new() } else { format!("; similar keys: {}", near.join(", ")) }
        ));
    }
    let s = |k: &str| entry[k].as_str().map(String::from);
    let scenarios_yaml = match &entry["scenarios"]["fixed-seq-len"] {
        Yaml::Array(a) => a.clone(),
        _ => entry["seq-len-configs"].as_vec().cloned().unwrap_or_default(),
    };
    let int = |y: &Yaml| y.as_i64().and_then(|v| u32::try_from(v).ok());
    let scenarios = scenarios_yaml
        .iter()
        .map(|sc| {
            let (isl, osl) = (int(&sc["isl"]), int(&sc["osl"]));
            let (Some(isl), Some(osl)) = (isl, osl) else {
                return Err(format!("entry {key}: a fixed-seq-len scenario lacks isl/osl"));
            };
            Ok(Scenario { isl, osl, spaces: spaces(&sc["search-space"]) })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let agentic_configs = entry["scenarios"]["agentic-coding"]
        .as_vec()
        .map(|v| {
            v.iter()
                .map(|c| AgenticConfig {
                    dram_utilization: c["dram-utilization"].as_f64().or(c["dram-utilization"].as_i64().map(|i| i as f64)),
                    spaces: spaces(&c["search-space"]),
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(Entry {
        key: key.to_string(),
        model: s("model"),
        image: s("image"),
        precision: s("precision"),
        runner: s("runner"),
        framework: s("framework"),
        model_prefix: s("model-prefix"),
        multinode: entry["multinode"].as_bool().unwrap_or(false),
        agentic: !entry["scenarios"]["agentic-coding"].is_badvalue(),
        scenarios,
        agentic_configs,
    })
}

/// The search-space entries of a scenario or agentic config.
pub fn spaces(y: &Yaml) -> Vec<Space> {
    let int = |y: &Yaml| y.as_i64().and_then(|v| u32::try_from(v).ok());
    let text = |y: &Yaml| y.as_str().map(String::from).or(y.as_i64().map(|i| i.to_string())).or(y.as_f64().map(|f| f.to_string()));
    let component = |y: &Yaml| text(&y["name"]).map(|name| Component { name, version: text(&y["version"]) });
    y.as_vec()
        .map(|v| {
            v.iter()
                .map(|sp| Space {
                    tp: int(&sp["tp"]),
                    ep: int(&sp["ep"]),
                    conc_range: int(&sp["conc-start"]).zip(int(&sp["conc-end"])).map(|(a, b)| [a, b]),
                    conc_list: sp["conc-list"].as_vec().map(|l| l.iter().filter_map(int).collect()),
                    spec_decoding: sp["spec-decoding"].as_str().map(String::from),
                    dp_attn: sp["dp-attn"].as_bool(),
                    pp: int(&sp["pp"]),
                    dcp: int(&sp["dcp-size"]),
                    pcp: int(&sp["pcp-size"]),
                    kv_offloading: sp["kv-offloading"].as_str().map(String::from),
                    kv_offload_backend: component(&sp["kv-offload-backend"]),
                    router: component(&sp["router"]),
                    kv_p2p_transfer: text(&sp["kv-p2p-transfer"]),
                })
                .collect()
        })
        .unwrap_or_default()
}

fn common_prefix(a: &str, b: &str) -> usize {
    a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    const YAML: &str = r#"
demo-fp4-mi355x-vllm:
  image: example/vllm-rocm:nightly-1
  model: example/Demo-MXFP4
  model-prefix: demo
  runner: mi355x
  precision: fp4
  framework: vllm
  multinode: false
  scenarios:
    fixed-seq-len:
    - isl: 1024
      osl: 1024
      search-space:
      - { tp: 8, conc-start: 1, conc-end: 32 }
      - { tp: 4, ep: 4, conc-start: 1, conc-end: 256 }
    - isl: 8192
      osl: 1024
      search-space:
      - { tp: 4, conc-list: [4, 64] }
old-style-entry:
  model: example/Old
  runner: mi300x
  precision: fp8
  seq-len-configs:
  - isl: 1024
    osl: 8192
    search-space:
    - { tp: 8, conc-start: 4, conc-end: 64 }
"#;

    #[test]
    fn reads_new_layout() {
        let e = read_entry(YAML, "demo-fp4-mi355x-vllm").unwrap();
        assert_eq!(e.model.as_deref(), Some("example/Demo-MXFP4"));
        assert_eq!(e.runner.as_deref(), Some("mi355x"));
        assert_eq!(e.precision.as_deref(), Some("fp4"));
        assert_eq!(e.scenarios.len(), 2);
        assert_eq!(e.scenarios[0].spaces[1], Space { tp: Some(4), ep: Some(4), conc_range: Some([1, 256]), ..Space::default() });
        assert_eq!(e.scenarios[1].spaces[0].conc_list, Some(vec![4, 64]));
        assert_eq!(e.scenarios[0].spaces[0].concs(), vec![1, 2, 4, 8, 16, 32]);
        assert_eq!(e.model_prefix.as_deref(), Some("demo"));
        assert!(!e.multinode && !e.agentic);
    }

    #[test]
    fn reads_old_layout_and_names_missing_keys() {
        let e = read_entry(YAML, "old-style-entry").unwrap();
        assert_eq!((e.scenarios[0].isl, e.scenarios[0].osl), (1024, 8192));
        let err = read_entry(YAML, "demo-fp4-mi355x").unwrap_err();
        assert!(err.contains("demo-fp4-mi355x-vllm"), "{err}");
        assert!(read_entry("a: [", "a").unwrap_err().contains("invalid YAML"));
    }
}
