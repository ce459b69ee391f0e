//! The worker process: reads a [`Job`] from stdin, embeds Python, builds one
//! vLLM engine, runs the points and the eval on it, and reports [`Message`]s.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::FromRawFd;
use std::time::Instant;

use anyhow::{Context, Result};

use super::protocol::{EvalCompletion, EvalJob, Job, Message, PointSpec};
use crate::engine::pyerror::PythonError;
use crate::engine::vllm::VllmEngine;
use crate::engine::{StepEngine, interpreter};
use crate::metrics::point_figures;
use crate::report::result::PointResult;
use crate::workload::{Request, RequestIds, random_prompts, run_closed_loop};

/// The message channel: the worker's original stdout. Everything else that
/// writes to fd 1 (Python, vLLM, C libraries) is sent to stderr instead.
struct Channel(File);

impl Channel {
    fn take_stdout() -> Result<Channel> {
        // SAFETY: plain fd juggling at start-up, before any other thread exists.
        unsafe {
            let fd = libc::dup(1);
            if fd < 0 || libc::dup2(2, 1) < 0 {
                anyhow::bail!("cannot redirect stdout: {}", std::io::Error::last_os_error());
            }
            Ok(Channel(File::from_raw_fd(fd)))
        }
    }

    fn send(&mut self, msg: &Message) {
        let mut line = serde_json::to_vec(msg).expect("messages serialise");
        line.push(b'\n');
        // If the orchestrator is gone there is nobody to tell; stop quietly.
        if self.0.write_all(&line).and_then(|_| self.0.flush()).is_err() {
            std::process::exit(1);
        }
    }
}

/// Entry point of `enginebench __worker`. Returns the process exit code.
pub fn main() -> i32 {
    let mut channel = match Channel::take_stdout() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("enginebench worker: {e:#}");
            return 1;
        }
    };
    match run(&mut channel) {
        Ok(()) => {
            channel.send(&Message::Done);
            0
        }
        Err(e) => {
            let py = e.downcast_ref::<PythonError>();
            let traceback = py.and_then(|p| p.traceback.clone());
            let bad_input = py.is_some_and(PythonError::is_flag_error);
            let message = format!("{e:#}");
            eprintln!("enginebench worker failed: {message}");
            channel.send(&Message::Error { message, traceback, bad_input });
            1
        }
    }
}

fn run(channel: &mut Channel) -> Result<()> {
    let mut input = String::new();
    std::io::stdin().read_to_string(&mut input)?;
    let job: Job = serde_json::from_str(&input).context("reading the job from stdin")?;

    let started = Instant::now();
    interpreter::initialize(&job.python)?;
    let python = job.python.to_string_lossy().into_owned();
    let mut engine = VllmEngine::build(&job.engine_argv, &python).context("building the vLLM engine")?;
    channel.send(&Message::Ready {
        engine: engine.info.clone(),
        engine_start_s: started.elapsed().as_secs_f64(),
    });

    let mut ids = RequestIds::default();
    for spec in &job.points {
        let point = run_point(&mut engine, spec, &mut ids, channel)
            .with_context(|| format!("point conc={} isl={} osl={}", spec.conc, spec.isl, spec.osl))?;
        channel.send(&Message::Point { point });
    }
    if let Some(eval) = &job.eval {
        run_eval(&mut engine, eval, &mut ids, channel).context("running the eval")?;
    }
    engine.shutdown()?;
    Ok(())
}

fn run_point(
    engine: &mut VllmEngine,
    spec: &PointSpec,
    ids: &mut RequestIds,
    channel: &mut Channel,
) -> Result<PointResult> {
    let total = (spec.warmups + spec.num_prompts) as usize;
    let prompts = random_prompts(spec.seed, total, spec.isl as usize, &engine.allowed_token_ids);
    let requests: Vec<Request> = prompts
        .iter()
        .map(|p| Request::Tokens { prompt: p, max_tokens: spec.osl, ignore_eos: true })
        .collect();
    let (warmup, measured) = requests.split_at(spec.warmups as usize);
    let conc = spec.conc as usize;

    if !warmup.is_empty() {
        let phase = format!("warm-up conc {}", spec.conc);
        let total = warmup.len() as u64;
        run_closed_loop(engine, warmup, conc, ids, &mut |done| {
            channel.send(&Message::Progress { phase: phase.clone(), done: done as u64, total })
        })?;
    }
    let phase = format!("conc {}", spec.conc);
    let total = measured.len() as u64;
    let outcome = run_closed_loop(engine, measured, conc, ids, &mut |done| {
        channel.send(&Message::Progress { phase: phase.clone(), done: done as u64, total })
    })?;
    let steps = outcome.step_s.len() as u64;
    let mean_step_ms = crate::metrics::stats::mean(&outcome.step_s) * 1000.0;
    Ok(PointResult {
        conc: spec.conc,
        isl: spec.isl,
        osl: spec.osl,
        num_prompts: spec.num_prompts,
        warmups: spec.warmups,
        figures: point_figures(&outcome.records, outcome.duration_s),
        steps,
        mean_step_ms,
    })
}

fn run_eval(
    engine: &mut impl StepEngine,
    eval: &EvalJob,
    ids: &mut RequestIds,
    channel: &mut Channel,
) -> Result<()> {
    let requests: Vec<Request> = eval
        .prompts
        .iter()
        .map(|p| Request::Text { prompt: p, max_tokens: eval.max_tokens, stop: &eval.stop })
        .collect();
    let total = requests.len() as u64;
    let outcome = run_closed_loop(engine, &requests, eval.concurrency as usize, ids, &mut |done| {
        channel.send(&Message::Progress { phase: "gsm8k".into(), done: done as u64, total })
    })?;
    let completions = outcome
        .completions
        .into_iter()
        .zip(&outcome.records)
        .map(|(text, r)| EvalCompletion { text: text.unwrap_or_default(), output_tokens: r.output_tokens })
        .collect();
    channel.send(&Message::Eval { completions, duration_s: outcome.duration_s });
    Ok(())
}
