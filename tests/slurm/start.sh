#!/usr/bin/env bash
# Starts a single-node Slurm cluster on this host for the executor = slurm tests: installs
# Debian's slurm-wlm and munge when missing, writes /etc/slurm/slurm.conf (only when absent
# or written by this script), and runs munged, slurmctld and slurmd directly (as root, no
# systemd). Idempotent: with the node already up it does nothing. Needs root.
set -euo pipefail

host=$(hostname -s)
conf=/etc/slurm/slurm.conf
marker="# Written by roifs tests/slurm/start.sh"
log() { echo "slurm/start.sh: $*" >&2; }

node_state() {  # idle, mixed, allocated, down*, ... or nothing when slurmctld does not answer
    timeout 10 sinfo -h -N -n "$host" -o %t 2>/dev/null | head -n 1 || true
}

alive() {  # a process of that name runs (pgrep would count a zombie left by a killed daemon)
    ps -C "$1" -o stat= 2>/dev/null | grep -qv '^Z'
}

node_up() {
    case "$(node_state)" in
        idle | mix | alloc | comp) return 0 ;;
        *) return 1 ;;
    esac
}

if command -v sinfo >/dev/null && alive munged && node_up; then
    exit 0
fi

if [ "$(id -u)" != 0 ]; then
    log "needs root (it installs packages and starts the Slurm daemons)"
    exit 1
fi

start=$(date +%s)
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null ||
    ! command -v srun >/dev/null || ! command -v munged >/dev/null; then
    log "installing slurm-wlm and munge"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q --no-install-recommends slurm-wlm munge >/dev/null ||
        { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends \
            slurm-wlm munge >/dev/null; }
fi

# ---- munge
if [ ! -s /etc/munge/munge.key ]; then
    install -d -o munge -g munge -m 0700 /etc/munge
    if command -v mungekey >/dev/null; then
        mungekey --create --keyfile /etc/munge/munge.key
    else
        dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    fi
    chown munge:munge /etc/munge/munge.key
    chmod 0400 /etc/munge/munge.key
fi
install -d -o munge -g munge -m 0755 /run/munge
install -d -o munge -g munge -m 0700 /var/log/munge /var/lib/munge
if ! alive munged; then
    runuser -u munge -- /usr/sbin/munged
fi
for _ in $(seq 50); do
    munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1 && break
    sleep 0.1
done

# ---- configuration
if [ -e "$conf" ] && ! head -n 1 "$conf" | grep -qF "$marker"; then
    log "keeping $conf (not written by this script)"
else
    mem_mb=$(awk '/^MemTotal:/ { print int($2 / 1024) }' /proc/meminfo)
    margin=$((mem_mb / 10 > 512 ? mem_mb / 10 : 512))
    install -d -m 0755 /etc/slurm
    cat >"$conf.tmp" <<EOF
$marker: a single-node test cluster.
ClusterName=roifs-test
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
ReturnToService=2
KillWait=5
MinJobAge=30
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=$((mem_mb - margin)) State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
    mv "$conf.tmp" "$conf"
fi
install -d -m 0755 /var/spool/slurmctld /var/spool/slurmd /var/log/slurm

# ---- daemons (each daemonizes itself)
alive slurmctld || slurmctld
for _ in $(seq 100); do
    timeout 5 scontrol ping 2>/dev/null | grep -q 'is UP' && break
    sleep 0.2
done
alive slurmd || slurmd

deadline=$(($(date +%s) + 60))
while ! node_up; do
    case "$(node_state)" in
        down* | drain* | drng*) scontrol update NodeName="$host" State=RESUME 2>/dev/null || true ;;
    esac
    if [ "$(date +%s)" -ge "$deadline" ]; then
        log "node $host not idle after 60 s (state: '$(node_state)'); logs in /var/log/slurm"
        tail -n 20 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log >&2 || true
        exit 1
    fi
    sleep 0.5
done
log "node $host is up ($(( $(date +%s) - start )) s)"
