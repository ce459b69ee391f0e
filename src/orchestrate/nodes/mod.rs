//! Jobs that span nodes (docs/multi-node.md): one **node group** per node
//! (`enginebench __node`, [`group`]) starts that node's processes, samples
//! its telemetry and relays its ranks' messages, tagged, to the job's
//! watcher (src/orchestrate/job.rs), which treats them as one node's DP
//! ranks (docs/data-parallel.md).
//!
//! What runs on the nodes ([`NodeKind`]):
//! - **DP ranks across nodes**: node n holds DP ranks `n x L .. (n + 1) x
//!   L`, each one worker ([`crate::orchestrate::dp::DpPlan::launches_for`]).
//! - **One engine spanning nodes**: vLLM's multi-node executor. Node 0's
//!   worker is the engine (`--nnodes N --node-rank 0 --master-addr M
//!   --master-port P`; vLLM 0.32 `ParallelConfig.nnodes`/`node_rank`,
//!   `MultiprocExecutor` with workers on every node); node n > 0 runs a
//!   headless follower, `vllm serve ... --node-rank n --headless`, which runs
//!   only workers (vllm/entrypoints/cli/serve.py `run_headless`). Seen
//!   working on vLLM 0.32's CPU build with two local "nodes" (the tiny MoE,
//!   `-tp 2 --nnodes 2`).
//!
//! Where node groups run ([`Hosts`]): all on this machine (no Slurm
//! allocation: "nodes" are local rank groups over loopback, each on its own
//! cores or GPU slice), or one per node of the Slurm allocation through
//! `srun --nodes=1 --ntasks=1 --nodelist=HOST --overlap` (the run folder and
//! the binary on a shared filesystem, as every Slurm run).

pub mod group;
pub mod launch;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::protocol::Job;
use crate::python::Interpreter;
use crate::recipe::layout::Placement;
use crate::telemetry::WindowSummary;

pub use launch::Hosts;

/// A job's nodes, decided at plan time ([`NodePlan::of`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodePlan {
    pub nodes: u32,
    /// GPUs per node (`[layout] gpus_per_node`).
    pub gpus_per_node: Option<u32>,
    pub kind: NodeKind,
    /// The CPU backend: nodes on one machine split its cores (no GPUs).
    #[serde(default)]
    pub cpu: bool,
}

/// What runs on a job's nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeKind {
    /// DP ranks, `ranks_per_node` on each node (the job's `DpPlan`).
    DpRanks { ranks_per_node: u32 },
    /// One engine whose workers span every node (vLLM's world size
    /// `world_size`, `world_size / nodes` workers a node).
    Spanning { world_size: u32 },
}

impl NodePlan {
    /// The node plan of a placement (`None`: one node, the usual job).
    ///
    /// Errors: DP ranks that each span nodes (not yet: two levels of
    /// rendezvous), a world size that does not split evenly over the nodes.
    pub fn of(p: &Placement, dp_size: u32, cpu: bool) -> Result<Option<NodePlan>, String> {
        if p.nodes <= 1 {
            return Ok(None);
        }
        let kind = if p.spans_nodes {
            if dp_size > 1 {
                return Err(format!(
                    "DP {dp_size} ranks that each span nodes (world size {} > {} GPUs a node) do not run yet: vLLM's multi-node executor per DP rank inside a DP group; run one DP rank over its nodes, or DP ranks that fit a node",
                    p.world_size,
                    p.gpus_per_node.map_or("?".into(), |g| g.to_string())
                ));
            }
            if p.world_size % p.nodes != 0 {
                return Err(format!(
                    "world size {} does not split evenly over {} nodes (vLLM's multi-node executor runs world size / nodes workers a node)",
                    p.world_size, p.nodes
                ));
            }
            NodeKind::Spanning { world_size: p.world_size }
        } else {
            NodeKind::DpRanks { ranks_per_node: p.ranks_per_node }
        };
        Ok(Some(NodePlan { nodes: p.nodes, gpus_per_node: p.gpus_per_node, kind, cpu }))
    }

    /// Node n's DP ranks (empty for a spanning engine).
    pub fn ranks_of(&self, node: u32) -> std::ops::Range<u32> {
        match self.kind {
            NodeKind::DpRanks { ranks_per_node } => node * ranks_per_node..(node + 1) * ranks_per_node,
            NodeKind::Spanning { .. } => 0..0,
        }
    }

