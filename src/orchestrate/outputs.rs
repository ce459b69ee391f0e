//! The files of a run folder (see docs/output.md).

use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::Serialize;

use crate::protocol::{RawPoint, TurnInfo};
use crate::report::files::{JsonLines, LastWrite, write_json_atomic, write_json_last};
use crate::report::result::{JobResult, PointResult, RunResult};

/// One request as written to `requests.jsonl`.
#[derive(Serialize)]
struct RequestLine<'a> {
    /// The run's attempt that wrote the line: 0 the first run, k after the
    /// k-th `--resume` (see [`OutputFiles::append_point`]).
    attempt: u32,
    job: usize,
    label: &'a str,
    point: usize,
    isl: u32,
    osl: u32,
    conc: u32,
    request: usize,
    input_tokens: u32,
    requested_output_tokens: u32,
    output_tokens: u32,
    send_s: f64,
    /// How long the admission budget held the request back before
    /// add_request (counted in its TTFT and E2EL), ms; absent when it went
    /// in the gap it became due.
    #[serde(skip_serializing_if = "Option::is_none")]
    held_ms: Option<f64>,
    ttft_ms: Option<f64>,
    tpot_ms: Option<f64>,
    e2el_ms: Option<f64>,
    itl_ms: Vec<f64>,
    error: &'a Option<String>,
    /// vLLM's own TTFT / queue time for this request, ms.
    vllm_ttft_ms: Option<f64>,
    vllm_queued_ms: Option<f64>,
    /// Tokens in each ITL gap's chunk (parallel to `itl_ms`); absent when
    /// every chunk carried one token (no speculative decoding).
    #[serde(skip_serializing_if = "Option::is_none")]
    itl_chunk_tokens: Option<&'a [u32]>,
    /// A P/D job's request: its prefill worker, TTFT split and prompt
    /// tokens that arrived by transfer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pd: Option<PdLine>,
    /// Generated token ids (`ab`'s lossless check, `run --record-token-ids`).
    #[serde(skip_serializing_if = "Option::is_none")]
    token_ids: Option<&'a [u32]>,
    /// Prompt tokens served from the prefix cache (vLLM's num_cached_tokens).
    #[serde(skip_serializing_if = "Option::is_none")]
    cached_tokens: Option<u32>,
    /// Session workloads: which trace / conversation, session tree, lane,
    /// stream (0 root, k subagent) and turn the request was, its phase
    /// (primer, warmup, measured) and the prompt tokens an infinite cache
    /// would hold.
    #[serde(skip_serializing_if = "Option::is_none")]
    trace_name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none", flatten)]
    turn: Option<&'a TurnInfo>,
}

/// One request's way through a P/D pair in `requests.jsonl`
/// ([`crate::metrics::pd::TtftParts`] in ms; the parts add up to `ttft_ms`).
#[derive(Serialize)]
struct PdLine {
    prefill_worker: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    prefill_queue_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prefill_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    handoff_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    kv_wait_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    first_token_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    external_cached_tokens: Option<u32>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    recomputed: bool,
}

impl PdLine {
    fn of(r: &crate::protocol::RequestRecord, p: &crate::protocol::pd::PdRequest, decode: Option<&crate::protocol::EngineTiming>) -> PdLine {
        let parts = crate::metrics::pd::ttft_parts(r, p, decode);
        let ms = |f: fn(&crate::metrics::pd::TtftParts) -> f64| parts.as_ref().map(|t| f(t) * 1000.0);
        PdLine {
            prefill_worker: p.prefill_worker,
            prefill_queue_ms: ms(|t| t.prefill_queue_s),
            prefill_ms: ms(|t| t.prefill_compute_s),
            handoff_ms: ms(|t| t.handoff_s),
            kv_wait_ms: ms(|t| t.kv_wait_s),
            first_token_ms: ms(|t| t.first_token_s),
            external_cached_tokens: p.external_cached_tokens,
            recomputed: p.recomputed,
        }
    }
}

/// Where lm-eval writes its own files for the job `label`:
/// `<run>/lm_eval/<label>/` (the label with anything but `[A-Za-z0-9._-]` as `_`).
pub fn lm_eval_dir(run_dir: &Path, label: &str) -> PathBuf {
    let safe: String = label.chars().map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '_' }).collect();
    run_dir.join("lm_eval").join(safe)
}

/// lm-eval's files in `dir`, relative to the run folder, sorted.
pub fn lm_eval_files(run_dir: &Path, dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .map(|p| p.strip_prefix(run_dir).unwrap_or(&p).display().to_string())
        .collect();
    out.sort();
    out
}

/// The files of a run folder (see docs/output.md).
pub struct OutputFiles {
    /// The run folder: worker logs and telemetry series are written here.
    pub dir: PathBuf,
    /// Where the JSON-lines files and the result document go: the run folder,
    /// or a task's own folder (`tasks/<K>/`) when the job runs in a task of
    /// a parallel or Slurm executor, merged into the run folder afterwards.
    pub lines_dir: PathBuf,
    points: JsonLines,
    requests: JsonLines,
    steps: Option<JsonLines>,
    pub samples: Option<JsonLines>,
    /// `--resume` count of this run (file name suffixes keep earlier files).
    pub resumes: u32,
}

impl OutputFiles {
    pub fn create(dir: &Path, step_trace: bool) -> Result<OutputFiles> {
        Self::for_task(dir, dir, step_trace)
    }

