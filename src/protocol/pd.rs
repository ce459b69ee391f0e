//! Disaggregated prefill/decode (issue 44, docs/pd.md): what the
//! orchestrator asks of each worker of a P/D job ([`PrefillJob`],
//! [`DecodeSide`]), the lines a decode worker and its prefill workers
//! exchange over loopback TCP ([`ToPrefill`], [`FromPrefill`]), and what
//! the decode worker reports per point ([`PdRaw`]).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A prefill worker's task: build the engine, listen on `port` for its
/// decode workers, run every prompt they send as a prefill-only request
/// (`max_tokens` 1, `do_remote_decode`) and send back vLLM's transfer
/// parameters. It ends when every decode worker has disconnected, or when
/// they did not all connect within `connect_timeout_s` of the engine being
/// ready.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PrefillJob {
    /// `vllm serve` arguments: the model, then the flags.
    pub engine_argv: Vec<String>,
    /// Which prefill worker this is (0-based; its engine id is `prefill{index}`).
    pub index: u32,
    /// Loopback TCP port to listen on.
    pub port: u16,
    pub connect_timeout_s: f64,
    /// Decode workers that connect, each over its own link.
    #[serde(default = "one_worker")]
    pub decode_workers: u32,
}

/// Serde's default for a count of workers absent from older messages and
/// plans: one.
pub fn one_worker() -> u32 {
    1
}

/// What a decode worker needs to be the proxy: its prefill workers, and
/// what to do with a request whose prefill failed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DecodeSide {
    pub prefill: Vec<PrefillAddr>,
    /// The decode side's `kv_load_failure_policy` (vLLM's `KVTransferConfig`):
    /// `"recompute"` sends a request whose prefill failed to the decode
    /// engine whole (it computes the prompt); anything else fails it.
    pub on_prefill_failure: String,
    /// Longest wait for a prefill worker to accept the connection (its
    /// engine loads meanwhile), s.
    pub connect_timeout_s: f64,
    /// Devices (GPUs) per prefill worker: its engine's TP x PP x PCP.
    pub prefill_devices: u32,
    /// This decode worker (0-based; its engine id is `decode{index}`) and
    /// how many there are. Each starts its round robin over the prefill
    /// workers at `index mod prefill workers`, so that M decode workers
    /// do not all send their first prompts to the same one.
    #[serde(default)]
    pub decode_index: u32,
    #[serde(default = "one_worker")]
    pub decode_workers: u32,
}

/// One prefill worker as the decode worker reaches it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PrefillAddr {
    pub host: String,
    pub port: u16,
    /// Its process id: a worker gone before it accepted is reported at
    /// once rather than after the connect timeout.
    pub pid: u32,
    /// Its log file, named in errors.
    pub log: String,
}

/// Decode worker to prefill worker, one JSON line each.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToPrefill {
    /// Prefill this prompt (request `rid` of the decode worker).
    Add { rid: u64, prompt: Vec<u32> },
}

/// Prefill worker to decode worker, one JSON line each.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FromPrefill {
    /// The prefill request of `rid` finished.
    Done(PrefillDone),
}

/// A finished prefill request.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PrefillDone {
    pub rid: u64,
    /// vLLM's `EngineCoreOutput.kv_transfer_params` of the finished
    /// prefill (remote engine id, block ids, host, port, ...); `None` when
    /// the engine gave none (the request cannot be decoded remotely).
    pub kv_transfer_params: Option<Value>,
    /// From the line's arrival to the finished output's step return, on
    /// the prefill worker's clock, s: its queue plus its compute.
    pub prefill_s: f64,
    /// vLLM's queue time of the prefill request (SCHEDULED - QUEUED), s.
    pub queued_s: Option<f64>,
    /// Why the request failed on the prefill engine, if it did.
    pub error: Option<String>,
}

/// One request's path through a P/D pair, recorded by the decode worker.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct PdRequest {
    /// Which prefill worker it went to.
    pub prefill_worker: u32,
    /// From the driver's send to the decode engine's add, s (the prefill
    /// worker's part plus both hand-offs).
    pub to_decode_s: Option<f64>,
    /// The prefill worker's own time ([`PrefillDone::prefill_s`]), s.
    pub prefill_s: Option<f64>,
    /// vLLM's queue time on the prefill engine, s.
    pub prefill_queued_s: Option<f64>,
    /// Prompt tokens the decode engine got by transfer
    /// (`PrefillStats.num_external_cached_tokens`).
    pub external_cached_tokens: Option<u32>,
    /// The prefill failed and the decode engine computed the prompt itself
    /// (`kv_load_failure_policy` "recompute").
    #[serde(default)]
    pub recomputed: bool,
}

/// The KV connector's transfer figures over some steps (vLLM's
/// `SchedulerStats.kv_connector_stats`, NixlConnector's per-transfer lists
/// summed by the shim's `take_kv_transfer_stats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct KvTransferStats {
    pub transfers: u64,
    pub bytes: u64,
    /// Sum of the transfers' durations, s.
    pub transfer_s: f64,
    pub failed_transfers: u64,
    pub failed_notifications: u64,
    pub failed_handshakes: u64,
    pub expired_requests: u64,
}

impl KvTransferStats {
    /// Adds `other`'s counts and times to these.
    pub fn add(&mut self, other: &KvTransferStats) {
        self.transfers += other.transfers;
        self.bytes += other.bytes;
        self.transfer_s += other.transfer_s;
        self.failed_transfers += other.failed_transfers;
        self.failed_notifications += other.failed_notifications;
        self.failed_handshakes += other.failed_handshakes;
        self.expired_requests += other.expired_requests;
    }
}

/// A point's P/D figures as the decode worker measured them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PdRaw {
    /// Per measured request, parallel to the point's records.
    pub requests: Vec<PdRequest>,
    /// The decode engine's connector stats over the measured requests
    /// (the side that pulls reports the transfers); `None`: none reported.
    pub transfers: Option<KvTransferStats>,
    /// Prefill workers, decode workers, and each side's devices per worker
    /// (TP x PP x DP of its engine): InferenceX's per-role throughput divides
    /// by `workers x devices`.
    pub prefill_workers: u32,
    pub decode_workers: u32,
    pub prefill_devices_per_worker: u32,
    pub decode_devices_per_worker: u32,
}
