# enginebench import: sourced (BASH_ENV) before an InferenceX launcher runs
# in the import sandbox. Every command that would touch the GPU, the network
# or the model is a recorder here; `vllm serve` writes its argv and exported
# environment to $EB_IMPORT_REC and returns 0. Problems go to $EB_IMPORT_REC/problems as
# "LINE<TAB>TEXT" lines; the importer fails on any of them.

__eb_problem() { printf '%s\t%s\n' "$1" "$2" >> "$EB_IMPORT_REC/problems"; }

# Records one call of KIND (serve, client, replay, trace): its line, argv
# (NUL-separated) and the exported environment at that moment.
__eb_record() {
    local kind=$1 line=$2; shift 2
    local n=$BASHPID.$RANDOM
    printf '%s\n' "$line" > "$EB_IMPORT_REC/$kind.$n.line"
    printf '%s\0' "$@" > "$EB_IMPORT_REC/$kind.$n.args"
    /usr/bin/env -0 > "$EB_IMPORT_REC/$kind.$n.env"
    return 0
}
__eb_serve() { __eb_record serve "$@"; }

# A helper server the launcher starts beside the engine (a KV store master,
# a router, a cache server): recorded by name; the importer names it as not
# reproducible in-process.
__eb_service() {
    printf '%s\t%s\n' "$2" "$1" >> "$EB_IMPORT_REC/services"
    return 0
}
mooncake_master() { __eb_service mooncake_master "${BASH_LINENO[0]}"; }
vllm-router() { __eb_service vllm-router "${BASH_LINENO[0]}"; }
lmcache() {
    if [ "${1-}" = server ]; then __eb_service "lmcache server" "${BASH_LINENO[0]}"; else __eb_noop "lmcache ${1-}" "${BASH_LINENO[0]}"; fi
}

vllm() {
    if [ "${1-}" = serve ]; then
        shift
        __eb_serve "${BASH_LINENO[0]}" "$@"
    else
        __eb_noop "vllm ${1-}" "${BASH_LINENO[0]}"
    fi
}

# A tool whose effect is outside the benchmark's engine configuration: it
# does nothing, but when its output is read ($(...) or a pipe) the value
# cannot be known off the hardware, and that is a problem.
__eb_noop() {
    if [ -p /dev/stdout ]; then
        __eb_problem "$2" "the output of \`$1\` is used, but it depends on the machine it runs on"
        return 1
    fi
    return 0
}

python3() {
    if [ "${1-}" = -m ] && [ "${2-}" = vllm.entrypoints.openai.api_server ]; then
        shift 2
        __eb_serve "${BASH_LINENO[0]}" "$@"
    else
        __eb_noop "python3 ${1-}" "${BASH_LINENO[0]}"
    fi
}
python() { python3 "$@"; }

for __eb_tool in pip pip3 uv hf huggingface-cli nvidia-smi amd-smi rocm-smi rocminfo \
    curl wget sleep docker git apt apt-get nproc lsof ss ps pkill killall ldconfig \
    numactl free df ibstat ibv_devinfo modal aws gsutil flock; do
    # ${1-}: launchers may run under `set -u` and call a tool bare (`nvidia-smi`).
    eval "$__eb_tool() { __eb_noop \"$__eb_tool \${1-}\" \"\${BASH_LINENO[0]}\"; }"
done
unset __eb_tool

# Processes started in the background are the recorders above: nothing to kill.
kill() { return 0; }
sudo() { "$@"; }
nohup() { "$@"; }
timeout() { shift; "$@"; }

command_not_found_handle() {
    __eb_problem "${BASH_LINENO[0]}" "\`$1\` is not a command the importer can run (no recorder or stub for it)"
    return 127
}

# InferenceX's scripts source its benchmark_lib.sh: they get our stub instead.
source() {
    case "$1" in
        *benchmark_lib.sh) builtin source "$EB_IMPORT_LIB/benchmark_lib.sh" ;;
        *) builtin source "$@" ;;
    esac
}
.() { source "$@"; }

# The last failing command and its line, for "exited with status N after ...".
__eb_lasterr() { printf '%s\t%s\n' "$1" "$2" > "$EB_IMPORT_REC/lasterr"; }
trap '__eb_lasterr "$LINENO" "$BASH_COMMAND"' ERR

# `vllm serve ... &` records in a background subshell: the launcher's end
# waits for it, also when the launcher sets its own EXIT trap.
builtin trap 'wait' EXIT
trap() {
    case " $* " in
        *" EXIT "*|*" 0 "*)
            if [ "$1" = - ] || [ $# -lt 2 ]; then builtin trap "$@"; builtin trap 'wait' EXIT
            else builtin trap "$1
wait" "${@:2}"; fi ;;
        *) builtin trap "$@" ;;
    esac
}
