//! One point from its DP ranks' raw points: every rank's requests counted
//! once, on one clock, so the usual figures come out over all of them
//! (throughput over the union window, latency percentiles over every
//! request), and each rank's own part kept beside them ([`RankPoint`]).

use crate::protocol::pd::PdRaw;
use crate::protocol::{EngineInfo, RawPoint};
use crate::report::result::RankPoint;

/// The ranks' raw points of one point (rank order) as one: records, timings,
/// requested lengths and token ids back in the point's request order
/// (request i ran on rank `i mod A`, A = min(ranks, conc), as
/// [`crate::protocol::DpRank::owns`] deals them, so rank r's k-th request
/// is request `k x A + r`: request indices compare across DP sizes); times
/// moved onto the clock of the rank that started first (each rank's records
/// count from its own start, `started_mono_s` on the shared monotonic
/// clock); the window from the first start to the last end; steps of every
/// rank, in time order; speculative counters summed; a P/D job's request
/// paths in request order and its transfers summed; partial if any rank
/// was cut short.
///
/// Panics: `ranks` is empty.
pub fn merge_ranks(ranks: &[RawPoint]) -> RawPoint {
    // The window of the ranks that ran requests (a rank with no share of a
    // low concurrency ran none).
    let busy: Vec<&RawPoint> = ranks.iter().filter(|r| !r.records.is_empty()).collect();
    let busy = if busy.is_empty() { ranks.iter().collect() } else { busy };
    let t0 = busy.iter().map(|r| r.started_mono_s).fold(f64::INFINITY, f64::min);
    let end = busy.iter().map(|r| r.started_mono_s + r.duration_s).fold(f64::NEG_INFINITY, f64::max);
    let mut out = RawPoint { records: Vec::new(), engine_timings: Vec::new(), requested_output_lens: Vec::new(), steps: Vec::new(), token_ids: Vec::new(), ..ranks[0].clone() };
    out.started_mono_s = t0;
    out.duration_s = (end - t0).max(0.0);
    out.vllm_spec = None;
    // (request index, rank, position in the rank's lists), in request order.
    let active = ranks.len().min(ranks[0].spec.point.conc.max(1) as usize).max(1);
    let mut order: Vec<(usize, usize, usize)> = ranks
        .iter()
        .enumerate()
        .flat_map(|(r, raw)| (0..raw.records.len()).map(move |k| (k * active + r, r, k)))
        .collect();
    order.sort_unstable();
    let with_ids = ranks.iter().any(|r| !r.token_ids.is_empty());
    // A P/D job's decode workers: their requests' paths in the same order,
    // their connectors' transfers summed.
    out.pd = ranks.iter().find_map(|r| r.pd.clone()).map(|first| PdRaw {
        requests: Vec::new(),
        transfers: ranks.iter().filter_map(|r| r.pd.as_ref()?.transfers).reduce(|mut a, b| {
            a.add(&b);
            a
        }),
        ..first
    });
    for &(_, r, k) in &order {
        let raw = &ranks[r];
        let shift = raw.started_mono_s - t0;
        let mut rec = raw.records[k].clone();
        rec.send_s += shift;
        rec.first_token_s = rec.first_token_s.map(|t| t + shift);
        rec.last_token_s = rec.last_token_s.map(|t| t + shift);
        out.records.push(rec);
        out.engine_timings.push(raw.engine_timings.get(k).cloned().flatten());
        if let Some(&len) = raw.requested_output_lens.get(k) {
            out.requested_output_lens.push(len);
        }
        if with_ids {
            out.token_ids.push(raw.token_ids.get(k).cloned().unwrap_or_default());
        }
        if let Some(pd) = out.pd.as_mut() {
            pd.requests.push(raw.pd.as_ref().and_then(|p| p.requests.get(k)).copied().unwrap_or_default());
        }
    }
    for r in ranks {
        let shift = r.started_mono_s - t0;
        out.steps.extend(r.steps.iter().map(|s| {
            let mut s = s.clone();
            s.t_s += shift;
            s
        }));
        out.vllm_spec = match (out.vllm_spec.take(), &r.vllm_spec) {
            (None, s) => s.clone(),
            (Some(mut a), Some(b)) => {
                a.add(b);
                Some(a)
            }
            (a, None) => a,
        };
        out.partial |= r.partial;
    }
    out.steps.sort_by(|a, b| a.t_s.total_cmp(&b.t_s));
    out
}