    /// The ranks the watcher follows: every DP rank, or the spanning engine
    /// (rank 0, on node 0) alone.
    pub fn rank_count(&self) -> u32 {
        match self.kind {
            NodeKind::DpRanks { ranks_per_node } => ranks_per_node * self.nodes,
            NodeKind::Spanning { .. } => 1,
        }
    }

    /// The node that runs rank `rank`.
    pub fn node_of_rank(&self, rank: u32) -> u32 {
        match self.kind {
            NodeKind::DpRanks { ranks_per_node } => rank / ranks_per_node.max(1),
            NodeKind::Spanning { .. } => 0,
        }
    }
}

/// What one node group is asked to do (its stdin, JSON).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeTask {
    pub node: u32,
    pub plan: NodePlan,
    /// The job's DP ranks (DP across nodes), `None` for a spanning engine.
    pub dp: Option<crate::orchestrate::dp::DpPlan>,
    /// The first node's address and the port every rank names: the DP
    /// group's base port, or the multi-node executor's master port.
    pub master_ip: String,
    pub master_port: u16,
    pub python: Interpreter,
    /// The job's environment additions and removals (the recipe's).
    pub env: BTreeMap<String, String>,
    pub unset: Vec<String>,
    /// The job's worker request (engine flags, points, eval); each rank's is
    /// made from it as a one-node DP job's are.
    pub request: Job,
    /// This node's visible devices, the machine's ordinals (`None`: all of
    /// the node's); also set as its `CUDA_VISIBLE_DEVICES` in `env`.
    pub visible: Option<Vec<u32>>,
    /// The run folder and the job's file suffix (`-J` or empty).
    pub dir: PathBuf,
    pub suffix: String,
    pub telemetry_interval_ms: u64,
}

/// What a node group says (its stdout, one JSON object a line).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum NodeEvent {
    /// First: the node's wall clock minus its monotonic clock, s (points of
    /// several machines are put on one clock with it).
    Clock { node: u32, wall_minus_mono_s: f64 },
    /// A line a rank's worker printed (a `Message`), verbatim.
    Line { rank: u32, line: String },
    /// A rank's worker closed its output.
    Closed { rank: u32 },
    /// A process of the node ended: a rank's worker, or (`rank` None) a
    /// headless follower; `ok`: exit 0; `status` in words.
    Exited { node: u32, rank: Option<u32>, ok: bool, status: String },
    /// The node's telemetry over its ranks' part of point `point` (in the
    /// node's own clock: it sampled it).
    Window { node: u32, point: usize, window: Box<WindowSummary> },
    /// Last: the node's sampler, and the file its series went to.
    Telemetry { node: u32, info: Box<crate::report::result::TelemetryInfo> },
    /// The node group itself failed (a process would not start).
    Failed { node: u32, message: String },
}

/// The wall clock minus the monotonic clock of this machine, s.
pub fn wall_minus_mono_s() -> f64 {
    let wall = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
    wall - crate::telemetry::mono_now_s()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recipe::layout::{NodeLayout, Placement};

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn node_plans_of_dp_and_spanning_layouts() {
        let layout = NodeLayout { nodes: 2, gpus_per_node: Some(4), ..NodeLayout::default() };
        let p = Placement::of(&layout, &args("-dp 8 -ep"), None, None).unwrap();
        let plan = NodePlan::of(&p, 8, false).unwrap().unwrap();
        assert_eq!(plan.kind, NodeKind::DpRanks { ranks_per_node: 4 });
        assert_eq!((plan.ranks_of(1), plan.rank_count(), plan.node_of_rank(5)), (4..8, 8, 1));
        let p = Placement::of(&layout, &args("-tp 8"), None, None).unwrap();
        let plan = NodePlan::of(&p, 1, false).unwrap().unwrap();
        assert_eq!((plan.kind.clone(), plan.rank_count(), plan.ranks_of(1)), (NodeKind::Spanning { world_size: 8 }, 1, 0..0));
        assert!(NodePlan::of(&Placement::of(&NodeLayout::default(), &args("-dp 2"), None, None).unwrap(), 2, false).unwrap().is_none());
        let wide = NodeLayout { nodes: 4, gpus_per_node: Some(8), ..NodeLayout::default() };
        let e = NodePlan::of(&Placement::of(&wide, &args("-tp 16 -dp 2"), None, None).unwrap(), 2, false).unwrap_err();
        assert!(e.contains("each span nodes"), "{e}");
    }
}
