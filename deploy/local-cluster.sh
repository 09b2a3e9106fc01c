#!/usr/bin/env bash
# A three-broker kbroker cluster on this machine, to try cluster mode:
# one ZooKeeper on 127.0.0.1:2181 and brokers 1, 2, 3 on 127.0.0.1:9092-9094,
# their data, logs and pids in ./local-cluster (ZooKeeper chroot /kbroker).
#   deploy/local-cluster.sh          sets up (ZooKeeper from Debian's package) and starts it
#   deploy/local-cluster.sh stop     stops the brokers (SIGTERM: a clean shutdown), then ZooKeeper
#   deploy/local-cluster.sh status   which processes run, and the cluster as broker 1 sees it
# Extra arguments after "start" go to every `kbroker serve` (e.g. --set num.partitions=3).
set -euo pipefail
cd "$(dirname "$0")/.."
action="${1:-start}"
[ $# -gt 0 ] && shift
dir="$PWD/local-cluster"
zk_port="${ZK_PORT:-2181}"
zk_jar=/usr/share/java/zookeeper.jar

say() { printf '\033[1m[local-cluster]\033[0m %s\n' "$*" >&2; }
running() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

wait_port() {  # host port seconds
    for _ in $(seq 1 $(( $3 * 10 ))); do
        (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}

stop_pid() {  # pidfile what
    if running "$1"; then
        local pid; pid="$(cat "$1")"
        say "stopping $2 (pid $pid)"
        kill -TERM "$pid"
        for _ in $(seq 1 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$pid" 2>/dev/null && { say "$2 did not stop in 60 s: killing it"; kill -KILL "$pid"; }
    fi
    rm -f "$1"
}

case "$action" in
start)
    deploy/setup.sh cluster
    command -v java >/dev/null 2>&1 && [ -f "$zk_jar" ] || {
        echo "local-cluster: ZooKeeper (Debian's zookeeper package) and java are needed" >&2; exit 1; }
    mkdir -p "$dir/zookeeper"
    if ! running "$dir/zookeeper.pid"; then
        cat > "$dir/zookeeper/zoo.cfg" <<EOF
tickTime=2000
dataDir=$dir/zookeeper/data
clientPort=$zk_port
clientPortAddress=127.0.0.1
admin.enableServer=false
EOF
        say "starting ZooKeeper on 127.0.0.1:$zk_port"
        nohup java -Xmx256m -cp "/etc/zookeeper/conf_example:$zk_jar" \
            org.apache.zookeeper.server.ZooKeeperServerMain "$dir/zookeeper/zoo.cfg" \
            > "$dir/zookeeper/zookeeper.log" 2>&1 &
        echo $! > "$dir/zookeeper.pid"
        wait_port 127.0.0.1 "$zk_port" 30 || {
            echo "local-cluster: ZooKeeper did not start; see $dir/zookeeper/zookeeper.log" >&2; exit 1; }
    fi
    for id in 1 2 3; do
        port=$((9091 + id))
        if running "$dir/broker-$id.pid"; then
            say "broker $id already runs"
            continue
        fi
        say "starting broker $id on 127.0.0.1:$port"
        nohup .venv/bin/kbroker serve --broker-id "$id" \
            --zookeeper "127.0.0.1:$zk_port/kbroker" --listen "127.0.0.1:$port" \
            --data-dir "$dir/broker-$id" "$@" > "$dir/broker-$id.log" 2>&1 &
        echo $! > "$dir/broker-$id.pid"
    done
    for id in 1 2 3; do
        wait_port 127.0.0.1 $((9091 + id)) 60 || {
            echo "local-cluster: broker $id did not start; see $dir/broker-$id.log" >&2; exit 1; }
    done
    say "running: bootstrap servers 127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094"
    say "stop with: deploy/local-cluster.sh stop"
    ;;
stop)
    for id in 1 2 3; do stop_pid "$dir/broker-$id.pid" "broker $id"; done
    stop_pid "$dir/zookeeper.pid" ZooKeeper
    ;;
status)
    running "$dir/zookeeper.pid" && say "ZooKeeper: pid $(cat "$dir/zookeeper.pid")" || say "ZooKeeper: stopped"
    for id in 1 2 3; do
        running "$dir/broker-$id.pid" && say "broker $id: pid $(cat "$dir/broker-$id.pid")" \
            || say "broker $id: stopped"
    done
    .venv/bin/kbroker cluster brokers -b 127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094 || true
    ;;
*)
    echo "usage: deploy/local-cluster.sh [start [kbroker serve options] | stop | status]" >&2
    exit 2
    ;;
esac
