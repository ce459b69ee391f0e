/work/main/bench/promptgen/target/release/deps/enginebench_promptgen-03edaa86452b0983.d: src/main.rs src/../../../src/protocol/point.rs src/../../../src/workload/lengths.rs src/../../../src/workload/prompts.rs src/../../../src/workload/sessions.rs src/../../../src/workload/synth.rs src/../../../src/workload/agentx_shape.rs

/work/main/bench/promptgen/target/release/deps/libenginebench_promptgen-03edaa86452b0983.rmeta: src/main.rs src/../../../src/protocol/point.rs src/../../../src/workload/lengths.rs src/../../../src/workload/prompts.rs src/../../../src/workload/sessions.rs src/../../../src/workload/synth.rs src/../../../src/workload/agentx_shape.rs

src/main.rs:
src/../../../src/protocol/point.rs:
src/../../../src/workload/lengths.rs:
src/../../../src/workload/prompts.rs:
src/../../../src/workload/sessions.rs:
src/../../../src/workload/synth.rs:
src/../../../src/workload/agentx_shape.rs:
