//! What an interpreter's vLLM is, without building an engine: the report
//! the shim's `doctor()` (python-shim/enginebench_shim/engine.py) writes and
//! the worker sends back, typed here for both ends. `enginebench doctor`
//! prints it, and every command that starts engines asks for it before its
//! result folder exists ([`DoctorReport::cannot_serve`]).

use serde::{Deserialize, Serialize};

use super::engine_info::CompatReport;

/// The interpreter's vLLM, torch, platform, devices and compatibility items.
/// Every problem is reported, not raised: `missing` lists packages `import`
/// cannot find, `errors` the rest; `compat` and `platform` need vLLM,
/// `devices` needs torch.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DoctorReport {
    /// `vllm.__version__`, e.g. "0.32.0+cpu".
    pub vllm: Option<String>,
    /// The folder vLLM was imported from.
    pub vllm_path: Option<String>,
    /// `torch.__version__`, e.g. "2.14.0+cu130".
    pub torch: Option<String>,
    /// What the build is for, in words ("its CUDA 13.0 build (torch
    /// 2.14.0+cu130)"), as torch says; `None` without torch.
    #[serde(default)]
    pub build: Option<String>,
    /// vLLM's device type on this machine (`cpu`, `cuda`, `rocm`, ...);
    /// `None` when vLLM does not import or found no platform.
    pub platform: Option<String>,
    /// Why vLLM found no platform to run on (its `UnspecifiedPlatform`: the
    /// CUDA build on a machine without a GPU), in words; `None` otherwise.
    #[serde(default)]
    pub no_platform: Option<String>,
    /// The devices torch sees; `None` when torch does not import or the
    /// query failed.
    pub devices: Option<Devices>,
    /// Per vLLM internal the shim uses: where it was found, or what is off
    /// without it; `None` when vLLM does not import.
    pub compat: Option<CompatReport>,
    /// How an engine would be stepped, as far as it can be told without one
    /// (python-shim/enginebench_shim/compat.py `core_path_available`);
    /// `None` when vLLM does not import.
    #[serde(default)]
    pub step_path: Option<StepPath>,
    /// Packages `import` cannot find (`torch`, `vllm`).
    #[serde(default)]
    pub missing: Vec<String>,
    /// Every other problem, in words.
    #[serde(default)]
    pub errors: Vec<String>,
}

/// The devices torch sees.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Devices {
    /// `cuda`, `rocm` or `cpu` (none visible).
    pub kind: String,
    pub count: u32,
    /// One per device, e.g. "NVIDIA H200".
    pub names: Vec<String>,
}

/// The step path doctor expects: `core` (vLLM's engine core driven
/// directly) or `engine` (`LLMEngine.step()`), with why not `core`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StepPath {
    pub path: String,
    #[serde(default)]
    pub reason: Option<String>,
}

/// The compatibility item whose path is the `vllm serve` parser (what
/// `recipe check` parses flags with).
pub const SERVE_PARSER: &str = "serve_parser";

/// Why an interpreter's vLLM cannot serve, one cause each (the shim's
/// `VllmUnusable` causes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CannotServe {
    /// `vllm` or `torch` is missing, or is there and does not import.
    Import(String),
    /// A required internal is missing: a vLLM outside the supported range.
    Range(String),
    /// vLLM imports but found no platform (no device it supports here).
    Platform(String),
}

impl CannotServe {
    /// The message, in words.
    pub fn message(&self) -> &str {
        match self {
            CannotServe::Import(m) | CannotServe::Range(m) | CannotServe::Platform(m) => m,
        }
    }
}

impl DoctorReport {
    /// Every reason this interpreter's vLLM cannot serve here, in the order
    /// a reader fixes them (empty: an engine can start): the import problems,
    /// the required internals missing, then the platform. Packages in
    /// `missing` are not repeated here (the interpreter's probe names them
    /// before any worker starts).
    pub fn cannot_serve(&self) -> Vec<CannotServe> {
        let mut out: Vec<CannotServe> = self.errors.iter().cloned().map(CannotServe::Import).collect();
        for (name, item) in self.compat.iter().flatten() {
            if item.found.is_none() && item.required {
                out.push(CannotServe::Range(format!("vLLM internal {name} missing: {}", item.missing.as_deref().unwrap_or(""))));
            }
        }
        if let Some(p) = &self.no_platform {
            out.push(CannotServe::Platform(p.clone()));
        }
        out
    }

    /// The compatibility items that are missing but not required: the
    /// features off on this vLLM, as "name (what is off)".
    pub fn degraded(&self) -> Vec<String> {
        self.compat
            .iter()
            .flatten()
            .filter(|(_, i)| i.found.is_none() && !i.required)
            .map(|(n, i)| format!("{n} ({})", i.loses.as_deref().unwrap_or("off")))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_shims_report_and_names_each_cause() {
        // The shape of the shim's doctor() on vLLM 0.34's CUDA build without a GPU.
        let text = r#"{"vllm": "0.34.0", "vllm_path": "/v/vllm", "torch": "2.14.0+cu130",
            "build": "its CUDA 13.0 build (torch 2.14.0+cu130)", "platform": null,
            "no_platform": "vLLM 0.34.0 in /v/bin/python found no platform to run on",
            "devices": {"kind": "cpu", "count": 0, "names": []},
            "compat": {"serve_parser": {"found": "vllm.entrypoints.cli.serve:ServeSubcommand", "missing": null, "loses": null, "required": true},
                       "WorkerProfiler": {"found": null, "missing": "no module", "loses": "--profile through vLLM's worker profiler", "required": false}},
            "missing": [], "errors": []}"#;
        let r: DoctorReport = serde_json::from_str(text).unwrap();
        assert_eq!(r.cannot_serve(), vec![CannotServe::Platform("vLLM 0.34.0 in /v/bin/python found no platform to run on".into())]);
        assert_eq!(r.degraded(), vec!["WorkerProfiler (--profile through vLLM's worker profiler)".to_string()]);
        assert_eq!(r.compat.as_ref().unwrap()[SERVE_PARSER].found.as_deref(), Some("vllm.entrypoints.cli.serve:ServeSubcommand"));

        let mut range = r.clone();
        range.no_platform = None;
        range.compat.as_mut().unwrap().get_mut(SERVE_PARSER).unwrap().found = None;
        range.compat.as_mut().unwrap().get_mut(SERVE_PARSER).unwrap().missing = Some("outside the supported range".into());
        assert!(matches!(&range.cannot_serve()[..], [CannotServe::Range(m)] if m.contains("serve_parser missing: outside")));

        let broken = DoctorReport { errors: vec!["vllm is installed but does not import: ImportError: x".into()], ..DoctorReport::default() };
        assert!(matches!(&broken.cannot_serve()[..], [CannotServe::Import(_)]));
        assert!(DoctorReport::default().cannot_serve().is_empty());
    }
}
