//! A P/D point's own figures (issue 44, docs/pd.md): TTFT split at the
//! hand-off, the KV connector's transfers, what arrived by transfer, the
//! spread over prefill workers, and per-role throughput as InferenceX's
//! `utils/process_result.py` computes it for disaggregated runs.

use serde::{Deserialize, Serialize};

use super::point::PointFigures;
use super::stats::Summary;
use crate::protocol::pd::{KvTransferStats, PdRaw};
use crate::protocol::{EngineTiming, RequestRecord};

/// One request's TTFT in parts, s. They add up to the harness's TTFT.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TtftParts {
    /// Queueing before the prefill worker computes: the admission
    /// budget's hold of the request (`RequestRecord::held_s`), then vLLM's
    /// queue time on the prefill engine (SCHEDULED - QUEUED).
    pub prefill_queue_s: f64,
    /// The rest of the prefill worker's time: compute and the step that
    /// returned the finished output.
    pub prefill_compute_s: f64,
    /// Ours: the prompt to the prefill worker, the parameters back, the
    /// decode engine's add (two loopback hops and the loops' polling).
    pub handoff_s: f64,
    /// vLLM's queue time on the decode engine: it schedules a request only
    /// once its KV has arrived (the async load of the connector).
    pub kv_wait_s: f64,
    /// From scheduled on the decode engine to the first token at the driver.
    pub first_token_s: f64,
}

/// Splits one request's TTFT (`None` when a part was not recorded, or the
/// request failed or was recomputed).
pub fn ttft_parts(r: &RequestRecord, pd: &crate::protocol::pd::PdRequest, decode: Option<&EngineTiming>) -> Option<TtftParts> {
    if pd.recomputed || r.error.is_some() {
        return None;
    }
    let ttft = r.first_token_s? - r.send_s;
    let (to_decode, prefill) = (pd.to_decode_s?, pd.prefill_s?);
    let queue = pd.prefill_queued_s.unwrap_or(0.0).min(prefill);
    let kv_wait = decode.map_or(0.0, |t| t.queued_s);
    // The proxy's clock (to_decode, prefill) starts at its add, after any
    // admission hold: the hold is queueing before the prefill engine's.
    Some(TtftParts {
        prefill_queue_s: r.held_s + queue,
        prefill_compute_s: prefill - queue,
        handoff_s: to_decode - prefill,
        kv_wait_s: kv_wait,
        first_token_s: ttft - r.held_s - to_decode - kv_wait,
    })
}

/// The TTFT split of a point's requests, ms.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TtftSplit {
    /// Requests with every part recorded.
    pub requests: u32,
    pub prefill_queue_ms: Summary,
    pub prefill_compute_ms: Summary,
    pub handoff_ms: Summary,
    pub kv_wait_ms: Summary,
    pub first_token_ms: Summary,
}

/// The connector's transfers over the measured requests.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Transfers {
    #[serde(flatten)]
    pub stats: KvTransferStats,
    /// bytes / summed transfer time, MB/s (10^6 bytes).
    pub mb_per_s: Option<f64>,
    /// Mean transfer time, ms.
    pub mean_ms: Option<f64>,
}

impl Transfers {
    pub fn of(stats: KvTransferStats) -> Transfers {
        let mb_per_s = (stats.transfer_s > 0.0).then(|| stats.bytes as f64 / stats.transfer_s / 1e6);
        let mean_ms = (stats.transfers > 0).then(|| stats.transfer_s / stats.transfers as f64 * 1e3);
        Transfers { stats, mb_per_s, mean_ms }
    }
}

