//! Kernel groups (GEMM, attention, MoE, communication, norm, other) from the
//! name patterns in `groups.toml`, the one data file that holds them.

use std::sync::LazyLock;

use anyhow::{Context, Result};
use regex::{Regex, RegexBuilder};
use serde::Deserialize;

/// The grouping patterns, compiled into the binary.
pub const GROUPS_TOML: &str = include_str!("groups.toml");

/// The group of names that match no pattern.
pub const OTHER: &str = "other";

#[derive(Deserialize)]
struct File {
    group: Vec<GroupDef>,
}

#[derive(Deserialize)]
struct GroupDef {
    name: String,
    patterns: Vec<String>,
}

/// Ordered groups: the first group with a matching pattern wins.
pub struct Groups {
    groups: Vec<(String, Vec<Regex>)>,
}

impl Groups {
    /// Parses a patterns file in the shape of `groups.toml`.
    ///
    /// Errors: not TOML of that shape, or a pattern that is not a valid
    /// regular expression (named with its group).
    pub fn parse(text: &str) -> Result<Groups> {
        let file: File = toml::from_str(text).context("kernel group patterns")?;
        let groups = file
            .group
            .into_iter()
            .map(|g| {
                let res = g
                    .patterns
                    .iter()
                    .map(|p| {
                        RegexBuilder::new(p)
                            .case_insensitive(true)
                            .build()
                            .with_context(|| format!("group {}: pattern {p:?}", g.name))
                    })
                    .collect::<Result<Vec<_>>>()?;
                Ok((g.name, res))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Groups { groups })
    }

    /// The group of a kernel or op name (`OTHER` when nothing matches).
    pub fn classify(&self, name: &str) -> &str {
        self.groups
            .iter()
            .find(|(_, res)| res.iter().any(|r| r.is_match(name)))
            .map_or(OTHER, |(g, _)| g.as_str())
    }

    /// Group names in file order, then `OTHER`.
    pub fn names(&self) -> Vec<&str> {
        self.groups.iter().map(|(g, _)| g.as_str()).chain([OTHER]).collect()
    }
}

/// The built-in groups (`groups.toml`).
pub fn builtin() -> &'static Groups {
    static G: LazyLock<Groups> = LazyLock::new(|| Groups::parse(GROUPS_TOML).expect("groups.toml is valid"));
    &G
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_patterns_group_known_kernels() {
        let g = builtin();
        let cases = [
            // CPU ops of vLLM's CPU build (measured names)
            ("_C::onednn_mm", "GEMM"),
            ("aten::mm", "GEMM"),
            ("aten::addmm", "GEMM"),
            ("_C::cpu_attention_with_kv_cache", "attention"),
            ("_C::cpu_attn_reshape_and_cache", "attention"),
            ("_C::rotary_embedding", "attention"),
            ("_C::rms_norm", "norm"),
            ("_C::fused_add_rms_norm", "norm"),
            ("aten::silu", OTHER),
            ("aten::mean", OTHER),
            // GPU kernels
            ("Cijk_Alik_Bljk_BBS_BH_MT128x128x64", "GEMM"),
            ("ampere_bf16_s16816gemm_bf16_128x64_ldg8", "GEMM"),
            ("wvSplitK_hf_sml_", "GEMM"),
            ("fused_moe_kernel", "MoE"),
            ("ck_moe_stage1<...gemm...>", "MoE"),
            ("vllm::moe::topk_softmax", "MoE"),
            ("flash_fwd_splitkv_kernel", "attention"),
            ("paged_attention_ll4mi_QKV_mfma16_kernel", "attention"),
            ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "communication"),
            ("quickreduce::allreduce_prototype_twoshot", "communication"),
            ("vllm::cross_device_reduce_1stage", "communication"),
            ("void vllm::rms_norm_kernel<c10::BFloat16>", "norm"),
            ("Memcpy HtoD (Pageable -> Device)", OTHER),
        ];
        for (name, want) in cases {
            assert_eq!(g.classify(name), want, "{name}");
        }
        assert_eq!(g.names(), vec!["communication", "MoE", "attention", "norm", "GEMM", OTHER]);
    }

    #[test]
    fn first_group_wins_and_bad_patterns_are_named() {
        let g = Groups::parse("[[group]]\nname = \"a\"\npatterns = [\"x\"]\n[[group]]\nname = \"b\"\npatterns = [\"x\", \"^y\"]\n").unwrap();
        assert_eq!(g.classify("xy"), "a");
        assert_eq!(g.classify("YZ"), "b", "case-insensitive");
        assert_eq!(g.classify("zy"), OTHER, "anchored pattern");
        let e = Groups::parse("[[group]]\nname = \"bad\"\npatterns = [\"(\"]\n").err().unwrap();
        assert!(format!("{e:#}").contains("group bad: pattern \"(\""), "{e:#}");
    }
}
