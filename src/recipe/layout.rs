//! `[layout]`: where an engine's processes run when its job spans more than
//! one node (InferenceX's multi-node recipes: srt-slurm's `resources`).
//!
//! ```toml
//! [layout]
//! nodes = 2               # nodes the engine's job spans (default 1)
//! gpus_per_node = 4       # devices per node the allocation asks for (GPU recipes)
//! dp_ranks_per_node = 4   # DP ranks on each node (vLLM's --data-parallel-size-local); default DP / nodes
//! workers = 1             # engines of this role, each its own copy of the layout (default 1)
//! ```
//!
//! The same table is the shape of one role: a P/D recipe (issue 44) adds
//! `[roles.prefill]` / `[roles.decode]`, each with its own flags, environment
//! and a `layout` table of these keys, beside the aggregated `[engine]` +
//! `[layout]`; `gpus_per_node` is the allocation's, so roles must agree on
//! it (docs/multi-node.md).
//!
//! [`Placement`] is the one place that decides, before any engine starts,
//! what a layout means for an engine of a given parallel shape
//! ([`super::parallel::Layout`]): how many DP ranks each node holds, which
//! node and local index each rank gets, and whether one engine (a DP rank's
//! TP x PP x PCP world) spans nodes.

use serde::{Deserialize, Serialize};

use super::parallel::{Layout, flag_value};

/// vLLM's flag for the DP ranks a node (a `vllm serve` process) holds.
pub const DP_LOCAL_FLAGS: [&str; 1] = ["--data-parallel-size-local"];

/// `[layout]` of a recipe (or of a P/D role).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeLayout {
    /// Nodes the engine's job spans, >= 1.
    #[serde(default = "one")]
    pub nodes: u32,
    /// Devices (GPUs) per node; `None`: as many as the engine needs there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus_per_node: Option<u32>,
    /// DP ranks per node; `None`: `--data-parallel-size-local` if the flags
    /// give it, else DP size / nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dp_ranks_per_node: Option<u32>,
    /// Engines of this role (each its own copy of the layout), >= 1.
    #[serde(default = "one")]
    pub workers: u32,
}

fn one() -> u32 {
    1
}

impl Default for NodeLayout {
    fn default() -> Self {
        NodeLayout { nodes: 1, gpus_per_node: None, dp_ranks_per_node: None, workers: 1 }
    }
}

impl NodeLayout {
    /// The layout one engine is placed by: a P/D side's workers are copies
    /// of one engine (`role`: the layout is a side's), so its placement is
    /// one's; an aggregated recipe's layout as it is.
    pub fn of_one_engine(&self, role: bool) -> NodeLayout {
        if role { NodeLayout { workers: 1, ..self.clone() } } else { self.clone() }
    }

    /// More than one node.
    pub fn multi_node(&self) -> bool {
        self.nodes > 1
    }

    /// The keys' own rules (before the engine's shape is known).
    ///
    /// Errors: a zero count.
    pub fn validate(&self) -> Result<(), String> {
        for (k, v) in [("nodes", Some(self.nodes)), ("workers", Some(self.workers)), ("gpus_per_node", self.gpus_per_node), ("dp_ranks_per_node", self.dp_ranks_per_node)] {
            if v == Some(0) {
                return Err(format!("[layout] {k} = 0: give a count of 1 or more"));
            }
        }
        Ok(())
    }
}

/// What a layout means for one engine configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    pub nodes: u32,
    /// DP ranks on each node (1 for an engine without DP).
    pub ranks_per_node: u32,
    /// vLLM's world size of one DP rank (TP x PP x PCP).
    pub world_size: u32,
    pub gpus_per_node: Option<u32>,
    /// One engine (a DP rank's world) is larger than a node: its workers run
    /// on several nodes (vLLM's `--nnodes`/`--node-rank` multi-node executor).
    pub spans_nodes: bool,
}

impl Placement {
    /// The placement of an engine with flags `args` (the sweep's TP
    /// `sweep_tp`, `VLLM_DP_SIZE` as the engine sees it) under `layout`.
    ///
    /// Errors (naming the keys): workers > 1 (not yet: one engine per job),
    /// DP ranks that do not split evenly over the nodes, ranks per node x
    /// world size more than `gpus_per_node`, `--data-parallel-size-local`
    /// disagreeing with `dp_ranks_per_node`.
    pub fn of(layout: &NodeLayout, args: &[String], sweep_tp: Option<u32>, vllm_dp_size: Option<&str>) -> Result<Placement, String> {
        layout.validate()?;
        let shape = Layout::of(args, sweep_tp, vllm_dp_size);
        let world_size = shape.world_size();
        if layout.workers > 1 {
            return Err(format!(
                "[layout] workers = {}: several engines of one role behind a router do not run yet (each would be its own job); give workers = 1",
                layout.workers
            ));
        }
        let flag = flag_value(args, &DP_LOCAL_FLAGS).map(|v| v.parse::<u32>().map_err(|_| format!("--data-parallel-size-local {v}: not a count")))
            .transpose()?;
        if let (Some(f), Some(k)) = (flag, layout.dp_ranks_per_node) {
            if f != k {
                return Err(format!("--data-parallel-size-local {f} but [layout] dp_ranks_per_node = {k}: give one of them"));
            }
        }
        let nodes = layout.nodes;
        let per_node = layout.dp_ranks_per_node.or(flag);
        // A DP rank larger than a node: its world spans nodes, one rank per
        // group of nodes (srt-slurm's "cross-node per_node DP").
        let spans_nodes = match layout.gpus_per_node {
            Some(g) => world_size > g,
            None => nodes > 1 && shape.dp <= 1,
        };
        let ranks_per_node = if spans_nodes {
            let nodes_per_rank = layout.gpus_per_node.map_or(nodes, |g| world_size.div_ceil(g));
            if nodes_per_rank * shape.dp != nodes {
                return Err(format!(
                    "[layout] nodes = {nodes}: each engine (TP x PP x PCP = {world_size}) spans {nodes_per_rank} node(s) of {} GPUs, so DP {} needs {} nodes",
                    layout.gpus_per_node.map_or("?".into(), |g| g.to_string()),
                    shape.dp,
                    nodes_per_rank * shape.dp
                ));
            }
            1
        } else {
            let per = per_node.unwrap_or(shape.dp.div_ceil(nodes));
            if per * nodes != shape.dp {
                return Err(format!(
                    "[layout] nodes = {nodes} with DP size {}: {} DP rank(s) per node do not make {}; give a DP size that is {nodes} x the ranks per node",
                    shape.dp,
                    per,
                    shape.dp
                ));
            }
            if let Some(g) = layout.gpus_per_node {
                if per * world_size > g {
                    return Err(format!(
                        "[layout] gpus_per_node = {g}: {per} DP rank(s) per node x world size {world_size} need {} GPUs per node",
                        per * world_size
                    ));
                }
            }
            per
        };
        Ok(Placement { nodes, ranks_per_node, world_size, gpus_per_node: layout.gpus_per_node, spans_nodes })
    }