/// A P/D point's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PdSummary {
    pub prefill_workers: u32,
    pub decode_workers: u32,
    /// Measured requests each prefill worker got (the round robin's spread).
    pub requests_per_prefill_worker: Vec<u32>,
    pub ttft_split: TtftSplit,
    /// `None`: the decode engine's connector reported no transfer.
    pub transfers: Option<Transfers>,
    /// Prompt tokens of the completed requests, and those of them the decode
    /// engine got by transfer (`num_external_cached_tokens`), summed.
    pub prompt_tokens: u64,
    pub transferred_tokens: u64,
    /// Completed requests whose whole prompt arrived by transfer.
    pub whole_prompt_transferred: u32,
    /// Requests whose prefill failed and that the decode engine recomputed.
    pub recomputed: u32,
    /// Devices (GPUs) of each side: workers x devices per worker.
    pub prefill_gpus: u32,
    pub decode_gpus: u32,
    /// InferenceX's disaggregated per-GPU throughput (process_result.py):
    /// total tok/s over all GPUs, output tok/s over the decode GPUs,
    /// (total - output) tok/s over the prefill GPUs.
    pub tput_per_gpu: f64,
    pub output_tput_per_gpu: f64,
    pub input_tput_per_gpu: f64,
}

/// The figures of a P/D point: `records`, `timings` (the decode engine's)
/// and `pd.requests` are parallel; `figures` are the point's (its total and
/// output tok/s).
pub fn summarize_pd(pd: &PdRaw, records: &[RequestRecord], timings: &[Option<EngineTiming>], figures: &PointFigures, percentiles: &[f64]) -> PdSummary {
    per_role(pd, records, timings, (figures.total_token_throughput, figures.output_throughput), percentiles)
}

fn per_role(pd: &PdRaw, records: &[RequestRecord], timings: &[Option<EngineTiming>], (total, output): (f64, f64), percentiles: &[f64]) -> PdSummary {
    let parts: Vec<TtftParts> = records
        .iter()
        .zip(&pd.requests)
        .enumerate()
        .filter_map(|(i, (r, p))| ttft_parts(r, p, timings.get(i).and_then(Option::as_ref)))
        .collect();
    let ms = |f: fn(&TtftParts) -> f64| Summary::of(&parts.iter().map(|p| f(p) * 1e3).collect::<Vec<_>>(), percentiles);
    let mut per_worker = vec![0u32; pd.prefill_workers as usize];
    for p in &pd.requests {
        if let Some(n) = per_worker.get_mut(p.prefill_worker as usize) {
            *n += 1;
        }
    }
    let completed = records.iter().zip(&pd.requests).filter(|(r, _)| r.error.is_none());
    let (mut prompt_tokens, mut transferred, mut whole) = (0u64, 0u64, 0u32);
    for (r, p) in completed {
        prompt_tokens += u64::from(r.input_tokens);
        let got = p.external_cached_tokens.unwrap_or(0);
        transferred += u64::from(got);
        whole += u32::from(got >= r.input_tokens && r.input_tokens > 0);
    }
    let prefill_gpus = (pd.prefill_workers * pd.prefill_devices_per_worker).max(1);
    let decode_gpus = (pd.decode_workers * pd.decode_devices_per_worker).max(1);
    PdSummary {
        prefill_workers: pd.prefill_workers,
        decode_workers: pd.decode_workers,
        requests_per_prefill_worker: per_worker,
        ttft_split: TtftSplit {
            requests: parts.len() as u32,
            prefill_queue_ms: ms(|p| p.prefill_queue_s),
            prefill_compute_ms: ms(|p| p.prefill_compute_s),
            handoff_ms: ms(|p| p.handoff_s),
            kv_wait_ms: ms(|p| p.kv_wait_s),
            first_token_ms: ms(|p| p.first_token_s),
        },
        transfers: pd.transfers.map(Transfers::of),
        prompt_tokens,
        transferred_tokens: transferred,
        whole_prompt_transferred: whole,
        recomputed: pd.requests.iter().filter(|p| p.recomputed).count() as u32,
        prefill_gpus,
        decode_gpus,
        tput_per_gpu: total / f64::from(prefill_gpus + decode_gpus),
        output_tput_per_gpu: output / f64::from(decode_gpus),
        input_tput_per_gpu: (total - output) / f64::from(prefill_gpus),
    }
}

