#!/usr/bin/env bash
# The GPU smoke check: the GPU paths that no CPU test can run, each checked
# once on real hardware, in one command and under 10 minutes, with no network
# beyond what the image has. Run it inside the vLLM image (vllm/vllm-openai on
# NVIDIA, rocm/vllm-dev on AMD) with enginebench installed from the wheel
# (or from this clone, target/release/enginebench):
#
#   bench/gpu_smoke.sh [OUT_DIR]          # MODEL=<hub id or path> to choose the model
#
# It prints one line per check, `ok`, `wrong` or `could not run`, with what
# it saw, and writes every output (result folders, logs, JSON) into OUT_DIR
# (default gpu-smoke-<UTC time>), the lines too (summary.txt).
#
# Checks: doctor; telemetry for 3 s (source, power field, sampled GPUs); a
# TP1 point with --step-trace (async scheduling on, prefill/decode tokens of
# the steps add up, no empty step counted as decode, the point's telemetry on
# GPU 0); a run under CUDA_VISIBLE_DEVICES=1 (the sampled GPU is 1); a TP2
# --profile (device kernels in rank 0's table, rank 1's trace beside it, GPU
# memory back to its baseline after exit); a -dp 2 recipe (exit 2 or runs,
# never hangs). On AMD also: the partition mode against the sockets
# telemetry reports, the GPU enumeration order of amd-smi against HIP's,
# --parallel-jobs 2 (two TP1 jobs on different GPUs, consistent
# HIP/CUDA_VISIBLE_DEVICES), and the amd-smi CLI fallback bracketing a window.
#
# The model (default Qwen/Qwen2.5-0.5B-Instruct: small, 2 KV heads, so TP2
# works) must be a local path or already in the Hugging Face cache. Engines
# run eager (no compile, no graph capture) to stay within the time.
#
# Exit: 0 nothing wrong; 1 a check is wrong; 3 no GPU on this machine.
#
# To exercise the script itself on a machine without a GPU (its checks then
# say `wrong`: a CPU engine has no async scheduling, no device kernels):
# SMOKE_VENDOR=nvidia forces the vendor, SMOKE_ENGINE_ARGS adds engine flags
# (a TOML fragment, e.g. ', "--dtype", "float32"').
set -uo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-gpu-smoke-$(date -u +%Y%m%dT%H%M%SZ)}
model=${MODEL:-Qwen/Qwen2.5-0.5B-Instruct}
py=${PYTHON:-python3}
eb=${ENGINEBENCH:-$(command -v enginebench || echo "$repo/target/release/enginebench")}
engine_timeout=${SMOKE_ENGINE_TIMEOUT:-240}
mkdir -p "$out"
out=$(cd "$out" && pwd)
summary=$out/summary.txt
: > "$summary"
wrong=0

# One result line: STATUS CHECK DETAIL.
line() {
    printf '%-13s %-16s %s\n' "$1" "$2" "$3" | tee -a "$summary"
    [ "$1" = wrong ] && wrong=1
    return 0
}

# A value from a JSON file: jsonq FILE PYTHON-EXPRESSION-OF-d (prints it, or
# nothing when the file or the path is missing).
jsonq() {
    "$py" - "$1" "$2" <<'EOF' 2>/dev/null
import json, sys
try:
    d = json.load(open(sys.argv[1]))
    v = eval(sys.argv[2], {"d": d})
    print(json.dumps(v) if not isinstance(v, str) else v)
except Exception:
    pass
EOF
}

vendor=${SMOKE_VENDOR:-}
if [ -n "$vendor" ]; then
    :
elif [ -e /dev/nvidiactl ] || ls /dev/nvidia[0-9]* >/dev/null 2>&1; then
    vendor=nvidia
elif [ -e /dev/kfd ]; then
    vendor=amd
fi
checks=(doctor telemetry tp1-async visible-gpu1 tp2-profile dp2)
amd_checks=(amd-partition amd-enumeration amd-parallel amd-cli)

