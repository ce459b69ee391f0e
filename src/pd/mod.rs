//! Disaggregated prefill/decode inside the harness (issue 44, docs/pd.md):
//! the driver is the proxy, with no HTTP router between it and the engines.
//!
//! A P/D job runs N prefill workers and M decode workers, each a worker
//! process with one in-process engine that has a KV connector. The decode
//! workers split each point as dense DP ranks do; each one's driver sends
//! every request through [`proxy::PdEngine`]:
//! - the prompt goes over loopback TCP ([`link`]) to a prefill worker,
//!   round robin in send order (as vLLM's toy proxy cycles its prefill
//!   clients), which runs it with `max_tokens` 1 and `do_remote_decode`
//!   ([`prefill::serve`]) and sends back vLLM's `kv_transfer_params`;
//! - the decode worker adds the same token ids with those parameters to its
//!   engine, which reads the prompt's KV from the prefill engine inside its
//!   steps and generates.
//!
//! Every engine keeps stepping while any request is at it: the prefill side
//! frees the blocks the decode side has read inside its own steps.
//! TTFT is the driver's, from the send to the decode engine's first token;
//! the proxy records the parts (the prefill worker's queue + compute, both
//! hand-offs, the decode side's wait for the KV) per request, and the
//! connector's transfer figures.

pub mod link;
pub mod prefill;
pub mod proxy;
