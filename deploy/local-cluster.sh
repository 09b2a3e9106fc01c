#!/usr/bin/env bash
# A three-broker kbroker cluster on this machine, to try cluster mode:
# one ZooKeeper on 127.0.0.1:2181 and brokers 1, 2, 3 on 127.0.0.1:9092-9094,
# their data, logs and pids in ./local-cluster (ZooKeeper chroot /kbroker).
#   deploy/local-cluster.sh          sets up (ZooKeeper from Debian's package) and starts it
#   deploy/local-cluster.sh start --secure
#                                    the same, secured: clients on 127.0.0.1:9092-9094 and
#                                    the brokers between themselves (127.0.0.1:9192-9194)
#                                    over SASL_SSL, certificates made with openssl in
#                                    ./local-cluster/tls; the brokers and user admin with
#                                    PLAIN, user app with SCRAM-SHA-512 (made through the
#                                    admin API once the brokers run); prints the client
#                                    settings
#   deploy/local-cluster.sh stop     stops the brokers (SIGTERM: a clean shutdown), then ZooKeeper
#   deploy/local-cluster.sh status   which processes run, and the cluster as broker 1 sees it
# Extra arguments after "start" (and --secure) go to every `kbroker serve`
# (e.g. --set num.partitions=3). A secured cluster keeps its data apart (secure-broker-N,
# chroot /kbroker-secure): the two kinds cannot run at once.
set -euo pipefail
cd "$(dirname "$0")/.."
action="${1:-start}"
[ $# -gt 0 ] && shift
secure=0
if [ "$action" = "start" ] && [ "${1:-}" = "--secure" ]; then secure=1; shift; fi
dir="$PWD/local-cluster"
tls="$dir/tls"
zk_port="${ZK_PORT:-2181}"
zk_jar=/usr/share/java/zookeeper.jar

say() { printf '\033[1m[local-cluster]\033[0m %s\n' "$*" >&2; }
running() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
any_broker_runs() { for id in 1 2 3; do running "$dir/broker-$id.pid" && return 0; done; return 1; }

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

# -- the secured cluster's files ------------------------------------------------------------
# tls/ca.pem (the truststore), tls/broker-keystore.pem (every broker's key, encrypted with
# PKCS#12's 3DES scheme so that Java clients and Kafka read it too, and its certificate for
# 127.0.0.1 and localhost), tls/secrets (the key's and users' passwords), and each user's
# client settings: tls/<user>.properties (Kafka's: Java clients, Kafka's tools and kbroker's
# --command-config) and tls/<user>-librdkafka.properties (confluent-kafka, kcat -F) for admin
# (PLAIN, a super user's name) and app (SCRAM-SHA-512). Made once; mode 0600, folder 0700.
PLAIN_MODULE=org.apache.kafka.common.security.plain.PlainLoginModule

make_tls() {
    grep -q '^app_password=' "$tls/secrets" 2>/dev/null && return 0
    command -v openssl >/dev/null 2>&1 || { echo "local-cluster: --secure needs openssl" >&2; exit 1; }
    say "making a CA and the brokers' certificate in $tls"
    rm -rf "$tls"
    mkdir -p "$tls"
    chmod 700 "$tls"
    (
        cd "$tls"
        umask 077
        local key_password broker_password admin_password app_password
        key_password="$(openssl rand -hex 16)"
        broker_password="$(openssl rand -hex 16)"
        admin_password="$(openssl rand -hex 16)"
        app_password="$(openssl rand -hex 16)"
        openssl req -x509 -newkey rsa:2048 -nodes -days 365 -subj "/CN=kbroker local-cluster CA" \
            -keyout ca.key -out ca.pem 2>/dev/null
        openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost/O=kbroker local-cluster" \
            -keyout broker.rsa -out broker.csr 2>/dev/null
        printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' > broker.ext
        openssl x509 -req -in broker.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 365 \
            -extfile broker.ext -out broker.pem 2>/dev/null
        openssl pkcs8 -topk8 -in broker.rsa -v1 PBE-SHA1-3DES -passout "pass:$key_password" \
            -out broker.key
        cat broker.key broker.pem > broker-keystore.pem
        rm -f broker.rsa broker.csr broker.ext ca.srl
        {
            echo "key_password=$key_password"
            echo "broker_password=$broker_password"
            echo "admin_password=$admin_password"
            echo "app_password=$app_password"
        } > secrets
        client_files admin PLAIN "$PLAIN_MODULE" "$admin_password"
        client_files app SCRAM-SHA-512 org.apache.kafka.common.security.scram.ScramLoginModule \
            "$app_password"
    )
}

client_files() {  # user mechanism login-module password (in $tls, umask 077)
    cat > "$1.properties" <<EOF
# Kafka client settings for the local secured cluster, as user $1 ($2):
# kbroker ... --command-config $tls/$1.properties, kafka-*.sh --command-config,
# Java clients (--producer.config / --consumer.config).
security.protocol=SASL_SSL
ssl.truststore.type=PEM
ssl.truststore.location=$tls/ca.pem
sasl.mechanism=$2
sasl.jaas.config=$3 required username="$1" password="$4";
EOF
    cat > "$1-librdkafka.properties" <<EOF
# librdkafka settings as user $1 ($2): confluent-kafka, kcat -F $tls/$1-librdkafka.properties.
bootstrap.servers=127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094
security.protocol=SASL_SSL
ssl.ca.location=$tls/ca.pem
sasl.mechanism=$2
sasl.username=$1
sasl.password=$4
EOF
}

# User app's SCRAM credential, made through the admin API (as admin) once the brokers run:
# the brokers keep only its salted form, in ZooKeeper.
make_scram_user() {
    for _ in $(seq 1 30); do
        if sed -n 's/^app_password=//p' "$tls/secrets" | .venv/bin/kbroker user create app \
            --mechanism scram-sha-512 --password-file - -b 127.0.0.1:9092 \
            --command-config "$tls/admin.properties" >/dev/null 2>"$dir/user-create.err"; then
            return 0
        fi
        sleep 1
    done
    echo "local-cluster: could not create user app: $(cat "$dir/user-create.err")" >&2
    return 1
}

# One broker's settings file (0600: it holds passwords), from tls/secrets.
write_secure_properties() {  # id port
    local id="$1" port="$2" key_password broker_password admin_password
    key_password="$(sed -n 's/^key_password=//p' "$tls/secrets")"
    broker_password="$(sed -n 's/^broker_password=//p' "$tls/secrets")"
    admin_password="$(sed -n 's/^admin_password=//p' "$tls/secrets")"
    (
        umask 077
        cat > "$dir/secure-broker-$id.properties" <<EOF
# Broker $id of the local secured cluster (made by deploy/local-cluster.sh start --secure).
broker.id=$id
log.dirs=$dir/secure-broker-$id
zookeeper.connect=127.0.0.1:$zk_port/kbroker-secure
listeners=CLIENT://127.0.0.1:$port,INTERNAL://127.0.0.1:$((port + 100))
listener.security.protocol.map=CLIENT:SASL_SSL,INTERNAL:SASL_SSL
inter.broker.listener.name=INTERNAL
ssl.keystore.type=PEM
ssl.keystore.location=$tls/broker-keystore.pem
ssl.key.password=$key_password
ssl.truststore.type=PEM
ssl.truststore.location=$tls/ca.pem
# The brokers and admin authenticate with PLAIN (their passwords are here); other users with
# SCRAM-SHA-512 (only salted credentials, in ZooKeeper: kbroker user create NAME
# --mechanism scram-sha-512 --command-config tls/admin.properties). Brokers could use SCRAM
# too once their own user exists (sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512 and
# listener.name.internal.scram-sha-512.sasl.jaas.config=...ScramLoginModule required
# username="broker" password="...";), but their first start needs PLAIN to make it.
listener.name.client.sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN
listener.name.internal.sasl.enabled.mechanisms=PLAIN
sasl.mechanism.inter.broker.protocol=PLAIN
listener.name.internal.plain.sasl.jaas.config=$PLAIN_MODULE required username="broker" password="$broker_password" user_broker="$broker_password";
listener.name.client.plain.sasl.jaas.config=$PLAIN_MODULE required user_admin="$admin_password";
EOF
    )
}

case "$action" in
start)
    deploy/setup.sh cluster
    command -v java >/dev/null 2>&1 && [ -f "$zk_jar" ] || {
        echo "local-cluster: ZooKeeper (Debian's zookeeper package) and java are needed" >&2; exit 1; }
    mkdir -p "$dir/zookeeper"
    mode=plain; [ "$secure" -eq 1 ] && mode=secure
    if any_broker_runs && [ "$(cat "$dir/mode" 2>/dev/null || echo plain)" != "$mode" ]; then
        echo "local-cluster: a $(cat "$dir/mode" 2>/dev/null || echo plain) cluster runs: stop it first (deploy/local-cluster.sh stop)" >&2
        exit 1
    fi
    echo "$mode" > "$dir/mode"
    [ "$secure" -eq 1 ] && make_tls
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
        if [ "$secure" -eq 1 ]; then
            write_secure_properties "$id" "$port"
            say "starting broker $id on 127.0.0.1:$port (SASL_SSL; brokers on 127.0.0.1:$((port + 100)))"
            nohup .venv/bin/kbroker serve --config "$dir/secure-broker-$id.properties" "$@" \
                > "$dir/broker-$id.log" 2>&1 &
        else
            say "starting broker $id on 127.0.0.1:$port"
            nohup .venv/bin/kbroker serve --broker-id "$id" \
                --zookeeper "127.0.0.1:$zk_port/kbroker" --listen "127.0.0.1:$port" \
                --data-dir "$dir/broker-$id" "$@" > "$dir/broker-$id.log" 2>&1 &
        fi
        echo $! > "$dir/broker-$id.pid"
    done
    for id in 1 2 3; do
        wait_port 127.0.0.1 $((9091 + id)) 60 || {
            echo "local-cluster: broker $id did not start; see $dir/broker-$id.log" >&2; exit 1; }
    done
    if [ "$secure" -eq 1 ]; then
        make_scram_user
        say "running, secured: bootstrap servers 127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094 (SASL_SSL)"
        say "client settings, as user app (SCRAM-SHA-512) or admin (PLAIN):"
        say "  Kafka's (Java clients, Kafka's tools, kbroker --command-config): $tls/app.properties, $tls/admin.properties"
        say "  librdkafka's (confluent-kafka, kcat -F): $tls/app-librdkafka.properties, $tls/admin-librdkafka.properties"
        say "  that is: security.protocol=SASL_SSL ssl.ca.location=$tls/ca.pem sasl.mechanism=SCRAM-SHA-512 sasl.username=app (its password is in those files)"
        say "try: .venv/bin/kbroker cluster brokers -b 127.0.0.1:9092 --command-config $tls/app.properties"
    else
        say "running: bootstrap servers 127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094"
    fi
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
    client=()
    if [ "$(cat "$dir/mode" 2>/dev/null || echo plain)" = secure ]; then
        say "secured (SASL_SSL): $tls/app.properties"
        client=(--command-config "$tls/app.properties")
    fi
    .venv/bin/kbroker cluster brokers -b 127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094 \
        "${client[@]}" || true
    ;;
*)
    echo "usage: deploy/local-cluster.sh [start [--secure] [kbroker serve options] | stop | status]" >&2
    exit 2
    ;;
esac