if [ -z "$vendor" ]; then
    for c in "${checks[@]}" "${amd_checks[@]}"; do
        line "could not run" "$c" "no GPU on this machine (no /dev/nvidia*, no /dev/kfd)"
    done
    echo "no GPU: nothing checked; outputs in $out" | tee -a "$summary"
    exit 3
fi
if [ ! -x "$eb" ]; then
    for c in "${checks[@]}"; do line "could not run" "$c" "no enginebench binary ($eb): pip install the wheel or build this clone"; done
    exit 3
fi

gpus=$("$py" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
model_ok=1
if [ ! -e "$model" ]; then
    "$py" -c "import sys; from huggingface_hub import snapshot_download; snapshot_download(sys.argv[1], local_files_only=True)" "$model" \
        >/dev/null 2>&1 || model_ok=0
fi

# recipe NAME EXTRA-ARGS-TOML [EXTRA-TOML]: a recipe file in OUT_DIR.
recipe() {
    cat > "$out/$1.toml" <<EOF
name = "$1"
model = "$model"
[engine]
args = ["--max-model-len", "2048", "--gpu-memory-utilization", "0.45", "--enforce-eager"$2${SMOKE_ENGINE_ARGS:-}]
[sweep]
isl = 128
osl = 32
range_ratio = 0.0
conc = [4]
num_prompts = 8
warmups = 0
${3:-}
EOF
    echo "$out/$1.toml"
}

# run_engine DIR ARGS...: enginebench run with a time limit; returns its exit code.
run_engine() {
    local dir=$1
    shift
    timeout "$engine_timeout" "$eb" run "$@" --no-eval -o "$dir" > "$dir.log" 2>&1
}

needs_engine() {
    if [ "$model_ok" = 0 ]; then
        line "could not run" "$1" "model $model is neither a path nor in the Hugging Face cache (set MODEL=...)"
        return 1
    fi
}

# --- doctor -----------------------------------------------------------------
timeout 300 "$eb" doctor --json > "$out/doctor.json" 2> "$out/doctor.log"
rc=$?
count=$(jsonq "$out/doctor.json" 'd["engine"]["devices"]["count"]')
if [ "$rc" = 0 ] && [ "${count:-0}" -ge 1 ]; then
    line ok doctor "vLLM $(jsonq "$out/doctor.json" 'd["engine"]["vllm"]'), $count $(jsonq "$out/doctor.json" 'd["engine"]["devices"]["kind"]') device(s)"
else
    line wrong doctor "exit $rc, devices ${count:-?} (see doctor.json, doctor.log)"
fi

# --- telemetry --------------------------------------------------------------
"$eb" telemetry --seconds 3 --json > "$out/telemetry.json" 2> "$out/telemetry.log"
src=$(jsonq "$out/telemetry.json" '[s["name"] for s in d["sources"] if s["used"] and s["name"] not in ("host", "rapl")][0]')
n=$(jsonq "$out/telemetry.json" 'len(d["gpus"])')
field=$(jsonq "$out/telemetry.json" 'd["gpus"][0].get("power_field") or "-"')
power=$(jsonq "$out/telemetry.json" 'round(d["summary"]["gpus"][0]["power_w"]["mean"], 1)')
valid=$(jsonq "$out/telemetry.json" 'd["summary"]["power_valid"]')
if [ -n "$src" ] && [ "${n:-0}" -ge 1 ] && [ -n "$power" ] && [ "$valid" = true ]; then
    line ok telemetry "$src, $n GPU(s), GPU 0 at $power W, power field: $field"
else
    line wrong telemetry "source ${src:-none}, ${n:-0} GPU(s), power ${power:-N/A}, power_valid ${valid:-?} (see telemetry.json)"
fi
base_mem=$(jsonq "$out/telemetry.json" '[round(g["mem_used_bytes"]["mean"] / 2**30, 2) for g in d["summary"]["gpus"][:2]]')

# --- TP1 point, step trace: async scheduling attribution ----------------------
if needs_engine tp1-async; then
    r=$(recipe tp1 "")
    run_engine "$out/tp1" "$r" --step-trace
    rc=$?
    res=$out/tp1/result.json
    asyn=$(jsonq "$res" 'd["jobs"][0]["engine"].get("async_scheduling")')
    pt=$(jsonq "$res" 'd["jobs"][0]["points"][0]["step_stats"]["prefill_tokens"]')
    dt=$(jsonq "$res" 'd["jobs"][0]["points"][0]["step_stats"]["decode_tokens"]')
    empty_decode=$("$py" -c '
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1])]
print(sum(1 for s in steps if s.get("output_tokens", 0) == 0 and (s.get("decode_tokens") or 0) > 0))' "$out/tp1/steps.jsonl" 2>/dev/null)
    tgpus=$(jsonq "$res" '[g["gpu"] for g in d["jobs"][0]["points"][0]["telemetry"]["gpus"]]')
    tvalid=$(jsonq "$res" 'd["jobs"][0]["points"][0]["telemetry"]["power_valid"]')
    if [ "$rc" != 0 ]; then
        line wrong tp1-async "exit $rc (see tp1.log)"
    elif [ "$asyn" = true ] && [ "$pt" = $((8 * 128)) ] && [ "$dt" = $((8 * 31)) ] && [ "$empty_decode" = 0 ] && [ "$tgpus" = "[0]" ] && [ "$tvalid" = true ]; then
        line ok tp1-async "async scheduling on; prefill $pt = 8 x 128, decode $dt = 8 x 31 tokens; no empty step counted as decode; telemetry GPU $tgpus valid"
    else
        line wrong tp1-async "async ${asyn:-?}, prefill ${pt:-?} (want 1024), decode ${dt:-?} (want 248), empty steps with decode ${empty_decode:-?}, telemetry GPUs ${tgpus:-?} valid ${tvalid:-?}"
    fi
