#!/usr/bin/env bash
# A real single-node Slurm cluster on this machine, to test `python -m grader slurm` against.
#
#   slurm/cluster.sh install   # apt-get install slurm-wlm munge (Debian/Ubuntu, as root)
#   slurm/cluster.sh start     # munged, slurmctld, slurmd; waits until the node takes jobs
#   slurm/cluster.sh status
#   slurm/cluster.sh stop      # stops the daemons by their pid files
#   slurm/cluster.sh running   # exit status 0 when slurmctld and slurmd run
#
# Runs as root without systemd (containers, CI machines). The configuration is rendered from
# slurm.conf.in, cgroup.conf and gres.conf.in next to this script, with this machine's host name,
# CPU count and memory, into /etc/slurm. State lives under /var/spool, pid files under /run,
# logs under /var/log/slurm. Exit status: 0 when the cluster is up (start) or stopped (stop);
# 2 when Slurm is not installed or we are not root.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
CONF_DIR=/etc/slurm
RUN_DIR=/run/slurm
LOG_DIR=/var/log/slurm
MUNGE_PID=/run/munge/munged.pid
CTLD_PID=$RUN_DIR/slurmctld.pid
SLURMD_PID=$RUN_DIR/slurmd.pid

say() { echo "slurm/cluster.sh: $*"; }

need_root() {
    if [ "$(id -u)" != 0 ]; then say "must run as root (it starts munged, slurmctld and slurmd)"; exit 2; fi
}

installed() { command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null; }

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

install() {
    need_root
    if installed; then say "slurm and munge are installed"; return; fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q slurm-wlm munge >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q slurm-wlm munge >/dev/null; }
    say "installed slurm-wlm and munge"
}

render() {
    local node cpus memory_mb
    node="$(hostname -s)"
    cpus="$(nproc)"
    # RealMemory must not exceed what slurmd finds; keep 10% for the system.
    memory_mb="$(awk '/^MemTotal:/ {printf "%d", $2 / 1024 * 0.9}' /proc/meminfo)"
    mkdir -p "$CONF_DIR"
    sed -e "s/@NODE@/$node/g" -e "s/@CPUS@/$cpus/g" -e "s/@MEMORY_MB@/$memory_mb/g" \
        "$HERE/slurm.conf.in" > "$CONF_DIR/slurm.conf"
    sed -e "s/@NODE@/$node/g" "$HERE/gres.conf.in" > "$CONF_DIR/gres.conf"
    cp "$HERE/cgroup.conf" "$CONF_DIR/cgroup.conf"
}

start_munge() {
    if alive "$MUNGE_PID"; then return; fi
    mkdir -p /run/munge && chown munge:munge /run/munge
    if [ ! -f /etc/munge/munge.key ]; then
        (command -v mungekey >/dev/null && mungekey --create) || /usr/sbin/create-munge-key -f
        chown munge:munge /etc/munge/munge.key
    fi
    su -s /bin/sh munge -c /usr/sbin/munged
}

wait_for_node() {
    local node state
    node="$(hostname -s)"
    for _ in $(seq 60); do
        state="$(sinfo --noheader --nodes "$node" --format '%T' 2>/dev/null || true)"
        case "$state" in
            idle*|mixed*|allocated*|completing*) return 0 ;;
            down*|drain*) scontrol update nodename="$node" state=resume >/dev/null 2>&1 || true ;;
        esac
        sleep 0.5
    done
    say "the node did not come up (state: ${state:-none}); see $LOG_DIR"
    return 1
}

start() {
    need_root
    if ! installed; then say "slurm is not installed: run '$0 install' (apt-get install -y slurm-wlm munge)"; exit 2; fi
    mkdir -p "$RUN_DIR" "$LOG_DIR" /var/spool/slurmctld /var/spool/slurmd
    render
    start_munge
    alive "$CTLD_PID" || slurmctld
    alive "$SLURMD_PID" || slurmd
    wait_for_node
    say "up: $(sinfo --noheader --format '%P %D node(s) %c CPUs %m MB %G %T')"
}

stop_daemon() {  # pid file, name
    if ! alive "$1"; then rm -f "$1"; return; fi
    local pid
    pid="$(cat "$1")"
    kill "$pid"
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid"; fi
    rm -f "$1"
    say "stopped $2 (pid $pid)"
}

stop() {
    need_root
    stop_daemon "$SLURMD_PID" slurmd
    stop_daemon "$CTLD_PID" slurmctld
    stop_daemon "$MUNGE_PID" munged
    # Jobs' cgroup folders outlive the daemons; remove the empty ones (deepest first).
    find /sys/fs/cgroup/*/slurm -depth -type d -exec rmdir {} \; 2>/dev/null || true
}

running() { alive "$CTLD_PID" && alive "$SLURMD_PID"; }

status() {
    for entry in "$MUNGE_PID:munged" "$CTLD_PID:slurmctld" "$SLURMD_PID:slurmd"; do
        if alive "${entry%%:*}"; then echo "${entry#*:}: running (pid $(cat "${entry%%:*}"))"; else echo "${entry#*:}: stopped"; fi
    done
    if alive "$CTLD_PID"; then sinfo; fi
}

case "${1:-}" in
    install) install ;;
    start) start ;;
    stop) stop ;;
    status) status ;;
    running) running ;;  # exit status only: 0 when the cluster's daemons run
    *) echo "usage: $0 install|start|stop|status|running"; exit 2 ;;
esac
