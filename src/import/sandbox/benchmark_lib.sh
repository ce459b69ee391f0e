# enginebench import: stands in for InferenceX's benchmarks/benchmark_lib.sh.
# Helpers that wait for the server, run the client, monitor GPUs or run the
# eval do nothing (they do not change the engine configuration); helpers
# whose result the launcher would use and that need the model or the
# hardware are problems when called.

check_env_vars() {
    local v missing=()
    for v in "$@"; do
        [ -n "${!v}" ] || missing+=("$v")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        __eb_problem "${BASH_LINENO[0]}" "check_env_vars: ${missing[*]} not set by InferenceX's workflow for this point"
        exit 1
    fi
}

for __eb_fn in wait_for_server_ready wait_for_ready run_benchmark_serving run_eval run_lm_eval \
    append_lm_eval_summary start_gpu_monitor stop_gpu_monitor wait_for_amd_gpu_clean \
    stop_background_process_tree write_command append_command move_profile_trace_for_relay \
    ensure_hf_cli install_agentic_deps agentic_pip_install ensure_agentic_uv \
    require_agentic_kv_offload_none require_agentic_kv_offload_backend; do
    eval "$__eb_fn() { __eb_noop $__eb_fn \"\${BASH_LINENO[0]}\"; }"
done
unset __eb_fn

agentic_kv_offload_enabled() { return 1; }

for __eb_fn in setup_eval_context get_native_max_context_length compute_eval_context_length; do
    eval "$__eb_fn() { __eb_problem \"\${BASH_LINENO[0]}\" \"$__eb_fn needs the model's config (the eval context): not evaluated\"; return 1; }"
done
unset __eb_fn