fi

# --- CUDA_VISIBLE_DEVICES=1: the sampled GPU is 1 ---------------------------------
if [ "${gpus:-0}" -lt 2 ]; then
    line "could not run" visible-gpu1 "needs 2 GPUs, $gpus visible"
elif needs_engine visible-gpu1; then
    r=$(recipe vis1 "")
    CUDA_VISIBLE_DEVICES=1 run_engine "$out/vis1" "$r"
    rc=$?
    res=$out/vis1/result.json
    tgpus=$(jsonq "$res" '[g["gpu"] for g in d["jobs"][0]["points"][0]["telemetry"]["gpus"]]')
    tvalid=$(jsonq "$res" 'd["jobs"][0]["points"][0]["telemetry"]["power_valid"]')
    if [ "$rc" = 0 ] && [ "$tgpus" = "[1]" ] && [ "$tvalid" = true ]; then
        line ok visible-gpu1 "the point's telemetry is GPU 1's, power valid"
    else
        line wrong visible-gpu1 "exit $rc, telemetry GPUs ${tgpus:-?} (want [1]), power_valid ${tvalid:-?}"
    fi
fi

# --- TP2 --profile: device kernels, other ranks, memory freed ----------------------
if [ "${gpus:-0}" -lt 2 ]; then
    line "could not run" tp2-profile "needs 2 GPUs, $gpus visible"