/// `records` as the decode engine saw them, for the cross-check against
/// vLLM's own timings (which start at the decode engine's add): each send
/// moved to when the request reached the decode engine.
pub fn as_decode_saw(records: &[RequestRecord], pd: &PdRaw) -> Vec<RequestRecord> {
    records
        .iter()
        .zip(&pd.requests)
        .map(|(r, p)| RequestRecord { send_s: r.send_s + p.to_decode_s.unwrap_or(0.0), ..r.clone() })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::pd::PdRequest;

    fn record(send: f64, first: f64, input: u32) -> RequestRecord {
        RequestRecord { input_tokens: input, output_tokens: 4, send_s: send, first_token_s: Some(first), last_token_s: Some(first + 0.3), ..RequestRecord::default() }
    }

    /// Prefill 0.2 s (queue 0.05), back at the decode engine at 0.25 s.
    fn pd_request() -> PdRequest {
        PdRequest { prefill_worker: 1, to_decode_s: Some(0.25), prefill_s: Some(0.2), prefill_queued_s: Some(0.05), external_cached_tokens: Some(96), recomputed: false }
    }

    /// Queued 0.1 s on the decode engine for its KV.
    fn decode_timing() -> EngineTiming {
        EngineTiming { rid: 0, ttft_s: 0.25, decode_s: 0.3, queued_s: 0.1, generation_tokens: None }
    }

    fn total(p: &TtftParts) -> f64 {
        p.prefill_queue_s + p.prefill_compute_s + p.handoff_s + p.kv_wait_s + p.first_token_s
    }

    #[test]
    fn the_parts_add_up_to_ttft_and_throughput_is_per_role() {
        // TTFT 0.5 s: prefill 0.2 (queue 0.05), back at the decode engine at
        // 0.25, queued there 0.1 for its KV, first token 0.15 later.
        let r = record(1.0, 1.5, 96);
        let (p, t) = (pd_request(), decode_timing());
        let parts = ttft_parts(&r, &p, Some(&t)).unwrap();
        let sum = total(&parts);
        assert!((sum - 0.5).abs() < 1e-12, "{parts:?}");
        assert!((parts.handoff_s - 0.05).abs() < 1e-12 && (parts.first_token_s - 0.15).abs() < 1e-12, "{parts:?}");

        let short = PdRequest { external_cached_tokens: Some(64), prefill_worker: 0, ..p };
        let failed = RequestRecord { error: Some("prefill failed: x".into()), first_token_s: None, ..record(2.0, 0.0, 96) };
        let raw = PdRaw {
            requests: vec![p, short, PdRequest { prefill_worker: 1, ..PdRequest::default() }],
            transfers: Some(KvTransferStats { transfers: 2, bytes: 4_000_000, transfer_s: 0.02, ..KvTransferStats::default() }),
            prefill_workers: 2,
            decode_workers: 1,
            prefill_devices_per_worker: 4,
            decode_devices_per_worker: 8,
        };
        let s = per_role(&raw, &[r.clone(), r, failed], &[Some(t), None, None], (1600.0, 400.0), &[99.0]);
        assert_eq!(s.requests_per_prefill_worker, vec![1, 2]);
        assert_eq!((s.ttft_split.requests, s.prompt_tokens, s.transferred_tokens, s.whole_prompt_transferred), (2, 192, 160, 1));
        assert_eq!((s.prefill_gpus, s.decode_gpus), (8, 8));
        assert_eq!((s.tput_per_gpu, s.output_tput_per_gpu, s.input_tput_per_gpu), (100.0, 50.0, 150.0));
        let t = s.transfers.unwrap();
        assert_eq!((t.mb_per_s, t.mean_ms), (Some(200.0), Some(10.0)));
    }

    #[test]
    fn an_admission_hold_is_queueing_before_the_prefill() {
        // The same request held 0.1 s before the proxy's add: TTFT 0.6 s,
        // the hold in the queue part, every other part as without it.
        let r = RequestRecord { held_s: 0.1, ..record(0.9, 1.5, 96) };
        let (p, t) = (pd_request(), decode_timing());
        let parts = ttft_parts(&r, &p, Some(&t)).unwrap();
        let sum = total(&parts);
        assert!((sum - 0.6).abs() < 1e-12, "{parts:?}");
        assert!((parts.prefill_queue_s - 0.15).abs() < 1e-12 && (parts.first_token_s - 0.15).abs() < 1e-12, "{parts:?}");
    }
}
