# enginebench import: stands in for InferenceX's benchmarks/benchmark_lib.sh.
# Helpers that wait for the server, monitor GPUs, install tools or run the
# eval do nothing (they do not change the engine configuration); the client
# (run_benchmark_serving) and the agentic replay (resolve_trace_source,
# build_replay_cmd) are recorded, since what they are told is the
# benchmark; the KV-offload checks are re-implemented (they pick branches);
# helpers whose result the launcher would use and that need the model or
# the hardware are problems when called.

export PORT="${PORT:-8888}"

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

# A refusal of InferenceX's own KV-offload checks: the launcher stops there.
__eb_offload_refused() {
    __eb_problem "$1" "$2"
    exit 1
}

# Agentic scripts (by folder, IS_AGENTIC or SCENARIO_TYPE) replay at the
# model's native context: the library drops MAX_MODEL_LEN when sourced and
# checks the KV-offload variables.
# (The launcher is the outermost source; its `source` line is the one named.)
__eb_lib_line="${BASH_LINENO[${#BASH_LINENO[@]}-2]:-0}"
if [[ "${BASH_SOURCE[*]}" == */agentic/* || "${IS_AGENTIC:-0}" == 1 || "${SCENARIO_TYPE:-}" == agentic-coding ]]; then
    unset MAX_MODEL_LEN
    case "${KV_OFFLOADING:-}" in
        none) [ -z "${KV_OFFLOAD_BACKEND:-}" ] || __eb_offload_refused "$__eb_lib_line" "KV_OFFLOAD_BACKEND is set although KV_OFFLOADING=none" ;;
        dram)
            [[ -n "${KV_OFFLOAD_BACKEND:-}" && "$KV_OFFLOAD_BACKEND" != none ]] \
                || __eb_offload_refused "$__eb_lib_line" "KV_OFFLOADING=dram without a KV_OFFLOAD_BACKEND"
            [[ "${TOTAL_CPU_DRAM_GB:-}" =~ ^[1-9][0-9]*$ ]] \
                || __eb_offload_refused "$__eb_lib_line" "KV_OFFLOADING=dram needs TOTAL_CPU_DRAM_GB > 0" ;;
        *) __eb_offload_refused "$__eb_lib_line" "KV_OFFLOADING=${KV_OFFLOADING:-} is neither none nor dram" ;;
    esac
fi
unset __eb_lib_line

# True (0) when the point offloads KV to DRAM.
agentic_kv_offload_enabled() {
    [ -n "${KV_OFFLOADING:-}" ] || __eb_offload_refused "${BASH_LINENO[0]}" "KV_OFFLOADING is not set"
    [ "$KV_OFFLOADING" != none ]
}

require_agentic_kv_offload_none() {
    if agentic_kv_offload_enabled; then
        __eb_offload_refused "${BASH_LINENO[0]}" "the launcher requires KV_OFFLOADING=none, the point has $KV_OFFLOADING"
    fi
    [ -z "${KV_OFFLOAD_BACKEND:-}" ] || __eb_offload_refused "${BASH_LINENO[0]}" "KV_OFFLOAD_BACKEND is set although KV_OFFLOADING=none"
}

# 0 when the point offloads with backend $1, 1 without offload; a refusal
# for any other backend.
require_agentic_kv_offload_backend() {
    case "${KV_OFFLOADING:-}" in
        none)
            [ -z "${KV_OFFLOAD_BACKEND:-}" ] || __eb_offload_refused "${BASH_LINENO[0]}" "KV_OFFLOAD_BACKEND is set although KV_OFFLOADING=none"
            return 1 ;;
        dram)
            [ "${KV_OFFLOAD_BACKEND:-}" = "$1" ] \
                || __eb_offload_refused "${BASH_LINENO[0]}" "the launcher requires KV_OFFLOAD_BACKEND=$1, the point has ${KV_OFFLOAD_BACKEND:-none}"
            [[ "${TOTAL_CPU_DRAM_GB:-}" =~ ^[1-9][0-9]*$ ]] \
                || __eb_offload_refused "${BASH_LINENO[0]}" "KV_OFFLOADING=dram needs TOTAL_CPU_DRAM_GB > 0"
            return 0 ;;
        *) __eb_offload_refused "${BASH_LINENO[0]}" "KV_OFFLOADING=${KV_OFFLOADING:-} is neither none nor dram" ;;
    esac
}

# The client of a fixed-length point: its options are the benchmark.
run_benchmark_serving() {
    [ "${EVAL_ONLY:-}" = true ] && return 0
    __eb_record client "${BASH_LINENO[0]}" "$@"
}

# The agentic trace corpus: the loader InferenceX's replay uses (a
# launcher's WEKA_LOADER_OVERRIDE, else by the model family's context).
resolve_trace_source() {
    local loader
    case "${MODEL_PREFIX:-}" in
        dsv4*|glm5.2*|minimaxm3*|kimik3*) loader=semianalysis_cc_traces_weka_062126 ;;
        *) loader=semianalysis_cc_traces_weka_062126_256k ;;
    esac
    loader="${WEKA_LOADER_OVERRIDE:-$loader}"
    TRACE_SOURCE_FLAG="--public-dataset $loader"
    __eb_record trace "${BASH_LINENO[0]}" "$loader"
}

# The replay's settings are read from the environment at this call.
build_replay_cmd() {
    __eb_record replay "${BASH_LINENO[0]}" "$@"
    REPLAY_CMD=":"
}

for __eb_fn in wait_for_server_ready wait_for_ready run_eval run_lm_eval run_swebench_eval \
    append_lm_eval_summary start_gpu_monitor stop_gpu_monitor wait_for_amd_gpu_clean \
    stop_background_process_tree write_command append_command move_profile_trace_for_relay \
    ensure_hf_cli install_agentic_deps agentic_pip_install ensure_agentic_uv \
    run_agentic_replay_and_write_outputs write_agentic_result_json validate_required_agentic_server_metrics; do
    eval "$__eb_fn() { __eb_noop $__eb_fn \"\${BASH_LINENO[0]}\"; }"
done
unset __eb_fn

for __eb_fn in setup_eval_context get_native_max_context_length compute_eval_context_length; do
    eval "$__eb_fn() { __eb_problem \"\${BASH_LINENO[0]}\" \"$__eb_fn needs the model's config (the eval context): not evaluated\"; return 1; }"
done
unset __eb_fn
