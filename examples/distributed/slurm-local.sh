#!/bin/bash
# Bring up a single-node Slurm on this machine (munge, slurmctld and slurmd
# from Debian's packages), run sweep.toml as a 4-task array job (one shard
# per task) plus a merge job that depends on it, wait, and check the merged
# table. Needs root (it writes /etc/slurm/slurm.conf and starts daemons).
#
#   examples/distributed/slurm-local.sh [--no-install]
#
# Environment: BLIS — the blis executable (default: blis on PATH, else
# target/release/blis); WORK — the output folder (default: a new temp dir);
# the merged sweep ends in $WORK/merged. Daemons it starts keep running.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
BLIS=${BLIS:-$(command -v blis || echo "$root/target/release/blis")}
WORK=${WORK:-$(mktemp -d)}
mkdir -p "$WORK"
log() { echo "slurm-local: $*" >&2; }

if ! command -v sbatch >/dev/null; then
    if [ "${1:-}" = --no-install ]; then
        log "sbatch is not installed (run without --no-install to install slurm-wlm and munge)"; exit 2
    fi
    log "installing slurm-wlm and munge"
    start=$(date +%s)
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
    log "installed in $(( $(date +%s) - start )) s"
fi
[ -x "$BLIS" ] || { log "no blis executable at $BLIS (set BLIS)"; exit 2; }

# The daemons outlive this script, so they must not inherit its open files:
# a daemon holding a descriptor of, say, a lock file that the caller holds
# through flock(1) would keep that lock taken forever.
detached() {
    (
        fds=(/proc/self/fd/*)
        for fd in "${fds[@]}"; do
            n=${fd##*/}
            if [ "$n" -gt 2 ]; then eval "exec $n>&-"; fi
        done
        exec "$@"
    )
}

# munge: a key, and the daemon.
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    if [ ! -s /etc/munge/munge.key ]; then
        mungekey --create --force 2>/dev/null || dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    fi
    chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
    mkdir -p /run/munge && chown munge:munge /run/munge
    detached runuser -u munge -- munged
    sleep 1
    munge -n | unmunge >/dev/null
fi

# Slurm: one node (this machine), one partition, no accounting, no cgroups.
node=$(hostname -s)
conf=/etc/slurm/slurm.conf
if ! grep -q "written by blis slurm-local.sh" "$conf" 2>/dev/null; then
    [ -e "$conf" ] && { log "$conf exists and was not written by this script; not touching it"; exit 2; }
    mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
    cat > "$conf" <<CONF
# written by blis slurm-local.sh: a single-node cluster for tests
ClusterName=blis
SlurmctldHost=$node
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
NodeName=$node CPUs=$(nproc) State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
fi
if ! grep -q UP <<<"$(scontrol ping 2>/dev/null)"; then
    log "starting slurmctld"
    detached slurmctld
fi
if ! grep -qE "State=(IDLE|MIXED|ALLOCATED)" <<<"$(scontrol show node "$node" 2>/dev/null)"; then
    log "starting slurmd"
    pgrep -x slurmd >/dev/null || detached slurmd
fi
for _ in $(seq 60); do
    grep -qE "idle|mixed|alloc" <<<"$(sinfo -h -o %T 2>/dev/null)" && break
    scontrol update nodename="$node" state=resume 2>/dev/null || true
    sleep 1
done
sinfo >&2

# The array job (one shard per task) and the dependent merge job.
export SWEEP="$here/sweep.toml" OUT="$WORK" BLIS
array=$(sbatch --parsable --array=1-4 --chdir="$WORK" --export=ALL "$here/slurm-array.sbatch")
merge=$(sbatch --parsable --dependency=afterok:"$array" --chdir="$WORK" --export=ALL "$here/slurm-merge.sbatch")
log "submitted array job $array and merge job $merge"
for _ in $(seq 600); do
    grep -q . <<<"$(squeue -h -j "$array,$merge" 2>/dev/null)" || break
    sleep 1
done
if grep -q . <<<"$(squeue -h -j "$array,$merge" 2>/dev/null)"; then
    log "jobs still queued after 10 minutes"; squeue >&2; exit 1
fi
cat "$WORK"/blis-sweep-*.log >&2 2>/dev/null || true
if [ ! -s "$WORK/merged/results.csv" ]; then
    log "no merged results in $WORK/merged (see $WORK/*.log and /var/log/slurm)"; exit 1
fi
rows=$(($(wc -l < "$WORK/merged/results.csv") - 1))
log "merged $rows runs into $WORK/merged/results.csv"
ls -d "$WORK"/shard-* >&2
cut -d, -f1-6 "$WORK/merged/results.csv"
