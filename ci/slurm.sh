#!/usr/bin/env bash
# A one-machine Slurm cluster for the Slurm end-to-end tests (tests/it/slurm_e2e.rs).
#
#   ci/slurm.sh start   install slurm-wlm + munge if missing (root, apt-get),
#                       write slurm.conf into $ENGINEBENCH_SLURM_DIR (default
#                       /tmp/enginebench-slurm), start munged, slurmctld and
#                       slurmd, and wait until the node is idle
#   ci/slurm.sh stop    stop the three daemons started by `start`
#   ci/slurm.sh env     print the SLURM_CONF line the tests need
#
# The cluster: one node (this host) with its CPUs, one partition `debug`,
# ProctrackType=proctrack/linuxproc and TaskPlugin=task/none (no cgroups in
# these containers), no accounting storage (no slurmdbd: enginebench reads
# task states with scontrol), and a completion log (jobcomp/filetxt) for
# people reading what ran. Idempotent: `start` on a running cluster only
# waits for the node.
set -euo pipefail
dir=${ENGINEBENCH_SLURM_DIR:-/tmp/enginebench-slurm}
conf=$dir/slurm.conf
host=$(hostname -s)
cpus=$(nproc)

log() { echo "[slurm] $*" >&2; }

install() {
    command -v slurmctld >/dev/null && command -v munged >/dev/null && return
    [ "$(id -u)" = 0 ] || { log "slurm-wlm/munge missing and not root: cannot apt-get install them"; exit 1; }
    log "installing slurm-wlm and munge (apt-get)"
    apt-get install -y -q slurm-wlm munge >/dev/null 2>&1 ||
        { apt-get update -q >/dev/null && apt-get install -y -q slurm-wlm munge >/dev/null; }
}

write_conf() {
    mkdir -p "$dir"/{state,spool,log,run}
    cat >"$conf" <<EOF
ClusterName=enginebench
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/log/jobcomp.txt
ReturnToService=2
MinJobAge=3600
KillWait=10
NodeName=$host CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
}

start() {
    install
    [ "$(id -u)" = 0 ] || { log "starting munged/slurmctld/slurmd needs root"; exit 1; }
    write_conf
    export SLURM_CONF=$conf
    if ! pgrep -x munged >/dev/null; then
        [ -s /etc/munge/munge.key ] || mungekey --create >/dev/null 2>&1 || mungekey >/dev/null
        mkdir -p /run/munge /var/log/munge /var/lib/munge
        chown -R munge:munge /run/munge /var/log/munge /var/lib/munge /etc/munge 2>/dev/null || true
        # --force: these containers have no syslog and loose /etc permissions.
        (munged --force 2>/dev/null || sudo -u munge munged --force) || { log "munged did not start"; exit 1; }
    fi
    [ -f "$dir/run/slurmctld.pid" ] && kill -0 "$(cat "$dir/run/slurmctld.pid")" 2>/dev/null || slurmctld -f "$conf"
    [ -f "$dir/run/slurmd.pid" ] && kill -0 "$(cat "$dir/run/slurmd.pid")" 2>/dev/null || slurmd -f "$conf"
    for _ in $(seq 1 60); do
        state=$(sinfo -h -N -o %t 2>/dev/null | head -1 || true)
        case $state in
            idle|mix|alloc) log "node $host $state ($(sinfo --version), SLURM_CONF=$conf)"; return ;;
            down*|drain*) scontrol update nodename="$host" state=resume >/dev/null 2>&1 || true ;;
        esac
        sleep 1
    done
    log "the node did not become idle within 60 s; logs in $dir/log"
    tail -20 "$dir/log/slurmctld.log" "$dir/log/slurmd.log" >&2 || true
    exit 1
}

stop() {
    for d in slurmd slurmctld; do
        pid_file=$dir/run/$d.pid
        if [ -f "$pid_file" ] && kill -0 "$(cat "$pid_file")" 2>/dev/null; then
            kill "$(cat "$pid_file")" && log "stopped $d"
        fi
    done
}

case ${1:-} in
    start) start ;;
    stop) stop ;;
    env) echo "SLURM_CONF=$conf" ;;
    *) echo "usage: ci/slurm.sh start|stop|env" >&2; exit 2 ;;
esac