    /// The files of a job run in a task: logs and telemetry in `dir`, the
    /// lines and the result in `lines_dir`.
    pub fn for_task(dir: &Path, lines_dir: &Path, step_trace: bool) -> Result<OutputFiles> {
        Ok(OutputFiles {
            dir: dir.to_path_buf(),
            lines_dir: lines_dir.to_path_buf(),
            points: JsonLines::create(lines_dir.join("points.jsonl"))?,
            requests: JsonLines::create(lines_dir.join("requests.jsonl"))?,
            steps: if step_trace { Some(JsonLines::create(lines_dir.join("steps.jsonl"))?) } else { None },
            samples: None,
            resumes: 0,
        })
    }

    /// File name suffix of job `index`'s per-job files (worker log,
    /// telemetry): none for a single job, `-N` otherwise, `-rK` after resumes.
    pub fn suffix(&self, index: usize, jobs: usize) -> String {
        let job = if jobs > 1 { format!("-{index}") } else { String::new() };
        let resume = if self.resumes > 0 { format!("-r{}", self.resumes) } else { String::new() };
        format!("{job}{resume}")
    }

    /// Writes the result document atomically (see [`write_json_atomic`]).
    pub fn write_result(&self, result: &RunResult) -> Result<()> {
        write_json_atomic(&self.lines_dir.join("result.json"), result)
    }

    /// Writes the result document a last time after a write error, in
    /// place if there is no room for a second copy (see [`write_json_last`]).
    pub fn write_result_last(&self, result: &RunResult) -> Result<LastWrite> {
        write_json_last(&self.lines_dir.join("result.json"), result)
    }

    /// Appends point `index` of job `job_index` to points.jsonl, its
    /// requests to requests.jsonl and its steps to steps.jsonl: all of it
    /// or nothing (on an error every file is cut back to where it was).
    /// Every line carries `attempt` (this run's [`OutputFiles::resumes`]):
    /// after `--resume` the files keep the lines of the interrupted attempt
    /// (a partial or failed point) beside the re-run's, and of a point's
    /// lines those of its highest attempt are the current ones (the ones
    /// result.json holds).
    ///
    /// Errors: a file cannot be written; the message names it.
    pub fn append_point(&mut self, job_index: usize, job: &JobResult, index: usize, point: &PointResult, raw: &RawPoint) -> Result<()> {
        let marks = (self.points.mark()?, self.requests.mark()?, self.steps.as_ref().map(JsonLines::mark).transpose()?);
        let appended = self.append_point_lines(job_index, job, index, point, raw);
        if appended.is_err() {
            self.points.rollback(marks.0);
            self.requests.rollback(marks.1);
            if let (Some(steps), Some(m)) = (self.steps.as_mut(), marks.2) {
                steps.rollback(m);
            }
        }
        appended
    }

    fn append_point_lines(
        &mut self,
        job_index: usize,
        job: &JobResult,
        index: usize,
        point: &PointResult,
        raw: &RawPoint,
    ) -> Result<()> {
        #[derive(Serialize)]
        struct Tagged<'a, T: Serialize> {
            attempt: u32,
            job: usize,
            label: &'a str,
            point: usize,
            #[serde(flatten)]
            item: &'a T,
        }
        let label = job.label.as_str();
        let attempt = self.resumes;
        self.points.append(&Tagged { attempt, job: job_index, label, point: index, item: point })?;
        let ms = |s: Option<f64>| s.map(|s| s * 1000.0);
        for (i, r) in raw.records.iter().enumerate() {
            let vllm = raw.engine_timings.get(i).copied().flatten();
            self.requests.append(&RequestLine {
                attempt,
                job: job_index,
                label,
                point: index,
                isl: point.isl,
                osl: point.osl,
                conc: point.conc,
                request: i,
                input_tokens: r.input_tokens,
                requested_output_tokens: raw.requested_output_lens.get(i).copied().unwrap_or(0),
                output_tokens: r.output_tokens,
                send_s: r.send_s,
                held_ms: (r.held_s > 0.0).then_some(r.held_s * 1000.0),
                ttft_ms: ms(r.ttft_s()),
                tpot_ms: ms(r.tpot_s()),
                e2el_ms: ms(r.e2el_s()),
                itl_ms: r.itl_s.iter().map(|s| s * 1000.0).collect(),
                error: &r.error,
                vllm_ttft_ms: vllm.map(|t| t.ttft_s * 1000.0),
                vllm_queued_ms: vllm.map(|t| t.queued_s * 1000.0),
                itl_chunk_tokens: (!r.chunk_tokens.is_empty()).then_some(r.chunk_tokens.as_slice()),
                pd: raw.pd.as_ref().and_then(|pd| pd.requests.get(i)).map(|p| PdLine::of(r, p, vllm.as_ref())),
                token_ids: raw.token_ids.get(i).map(Vec::as_slice),
                cached_tokens: r.cached_tokens,
                trace_name: raw.turns.get(i).and_then(|t| raw.trace_names.get(t.trace as usize)).map(String::as_str),
                turn: raw.turns.get(i),
            })?;
        }
        if let Some(steps) = self.steps.as_mut() {
            for step in &raw.steps {
                steps.append(&Tagged { attempt, job: job_index, label, point: index, item: step })?;
            }
        }
        Ok(())
    }
}