elif needs_engine tp2-profile; then
    r=$(recipe tp2 ', "--tensor-parallel-size", "2"')
    run_engine "$out/tp2" "$r" --profile --profile-steps 4
    rc=$?
    res=$out/tp2/result.json
    source=$(jsonq "$res" 'd["jobs"][0]["points"][0]["profile"]["kernels"]["source"]')
    top=$(jsonq "$res" 'd["jobs"][0]["points"][0]["profile"]["kernels"]["rows"][0]["name"][:60]')
    others=$(jsonq "$res" 'len(d["jobs"][0]["points"][0]["profile"].get("other_ranks", []))')
    kind=$(jsonq "$res" 'd["jobs"][0]["engine"].get("profiler")')
    "$eb" telemetry --seconds 2 --json > "$out/telemetry-after-tp2.json" 2>/dev/null
    after_mem=$(jsonq "$out/telemetry-after-tp2.json" '[round(g["mem_used_bytes"]["mean"] / 2**30, 2) for g in d["summary"]["gpus"][:2]]')
    freed=$("$py" -c 'import json, sys; a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2]); print(all(y - x < 1.0 for x, y in zip(a, b)))' "${base_mem:-[]}" "${after_mem:-[]}" 2>/dev/null)
    if [ "$rc" = 0 ] && [ "$source" = device_kernels ] && [ "$others" = 1 ] && [ "$kind" = vllm ] && [ "$freed" = True ]; then
        line ok tp2-profile "device kernels (top: $top), rank 1's trace beside rank 0's; GPU memory $base_mem GiB before, $after_mem after"
    else
        line wrong tp2-profile "exit $rc, profiler ${kind:-?}, source ${source:-none}, other ranks ${others:-?}, GPU memory ${base_mem:-?} GiB before vs ${after_mem:-?} after (see tp2.log)"
    fi
fi

# --- -dp 2: a clear refusal or a run, never a hang ---------------------------------
if needs_engine dp2; then
    r=$(recipe dp2 ', "--data-parallel-size", "2"')
    engine_timeout=${SMOKE_DP_TIMEOUT:-180} run_engine "$out/dp2" "$r"
    rc=$?
    case $rc in
        2) why=$(grep -m1 -o 'data-parallel-size 2[^;]*' "$out/dp2.log")
           if [ -n "$why" ]; then line ok dp2 "refused with exit 2: $why"
           else line wrong dp2 "exit 2 for another reason: $(grep -m1 -i error "$out/dp2.log")"; fi ;;
        0) line ok dp2 "ran to the end" ;;
        124) line wrong dp2 "still running after ${SMOKE_DP_TIMEOUT:-180} s: it hangs (see dp2.log)" ;;
        *) line wrong dp2 "exit $rc (see dp2.log)" ;;
    esac
fi

# --- AMD only -----------------------------------------------------------------
if [ "$vendor" != amd ]; then
    for c in "${amd_checks[@]}"; do line "could not run" "$c" "AMD only ($vendor GPUs here)"; done