/// The job's engine from its ranks' (rank order): rank 0's facts, the DP
/// size, and the devices of every rank as ordinals into the job's visible
/// list: rank r's k-th device is `r x world_size + k` there (dense ranks see
/// their slice of the list from its start, vLLM places MoE rank r's workers
/// at `local_rank + r x world_size`: v1/engine/utils.py, worker/gpu_worker.py),
/// and the KV pool summed over the ranks (`None` when a rank lacks it).
pub fn merge_engine_info(ranks: &[EngineInfo], world_size: u32) -> EngineInfo {
    let mut info = ranks[0].clone();
    info.data_parallel_size = Some(ranks.len() as u32);
    info.kv_cache_tokens = ranks.iter().map(|e| e.kv_cache_tokens).sum();
    if info.device.as_deref() != Some("cpu") {
        let ids = ranks
            .iter()
            .enumerate()
            .flat_map(|(r, e)| e.device_ordinals().into_iter().map(move |k| r as u32 * world_size + k % world_size.max(1)))
            .collect();
        info.device_ids = Some(ids);
    }
    info
}

/// Rank `rank`'s part: its figures from its own records and steps
/// (`figures` and `steps` as the point's finishing computed them for it).
pub fn rank_point(rank: u32, figures: &crate::metrics::PointFigures, step_stats: crate::metrics::steps::StepSummary) -> RankPoint {
    RankPoint {
        rank,
        completed: figures.completed,
        failed: figures.failed,
        total_output_tokens: figures.total_output_tokens,
        duration_s: figures.duration_s,
        output_throughput: figures.output_throughput,
        step_stats,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{RequestRecord, StepRecord};

    #[test]
    fn an_idle_ranks_figures_are_null_and_read_back() {
        // A rank that finished no request (conc 1 over 2 ranks) has NaN
        // figures: written as null, read back as NaN (a result folder is
        // read again by ab, collect and resume).
        let figures = crate::metrics::point_figures(&[], 1.0, crate::metrics::FigureSpec { percentiles: &[50.0], gpus: 1, goodput: None });
        let p = rank_point(1, &figures, crate::metrics::steps::StepSummary::default());
        let text = serde_json::to_string(&p).unwrap();
        assert!(text.contains("\"duration_s\":null"), "{text}");
        let back: crate::report::result::RankPoint = serde_json::from_str(&text).unwrap();
        assert!(back.duration_s.is_nan() && back.output_throughput.is_nan() && back.completed == 0);
    }

    fn raw(start: f64, sends: &[f64]) -> RawPoint {
        let json = serde_json::json!({
            "spec": {"point": {"isl": 8, "osl": 2, "conc": 2, "num_prompts": 4, "warmups": 0},
                     "dataset": {"isl": 8, "osl": 2, "convention": "vllm", "range_ratio": 0.0, "prefix_len": 0, "seed": 0},
                     "request_rate": null, "burstiness": 1.0, "ignore_eos": true},
            "records": [], "engine_timings": [], "requested_output_lens": [], "duration_s": 1.0,
            "started_mono_s": start, "steps": []
        });
        let mut r: RawPoint = serde_json::from_value(json).expect("a raw point");
        for &s in sends {
            r.records.push(RequestRecord { input_tokens: 8, output_tokens: 2, send_s: s, first_token_s: Some(s + 0.1), last_token_s: Some(s + 0.2), ..RequestRecord::default() });
            r.engine_timings.push(None);
            r.requested_output_lens.push(2);
            r.steps.push(StepRecord { t_s: s, dur_ms: 1.0, ..StepRecord::default() });
        }
        r
    }

    #[test]
    fn ranks_merge_onto_one_clock_and_count_once() {
        let m = merge_ranks(&[raw(100.0, &[0.0, 0.5]), raw(100.25, &[0.0])]);
        assert_eq!(m.records.len(), 3, "every rank's requests, once");
        assert_eq!(m.started_mono_s, 100.0);
        assert_eq!(m.duration_s, 1.25, "first start to last end");
        // Request order: rank 0's two requests are requests 0 and 2, rank 1's is request 1.
        assert_eq!(m.records[1].send_s, 0.25, "rank 1 moved onto rank 0's clock, at its request index");
        assert_eq!(m.records[1].last_token_s, Some(0.45));
        assert_eq!(m.records[2].send_s, 0.5);
        let t: Vec<f64> = m.steps.iter().map(|s| s.t_s).collect();
        assert_eq!(t, vec![0.0, 0.25, 0.5], "steps in time order");
        assert_eq!(m.requested_output_lens.len(), 3);
        let (mut a, mut b) = (raw(0.0, &[0.0, 0.5]), raw(0.0, &[0.0]));
        a.token_ids = vec![vec![10], vec![12]];
        b.token_ids = vec![vec![11]];
        assert_eq!(merge_ranks(&[a, b]).token_ids, vec![vec![10], vec![11], vec![12]], "token ids in request order");
        let idle = merge_ranks(&[raw(100.0, &[0.0]), raw(50.0, &[])]);
        assert_eq!((idle.started_mono_s, idle.records.len()), (100.0, 1), "an idle rank does not stretch the window");
    }

    #[test]
    fn decode_workers_paths_merge_in_request_order_and_transfers_add() {
        use crate::protocol::pd::{KvTransferStats, PdRequest};
        let with_pd = |start: f64, sends: &[f64], workers: &[u32], transfers: u64| {
            let mut r = raw(start, sends);
            r.pd = Some(PdRaw {
                requests: workers.iter().map(|&w| PdRequest { prefill_worker: w, ..PdRequest::default() }).collect(),
                transfers: Some(KvTransferStats { transfers, bytes: transfers * 100, ..KvTransferStats::default() }),
                prefill_workers: 2,
                decode_workers: 2,
                prefill_devices_per_worker: 1,
                decode_devices_per_worker: 1,
            });
            r
        };
        let m = merge_ranks(&[with_pd(0.0, &[0.0, 0.5], &[0, 1], 2), with_pd(0.0, &[0.0], &[1], 1)]);
        let pd = m.pd.expect("P/D figures kept");
        let order: Vec<u32> = pd.requests.iter().map(|r| r.prefill_worker).collect();
        assert_eq!(order, vec![0, 1, 1], "request order: decode 0's first, decode 1's, decode 0's second");
        assert_eq!(pd.requests.len(), m.records.len());
        let t = pd.transfers.unwrap();
        assert_eq!((t.transfers, t.bytes), (3, 300));
        assert_eq!(pd.decode_workers, 2);
        assert!(merge_ranks(&[raw(0.0, &[0.0]), raw(0.0, &[0.0])]).pd.is_none(), "no P/D, no figures");
    }

    #[test]
    fn the_job_engine_spans_every_ranks_devices() {
        let rank = EngineInfo { tensor_parallel_size: Some(2), device_ids: Some(vec![0, 1]), kv_cache_tokens: Some(1000), ..EngineInfo::default() };
        let m = merge_engine_info(&[rank.clone(), rank.clone()], 2);
        assert_eq!((m.data_parallel_size, m.device_ids.clone()), (Some(2), Some(vec![0, 1, 2, 3])));
        assert_eq!(m.kv_cache_tokens, Some(2000), "the job's pool: every rank's");
        let unknown = EngineInfo { kv_cache_tokens: None, ..rank.clone() };
        assert_eq!(merge_engine_info(&[rank, unknown], 2).kv_cache_tokens, None, "not a partial sum");
        assert_eq!(m.inferencex_gpus(None), 4);
        assert_eq!(m.inferencex_gpus(Some(8)), 8, "InferenceX's count: the recipe's TP");
    }
}