    /// The node of DP rank `rank` and its index there (its
    /// `VLLM_DP_RANK_LOCAL`); node n holds ranks `n x L .. (n + 1) x L`,
    /// vLLM's start rank per node (`--data-parallel-start-rank`).
    pub fn node_of(&self, rank: u32) -> (u32, u32) {
        let per = self.ranks_per_node.max(1);
        (rank / per, rank % per)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    fn layout(nodes: u32, gpus: Option<u32>) -> NodeLayout {
        NodeLayout { nodes, gpus_per_node: gpus, ..NodeLayout::default() }
    }

    #[test]
    fn dp_ranks_split_over_nodes_and_big_engines_span_them() {
        // MiniMax-M3 DEP8 on 2 nodes of 4 GB200: 4 ranks a node.
        let p = Placement::of(&layout(2, Some(4)), &args("-tp 1 -dp 8 --enable-expert-parallel"), None, None).unwrap();
        assert_eq!((p.ranks_per_node, p.spans_nodes), (4, false));
        assert_eq!((p.node_of(0), p.node_of(5)), ((0, 0), (1, 1)));
        // Kimi-K3 TP8 x DP4 on 4 nodes of 8 H200: one rank a node.
        let p = Placement::of(&layout(4, Some(8)), &args("-tp 8 -dp 4"), None, None).unwrap();
        assert_eq!((p.ranks_per_node, p.spans_nodes), (1, false));
        // TP16 on 4 nodes of 4 GB200, TP8 x PP2 on 2 x 8: one engine over nodes.
        assert!(Placement::of(&layout(4, Some(4)), &args("-tp 16"), None, None).unwrap().spans_nodes);
        assert!(Placement::of(&layout(2, Some(8)), &args("-tp 8 -pp 2"), None, None).unwrap().spans_nodes);
        // TP16 x DP2 on 4 nodes of 8: each rank spans 2 nodes.
        assert!(Placement::of(&layout(4, Some(8)), &args("-tp 16 -dp 2"), None, None).unwrap().spans_nodes);
        // No GPU count (the CPU): DP over nodes, or one engine over them.
        assert_eq!(Placement::of(&layout(2, None), &args("-dp 2"), None, None).unwrap().ranks_per_node, 1);
        assert!(Placement::of(&layout(2, None), &args("-tp 2"), None, None).unwrap().spans_nodes);
        assert!(!Placement::of(&NodeLayout::default(), &args("-tp 2"), None, None).unwrap().spans_nodes);
        let flag = Placement::of(&layout(2, None), &args("-dp 4 --data-parallel-size-local 2"), None, None).unwrap();
        assert_eq!(flag.ranks_per_node, 2);
    }

    #[test]
    fn layouts_that_cannot_hold_the_engine_are_refused_naming_the_keys() {
        let e = Placement::of(&layout(3, None), &args("-dp 4"), None, None).unwrap_err();
        assert!(e.contains("nodes = 3") && e.contains("DP size 4"), "{e}");
        let e = Placement::of(&layout(2, Some(4)), &args("-tp 4 -dp 4"), None, None).unwrap_err();
        assert!(e.contains("gpus_per_node = 4"), "{e}");
        let e = Placement::of(&NodeLayout { workers: 2, ..NodeLayout::default() }, &[], None, None).unwrap_err();
        assert!(e.contains("workers = 2"), "{e}");
        let e = Placement::of(&NodeLayout { dp_ranks_per_node: Some(2), ..layout(2, None) }, &args("-dp 4 --data-parallel-size-local 1"), None, None).unwrap_err();
        assert!(e.contains("--data-parallel-size-local 1") && e.contains("dp_ranks_per_node = 2"), "{e}");
        assert!(Placement::of(&layout(0, None), &[], None, None).unwrap_err().contains("nodes = 0"));
        let e = Placement::of(&layout(3, Some(8)), &args("-tp 16 -dp 2"), None, None).unwrap_err();
        assert!(e.contains("needs 4 nodes"), "{e}");
    }
}