else
    # Partition mode against the sockets the telemetry reports.
    mode=$( (amd-smi static --partition --json 2>/dev/null || amd-smi partition --json 2>/dev/null) | tee "$out/amd-partition.json" | "$py" -c '
import json, sys, re
t = sys.stdin.read()
m = re.findall(r"\"(?:compute_partition|accelerator_type)\"\s*:\s*\"([A-Z]+)", t)
print(sorted(set(m))[0] if m else "")' 2>/dev/null)
    sockets=$(jsonq "$out/telemetry.json" 'len({g.get("socket") for g in d["gpus"] if g.get("socket") is not None})')
    per=$(jsonq "$out/telemetry.json" 'max([sum(1 for h in d["gpus"] if h.get("socket") == g.get("socket")) for g in d["gpus"]] or [0])')
    if [ -z "$mode" ] || [ -z "$sockets" ]; then
        line "could not run" amd-partition "amd-smi gave no partition mode (${mode:-none}) or telemetry no sockets (${sockets:-none}): see amd-partition.json, telemetry.json"
    elif { [ "$mode" = SPX ] && [ "$per" = 1 ]; } || { [ "$mode" != SPX ] && [ "${per:-1}" -gt 1 ]; }; then
        line ok amd-partition "$mode: $n GPU(s) on $sockets socket(s), up to $per per socket"
    else
        line wrong amd-partition "$mode, but telemetry groups $n GPU(s) into $sockets socket(s), up to $per per socket"
    fi
    # Enumeration order: amd-smi's GPU index -> BDF against HIP's device order.
    smi=$(amd-smi list --json 2>/dev/null | "$py" -c '
import json, sys
d = json.load(sys.stdin)
d = d.get("gpu_data", d) if isinstance(d, dict) else d
print(json.dumps([str(g.get("bdf", "")).lower() for g in d]))' 2>/dev/null)
    hip=$("$py" -c '
import json, torch
out = []
for i in range(torch.cuda.device_count()):
    p = torch.cuda.get_device_properties(i)
    out.append("%04x:%02x:%02x.0" % (getattr(p, "pci_domain_id", 0), p.pci_bus_id, p.pci_device_id))
print(json.dumps(out))' 2>/dev/null)
    if [ -z "$smi" ] || [ -z "$hip" ]; then
        line "could not run" amd-enumeration "amd-smi list or torch gave no PCI ids"
    elif "$py" -c 'import json, sys; a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2]); sys.exit(0 if [x[:10] for x in a[:len(b)]] == [x[:10] for x in b] else 1)' "$smi" "$hip"; then
        line ok amd-enumeration "amd-smi and HIP number the GPUs alike: $hip"
    else
        line wrong amd-enumeration "amd-smi $smi vs HIP $hip"
    fi
    # --parallel-jobs 2: two TP1 jobs at once on different GPUs.
    if [ "${gpus:-0}" -lt 2 ]; then
        line "could not run" amd-parallel "needs 2 GPUs, $gpus visible"
    elif needs_engine amd-parallel; then
        r=$(recipe par "" '[variants.a]
args_replace = { "--gpu-memory-utilization" = "0.40" }
[variants.b]
args_replace = { "--gpu-memory-utilization" = "0.41" }')
        run_engine "$out/par" "$r" --variants a,b --parallel-jobs 2
        rc=$?
        res=$out/par/result.json
        g=$(jsonq "$res" '[[x["gpu"] for x in j["points"][0]["telemetry"]["gpus"]] for j in d["jobs"]]')
        st=$(jsonq "$res" '[j["status"] for j in d["jobs"]]')
        if [ "$rc" = 0 ] && "$py" -c 'import json, sys; g = json.loads(sys.argv[1]); sys.exit(0 if len(g) == 2 and all(len(x) == 1 for x in g) and g[0] != g[1] else 1)' "${g:-[]}" 2>/dev/null; then
            line ok amd-parallel "two jobs at once on GPUs $g"
        else
            line wrong amd-parallel "exit $rc, jobs ${st:-?} on GPUs ${g:-?} (see par.log; an 'Inconsistent GPU visibility' there is the HIP/CUDA mismatch)"
        fi
    fi
    # amd-smi CLI fallback: readings at ~1 s bracket a window.
    if command -v amd-smi >/dev/null; then
        ENGINEBENCH_TELEMETRY_SOURCES=amd-smi "$eb" telemetry --seconds 5 --json > "$out/telemetry-amd-smi.json" 2>/dev/null
        used=$(jsonq "$out/telemetry-amd-smi.json" '[s["name"] for s in d["sources"] if s["used"]][0]')
        v=$(jsonq "$out/telemetry-amd-smi.json" 'd["summary"]["power_valid"]')
        why=$(jsonq "$out/telemetry-amd-smi.json" '"; ".join(d["summary"]["power_invalid_reasons"])[:200]')
        if [ "$used" = amd-smi ] && [ "$v" = true ]; then
            line ok amd-cli "amd-smi readings bracket a 5 s window: power valid"
        else
            line wrong amd-cli "source ${used:-none}, power_valid ${v:-?}: ${why:-}"
        fi
    else
        line "could not run" amd-cli "no amd-smi on PATH"
    fi
fi

echo "outputs in $out" | tee -a "$summary"
exit $wrong
