//! `enginebench recipe show`: the effective environment, flags and sweep
//! matrix of a recipe, one job per line, as a sweep generator would list them.

use super::EngineConfig;

/// Renders the configurations for a terminal; `extras[i]` (e.g. the knob
/// report in words) follows configuration i, where given.
pub fn render(recipe_name: &str, model: &str, configs: &[EngineConfig], extras: &[String]) -> String {
    let mut out = String::new();
    for (i, c) in configs.iter().enumerate() {
        out.push_str(&format!("== {recipe_name} / {}\n", c.label()));
        out.push_str("env:\n");
        for (k, v) in &c.env {
            out.push_str(&format!("  {k}={v}\n"));
        }
        for k in &c.env_unset {
            out.push_str(&format!("  unset {k}\n"));
        }
        let mut argv = vec!["vllm".to_string(), "serve".to_string(), model.to_string()];
        argv.extend(c.args.iter().cloned());
        out.push_str(&format!("engine:\n  {}\n", shell_words::join(&argv)));
        if c.layout.multi_node() {
            out.push_str(&format!("layout:\n  {}\n", describe_layout(c)));
        }
        out.push_str(&format!("points ({}):\n", c.points.len()));
        out.push_str("  variant         tp    isl   osl   conc  prompts  warmups\n");
        for p in &c.points {
            out.push_str(&format!(
                "  {:<14} {:>3} {:>6} {:>5} {:>6} {:>8} {:>8}\n",
                c.variant.as_deref().unwrap_or("base"),
                p.tp.map_or("-".to_string(), |t| t.to_string()),
                p.isl,
                p.osl,
                p.conc,
                p.num_prompts,
                p.warmups
            ));
        }
        if let Some(extra) = extras.get(i) {
            out.push_str(extra);
        }
    }
    out
}

/// The layout in words: "2 nodes of 4 GPUs: DP ranks across nodes, 4 a
/// node" or "... one engine spanning them (vLLM's multi-node executor)".
fn describe_layout(c: &EngineConfig) -> String {
    let l = &c.layout;
    let gpus = l.gpus_per_node.map(|g| format!(" of {g} GPUs")).unwrap_or_default();
    let what = match super::layout::Placement::of(&l.of_one_engine(c.role.is_some()), &c.args, c.tp, c.env.get(super::parallel::DP_SIZE_VAR).map(String::as_str)) {
        Ok(p) if p.spans_nodes => "one engine spanning them (vLLM's multi-node executor, headless followers)".to_string(),
        Ok(p) => format!("DP ranks across nodes, {} a node", p.ranks_per_node),
        Err(e) => e,
    };
    format!("{} nodes{gpus}: {what}", l.nodes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recipe::{Recipe, Sweep};

    #[test]
    fn shows_env_flags_and_matrix() {
        let r = Recipe::parse(
            "name = \"x\"\nmodel = \"m\"\nenv_unset = [\"B\"]\n[env]\nA = \"1\"\n[engine]\nargs = [\"--hf-overrides\", \"{\\\"k\\\": 1}\"]\n[sweep]\nisl = 8\nosl = 4\nconc_range = [1, 2]\ntp = [2]",
            "x",
        )
        .unwrap();
        let c = r.engine_configs(&[], &Sweep::default()).unwrap();
        let text = render("x", "m", &c, &[]);
        assert!(text.contains("== x / base tp=2"), "{text}");
        assert!(text.contains("  A=1\n") && text.contains("  unset B\n"), "{text}");
        assert!(text.contains("vllm serve m --hf-overrides '{\"k\": 1}' --tensor-parallel-size 2"), "{text}");
        assert_eq!(text.lines().filter(|l| l.starts_with("  base")).count(), 2);
    }
}
