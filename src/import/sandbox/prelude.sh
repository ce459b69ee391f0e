# enginebench import: sourced (BASH_ENV) before an InferenceX launcher runs
# in the import sandbox. Every command that would touch the GPU, the network
# or the model is a recorder here; `vllm serve` writes its argv and exported
# environment to $EB_IMPORT_REC and returns 0. Problems go to $EB_IMPORT_REC/problems as
# "LINE<TAB>TEXT" lines; the importer fails on any of them.

__eb_problem() { printf '%s\t%s\n' "$1" "$2" >> "$EB_IMPORT_REC/problems"; }

# Records one call of KIND (serve, client, replay, trace): its line, argv
# (NUL-separated) and the exported environment at that moment, written into
# a fresh folder that is renamed to KIND.ID only when all three are written:
# a record is whole or absent, and a cut-off one stays behind as .partial.*
# (the importer fails the point on it).
__eb_record() {
    local kind=$1 line=$2; shift 2
    local d
    d=$(/usr/bin/mktemp -d "$EB_IMPORT_REC/.partial.XXXXXXXX") || return 0
    printf '%s\n' "$line" > "$d/line"
    printf '%s\0' "$@" > "$d/args"
    /usr/bin/env -0 > "$d/env"
    /usr/bin/mv "$d" "$EB_IMPORT_REC/$kind.${d##*.partial.}"
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

for __eb_tool in pip pip3 uv curl wget sleep docker git apt apt-get lsof ss ps pkill killall ldconfig \
    modal aws gsutil flock; do
    # ${1-}: launchers may run under `set -u` and call a tool bare (`nvidia-smi`).
    eval "$__eb_tool() { __eb_noop \"$__eb_tool \${1-}\" \"\${BASH_LINENO[0]}\"; }"
done
unset __eb_tool

# A command that reads the machine (src/import/machine.rs): when its output
# is read, it prints the fact the importer was given for exactly this
# command line ($EB_IMPORT_FACTS/<the line's bytes in hex>) and notes it as
# used; without one it notes the command as needed (the importer resolves it
# and runs the point again) and fails.
__eb_machine() {
    local line=$1; shift
    [ -p /dev/stdout ] || return 0
    local cmd="$*" key
    key=$(printf '%s' "$cmd" | /usr/bin/od -An -v -tx1 | /usr/bin/tr -d ' \n')
    if [ -f "$EB_IMPORT_FACTS/$key" ]; then
        printf '%s\t%s\n' "$line" "$cmd" >> "$EB_IMPORT_REC/facts_used"
        /usr/bin/cat "$EB_IMPORT_FACTS/$key"
        return 0
    fi
    printf '%s\t%s\n' "$line" "$cmd" >> "$EB_IMPORT_REC/facts_needed"
    __eb_problem "$line" "the output of \`$cmd\` is used, but it depends on the machine it runs on"
    return 1
}
for __eb_tool in hostname nvidia-smi amd-smi rocm-smi rocminfo df nproc free lscpu ibstat ibv_devinfo \
    numactl ibdev2netdev; do
    eval "$__eb_tool() { __eb_machine \"\${BASH_LINENO[0]}\" $__eb_tool \"\$@\"; }"
done
unset __eb_tool

# Files of the machine (src/import/machine.rs MACHINE_FILE_ROOTS: /sys/):
# the sandbox's /sys holds only the file facts known so far. A text tool
# given such a path notes a known file as used; an unknown one as needed,
# and the launcher stops at that read (the importer resolves it and runs the
# point again), so facts are asked for in the order the launcher reads them.
__eb_files() {
    local line=$1 tool=$2 a; shift 2
    for a in "$@"; do
        case "$a" in
            /sys/*)
                if [ -f "$a" ]; then
                    printf '%s\t%s\n' "$line" "$a" >> "$EB_IMPORT_REC/facts_used"
                elif [ ! -e "$a" ]; then
                    printf '%s\t%s\n' "$line" "$a" >> "$EB_IMPORT_REC/facts_needed"
                    __eb_problem "$line" "\`$tool\` reads $a, a file of the machine it runs on"
                    # The launcher's shell, also from a $(...) subshell.
                    [ "$BASHPID" = "$$" ] || builtin kill -TERM "$$"
                    exit 3
                fi ;;
        esac
    done
}
for __eb_tool in cat grep egrep sed awk cut head tail sort uniq wc paste ls stat find readlink realpath cp; do
    eval "$__eb_tool() { __eb_files \"\${BASH_LINENO[0]}\" $__eb_tool \"\$@\"; command $__eb_tool \"\$@\"; }"
done
unset __eb_tool

# A model download: nothing is fetched. With --local-dir DIR the checkpoint
# is counted as present: DIR gets a placeholder config.json (so the
# launcher's own "is the checkpoint complete" check, which looks for it and
# whose python3 part is a recorder, passes), and the importer notes it.
__eb_download() {
    local tool=$1 line=$2; shift 2
    if [ "${1-}" = download ]; then
        local dir="" a prev=""
        for a in "$@"; do
            case "$a" in --local-dir=*) dir=${a#--local-dir=} ;; esac
            [ "$prev" = --local-dir ] && dir=$a
            prev=$a
        done
        if [ -n "$dir" ]; then
            /usr/bin/mkdir -p "$dir" && { [ -e "$dir/config.json" ] || printf '{}\n' > "$dir/config.json"; } \
                && printf '%s\t%s\n' "$line" "$tool $*" >> "$EB_IMPORT_REC/checkpoints"
        fi
    fi
    __eb_noop "$tool ${1-}" "$line"
}
hf() { __eb_download hf "${BASH_LINENO[0]}" "$@"; }
huggingface-cli() { __eb_download huggingface-cli "${BASH_LINENO[0]}" "$@"; }

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

# `vllm serve ... &` records in a background subshell, and the sandbox ends
# (every process in it killed) when the launcher's shell exits: the shell
# must wait for its background recorders on every way out. At the end of
# the script the EXIT trap waits (a launcher's own EXIT trap gets the wait
# appended); `exit` anywhere, including inside a launcher's EXIT trap (the
# MiniMax-M3 agentic launchers' cleanup ends with `exit "$exit_code"`, which
# skips anything after it), waits first.
exit() {
    local rc=$?
    wait
    builtin exit "${1-$rc}"
}
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
