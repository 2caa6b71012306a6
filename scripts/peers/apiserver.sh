#!/usr/bin/env bash
# Usage:
#   scripts/peers/apiserver.sh start DIR            etcd + kube-apiserver on free 127.0.0.1 ports
#   scripts/peers/apiserver.sh stop DIR             stop both (idempotent)
#   scripts/peers/apiserver.sh stop-apiserver DIR   stop only kube-apiserver (etcd and ports kept)
#   scripts/peers/apiserver.sh start-apiserver DIR  start kube-apiserver again on the same port
#   scripts/peers/apiserver.sh status DIR           exit 0 if kube-apiserver answers /readyz
#
# A real kube-apiserver on a real etcd, envtest style, everything under DIR:
#   DIR/etcd-data, DIR/certs (apiserver's self-signed serving cert), DIR/sa.key, DIR/tokens.csv,
#   DIR/token (admin bearer token, group system:masters), DIR/kubeconfig, DIR/env
#   (PORT, ETCD_PORT, ETCD_PEER_PORT, KUBECONFIG, APISERVER_URL, TOKEN_FILE; shell-sourceable),
#   DIR/etcd.pid, DIR/apiserver.pid, DIR/etcd.log, DIR/apiserver.log.
# Processes run in their own session (setsid) with output to the logs, so they outlive this
# script; the caller stops them with `stop`. Nothing binds anything but 127.0.0.1.
# Env: KCSI_APISERVER_TIMEOUT (readiness timeout, default 90 s); ETCD / KUBE_APISERVER override
# the binaries (default: the ones scripts/peers/build.sh cached); KCSI_APISERVER_AUDIT=1 at
# `start` writes every request's metadata (verb, resource, userAgent; no bodies) to
# DIR/audit.log, kept across start-apiserver (DIR/audit-policy.yaml marks it on).
# KCSI_APISERVER_USERS="NAME[=GROUP,GROUP...] ..." at `start` adds users with no rights of their
# own (bind them RBAC roles as a test needs): each gets a bearer token and a kubeconfig,
# DIR/users/NAME.kubeconfig. KCSI_APISERVER_NODE_AUTHZ=1 at `start` authorizes as a real cluster
# does, --authorization-mode=Node,RBAC with the NodeRestriction admission plugin (a user
# system:node:<node> in group system:nodes is that node's kubelet); DIR/node-authz marks it on.
# KCSI_APISERVER_NODE_CERTS="NODE ..." at `start` gives each node a kubelet client certificate
# (CN system:node:NODE, O system:nodes) from a client CA the apiserver trusts
# (DIR/client-ca.crt): DIR/users/system:node:NODE.{crt,key,kubeconfig}.
#   scripts/peers/apiserver.sh sa-token DIR NAMESPACE NAME   creates the service account if
#     missing and prints a token for it (TokenRequest, 24 h), e.g. kube-system
#     attachdetach-controller, whom the bootstrap RBAC roles bind.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

usage() { sed -n '2,7s/^# \{0,1\}//p;28,30s/^# \{0,1\}//p' "$0" >&2; exit 2; }
if [ "${1:-}" = sa-token ]; then [ $# -eq 4 ] || usage; else [ $# -eq 2 ] || usage; fi
cmd=$1
mkdir -p "$2"
DIR=$(cd "$2" && pwd)
TIMEOUT=${KCSI_APISERVER_TIMEOUT:-90}

# A fresh machine may lack these Debian packages: install on demand rather than by hand.
need() {
  local cmd=$1 pkg=$2
  command -v "$cmd" >/dev/null 2>&1 && return 0
  echo "apiserver.sh: installing $pkg for $cmd" >&2
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$pkg" >/dev/null; then
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$pkg" >/dev/null
  fi
}

peer_bin() {  # peer_bin OVERRIDE NAME
  if [ -n "$1" ]; then printf '%s\n' "$1"; return; fi
  "$HERE/path.sh" "$2" || { echo "apiserver.sh: build it first: scripts/peers/build.sh etcd apiserver" >&2; return 1; }
}

# alive PIDFILE NAME: the pid file names a live (non-zombie) process running NAME. Checking the
# command line guards against killing an unrelated process that reused a stale pid.
alive() {
  local pid state
  [ -f "$1" ] || return 1
  pid=$(cat "$1"); [ -n "$pid" ] || return 1
  [ -r "/proc/$pid/stat" ] || return 1
  # The process may exit between these reads: any failure means "not alive".
  state=$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1) || return 1
  [ -n "$state" ] && [ "$state" != Z ] || return 1
  { tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null | grep -q -- "$2"
}

# stop_proc PIDFILE NAME: TERM, wait up to 30 s, then KILL; wait until it is gone.
stop_proc() {
  local pidfile=$1 name=$2 pid i
  if alive "$pidfile" "$name"; then
    pid=$(cat "$pidfile")
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 300; i++)); do alive "$pidfile" "$name" || break; sleep 0.1; done
    if alive "$pidfile" "$name"; then
      echo "apiserver.sh: $name (pid $pid) ignored SIGTERM for 30 s, killing" >&2
      kill -KILL "$pid" 2>/dev/null || true
      for ((i = 0; i < 100; i++)); do alive "$pidfile" "$name" || break; sleep 0.1; done
    fi
    wait "$pid" 2>/dev/null || true   # reap it if it is our own child (failed start)
    echo "stopped $name (pid $pid)"
  fi
  rm -f "$pidfile"
}

# Free loopback port below the kernel's ephemeral range (32768+), so outgoing connections
# cannot grab it between our check and the server's bind. A connect that succeeds = taken.
PICKED=" "
free_port() {
  local p i
  for ((i = 0; i < 200; i++)); do
    p=$((20000 + RANDOM % 12000))
    [[ $PICKED == *" $p "* ]] && continue
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then PICKED+="$p "; echo "$p"; return 0; fi
  done
  echo "apiserver.sh: no free port found" >&2; return 1
}

# spawn PIDFILE LOG CMD...: run CMD in its own session, detached from our stdio, appending to
# LOG; the pid file gets the real server pid (bash writes $$ and then execs the server).
spawn() {
  local pidfile=$1 log=$2; shift 2
  setsid bash -c 'echo $$ >"$0"; exec "$@"' "$pidfile" "$@" </dev/null >>"$log" 2>&1 &
  local i
  for ((i = 0; i < 50; i++)); do [ -s "$pidfile" ] && return 0; sleep 0.1; done
  echo "apiserver.sh: $1 did not start" >&2; return 1
}

load_env() {
  [ -f "$DIR/env" ] || { echo "apiserver.sh: $DIR/env missing: run '$0 start $DIR' first" >&2; exit 1; }
  # shellcheck disable=SC1091
  source "$DIR/env"
}

readyz() {  # answers "ok" when the apiserver (PORT, token) is ready
  [ "$(curl -sk --max-time 2 -H "Authorization: Bearer $(cat "$DIR/token")" \
        "https://127.0.0.1:$PORT/readyz" 2>/dev/null)" = ok ]
}

start_etcd() {
  local etcd t0 i
  etcd=$(peer_bin "${ETCD:-}" etcd)
  mkdir -p "$DIR/etcd-data"
  t0=$(date +%s)
  # Explicit peer/advertise URLs: etcd's defaults name localhost:2380, which may be taken.
  spawn "$DIR/etcd.pid" "$DIR/etcd.log" "$etcd" \
    --name=kcsi --data-dir="$DIR/etcd-data" \
    --listen-client-urls="http://127.0.0.1:$ETCD_PORT" \
    --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster="kcsi=http://127.0.0.1:$ETCD_PEER_PORT" \
    --unsafe-no-fsync=true --log-level=warn
  for ((i = 0; i < 300; i++)); do
    if curl -s --max-time 1 "http://127.0.0.1:$ETCD_PORT/health" 2>/dev/null | grep -q '"health":"true"'; then
      echo "etcd ready on 127.0.0.1:$ETCD_PORT after $(( $(date +%s) - t0 ))s (pid $(cat "$DIR/etcd.pid"))"
      return 0
    fi
    alive "$DIR/etcd.pid" etcd || break
    sleep 0.1
  done
  echo "apiserver.sh: etcd did not become healthy; last lines of $DIR/etcd.log:" >&2
  tail -n 20 "$DIR/etcd.log" >&2
  return 1
}

start_apiserver() {
  local apiserver t0 audit=()
  apiserver=$(peer_bin "${KUBE_APISERVER:-}" kube-apiserver)
  # Blocking mode: an event is written before the request returns, so none is lost at a stop.
  [ -f "$DIR/audit-policy.yaml" ] && audit=(--audit-policy-file="$DIR/audit-policy.yaml"
    --audit-log-path="$DIR/audit.log" --audit-log-mode=blocking --audit-log-format=json)
  local authz=(--authorization-mode=RBAC --disable-admission-plugins=ServiceAccount) ca=()
  [ -f "$DIR/client-ca.crt" ] && ca=(--client-ca-file="$DIR/client-ca.crt")
  [ -f "$DIR/node-authz" ] && authz=(--authorization-mode=Node,RBAC
    --enable-admission-plugins=NodeRestriction --disable-admission-plugins=ServiceAccount)
  t0=$(date +%s)
  spawn "$DIR/apiserver.pid" "$DIR/apiserver.log" "$apiserver" \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --advertise-address=127.0.0.1 --bind-address=127.0.0.1 --secure-port="$PORT" \
    --cert-dir="$DIR/certs" \
    --service-cluster-ip-range=10.0.0.0/24 \
    --service-account-issuer="https://127.0.0.1:$PORT/" \
    --service-account-key-file="$DIR/sa.key" \
    --service-account-signing-key-file="$DIR/sa.key" \
    --token-auth-file="$DIR/tokens.csv" \
    --allow-privileged=true "${authz[@]}" "${ca[@]}" "${audit[@]}"
  while :; do
    if readyz; then
      echo "kube-apiserver ready on https://127.0.0.1:$PORT after $(( $(date +%s) - t0 ))s (pid $(cat "$DIR/apiserver.pid"))"
      return 0
    fi
    if ! alive "$DIR/apiserver.pid" kube-apiserver; then
      echo "apiserver.sh: kube-apiserver exited during startup" >&2; break
    fi
    if (( $(date +%s) - t0 >= TIMEOUT )); then
      echo "apiserver.sh: kube-apiserver not ready after ${TIMEOUT}s" >&2; break
    fi
    sleep 0.25
  done
  echo "--- last lines of $DIR/apiserver.log:" >&2
  tail -n 30 "$DIR/apiserver.log" >&2
  return 1
}

write_files() {
  cat >"$DIR/env" <<EOF
PORT=$PORT
ETCD_PORT=$ETCD_PORT
ETCD_PEER_PORT=$ETCD_PEER_PORT
APISERVER_URL=https://127.0.0.1:$PORT
KUBECONFIG=$DIR/kubeconfig
TOKEN_FILE=$DIR/token
EOF
}

# The apiserver writes a self-signed serving cert (followed by its CA) to certs/apiserver.crt
# on first start and reuses it on restart, so clients can verify TLS against that file.
write_kubeconfig() {  # write_kubeconfig [FILE USER TOKEN]: the admin's by default
  local file=${1:-$DIR/kubeconfig} user=${2:-admin} token=${3-$(cat "$DIR/token")} tls
  if [ -s "$DIR/certs/apiserver.crt" ]; then
    tls="certificate-authority-data: $(base64 -w0 "$DIR/certs/apiserver.crt")"
  else
    tls="insecure-skip-tls-verify: true"
  fi
  cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: kcsi
  cluster:
    server: https://127.0.0.1:$PORT
    $tls
users:
- name: $user
  user:
    token: $token
contexts:
- name: kcsi
  context:
    cluster: kcsi
    user: $user
current-context: kcsi
EOF
  chmod 600 "$file"
}

# Users of KCSI_APISERVER_USERS: a token line each in tokens.csv (at `start`, before the
# apiserver reads it) and, once it serves, a kubeconfig each.
add_users() {
  local entry name groups token
  for entry in ${KCSI_APISERVER_USERS:-}; do
    name=${entry%%=*}; groups=; [[ $entry == *=* ]] && groups=${entry#*=}
    [[ $name =~ ^[A-Za-z0-9:._-]+$ && $groups =~ ^[A-Za-z0-9:.,_-]*$ ]] || {
      echo "apiserver.sh: bad KCSI_APISERVER_USERS entry $entry" >&2; exit 2; }
    token=$(openssl rand -hex 24)
    printf '%s,%s,%s-uid,"%s"\n' "$token" "$name" "$name" "$groups" >>"$DIR/tokens.csv"
    mkdir -p "$DIR/users"; printf '%s\n' "$token" >"$DIR/users/$name.token"
    chmod 600 "$DIR/users/$name.token"
  done
}

# Kubelet client certificates of KCSI_APISERVER_NODE_CERTS, signed by a fresh client CA.
node_certs() {
  local node user
  [ -n "${KCSI_APISERVER_NODE_CERTS:-}" ] || return 0
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=kcsi-client-ca \
    -keyout "$DIR/client-ca.key" -out "$DIR/client-ca.crt" 2>/dev/null
  mkdir -p "$DIR/users"
  for node in $KCSI_APISERVER_NODE_CERTS; do
    [[ $node =~ ^[a-z0-9.-]+$ ]] || { echo "apiserver.sh: bad node name $node" >&2; exit 2; }
    user=system:node:$node
    openssl req -newkey rsa:2048 -nodes -subj "/O=system:nodes/CN=$user" \
      -keyout "$DIR/users/$user.key" -out "$DIR/users/$user.csr" 2>/dev/null
    openssl x509 -req -in "$DIR/users/$user.csr" -CA "$DIR/client-ca.crt" -CAkey "$DIR/client-ca.key" \
      -CAcreateserial -days 2 -out "$DIR/users/$user.crt" 2>/dev/null
    rm -f "$DIR/users/$user.csr"
    chmod 600 "$DIR/users/$user.key"
  done
}

write_user_kubeconfigs() {
  local f name
  for f in "$DIR"/users/*.token; do
    [ -e "$f" ] || continue
    name=$(basename "$f" .token)
    write_kubeconfig "$DIR/users/$name.kubeconfig" "$name" "$(cat "$f")"
  done
  for f in "$DIR"/users/*.crt; do
    [ -e "$f" ] || continue
    name=$(basename "$f" .crt)
    write_kubeconfig "$DIR/users/$name.kubeconfig" "$name" ""
    sed -i "s|^    token: \$|    client-certificate: $f\n    client-key: ${f%.crt}.key|" "$DIR/users/$name.kubeconfig"
  done
}

# sa_token NAMESPACE NAME: the service account (created if missing) and a 24 h token for it.
sa_token() {
  local ns=$1 name=$2 api out
  api=(curl -sSk --max-time 10 -H "Authorization: Bearer $(cat "$DIR/token")" -H 'Content-Type: application/json')
  "${api[@]}" -o /dev/null -X POST "https://127.0.0.1:$PORT/api/v1/namespaces/$ns/serviceaccounts" \
    -d "{\"metadata\":{\"name\":\"$name\"}}"
  out=$("${api[@]}" -X POST "https://127.0.0.1:$PORT/api/v1/namespaces/$ns/serviceaccounts/$name/token" \
    -d '{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{"expirationSeconds":86400}}')
  python3 -c 'import json,sys; print(json.load(sys.stdin)["status"]["token"])' <<<"$out" ||
    { echo "apiserver.sh: no token for $ns/$name" >&2; return 1; }
}

case "$cmd" in
  start)
    need curl curl
    need openssl openssl
    if alive "$DIR/etcd.pid" etcd || alive "$DIR/apiserver.pid" kube-apiserver; then
      echo "apiserver.sh: already running in $DIR; run '$0 stop $DIR' first" >&2; exit 1
    fi
    mkdir -p "$DIR/certs"
    [ -s "$DIR/sa.key" ] || openssl genrsa -out "$DIR/sa.key" 2048 2>/dev/null
    [ -s "$DIR/token" ] || openssl rand -hex 24 >"$DIR/token"
    printf '%s,admin,admin-uid,"system:masters"\n' "$(cat "$DIR/token")" >"$DIR/tokens.csv"
    rm -rf "$DIR/users" "$DIR/node-authz" "$DIR/client-ca.crt" "$DIR/client-ca.key"
    add_users
    node_certs
    [ "${KCSI_APISERVER_NODE_AUTHZ:-}" = 1 ] && : >"$DIR/node-authz"
    chmod 600 "$DIR/sa.key" "$DIR/token" "$DIR/tokens.csv"
    rm -f "$DIR/audit-policy.yaml" "$DIR/audit.log"
    # Metadata only, one event when the response starts (a watch's start) or completes.
    [ "${KCSI_APISERVER_AUDIT:-}" = 1 ] && printf '%s\n' 'apiVersion: audit.k8s.io/v1' 'kind: Policy' \
      'omitStages: [RequestReceived]' 'rules:' '- level: Metadata' >"$DIR/audit-policy.yaml"
    t_start=$(date +%s)
    : >"$DIR/etcd.log"; : >"$DIR/apiserver.log"   # fresh logs per start (restarts append)
    ok=
    # A port can be taken between our check and the bind: retry with new ports a few times.
    for attempt in 1 2 3; do
      ETCD_PORT=$(free_port); ETCD_PEER_PORT=$(free_port); PORT=$(free_port)
      write_files
      if start_etcd; then
        if start_apiserver; then ok=1; break; fi
        grep -q 'address already in use' "$DIR/apiserver.log" || break
      else
        grep -q 'address already in use' "$DIR/etcd.log" || break
      fi
      stop_proc "$DIR/apiserver.pid" kube-apiserver
      stop_proc "$DIR/etcd.pid" etcd
      echo "apiserver.sh: port clash, retrying (attempt $attempt)" >&2
    done
    if [ -z "$ok" ]; then
      stop_proc "$DIR/apiserver.pid" kube-apiserver
      stop_proc "$DIR/etcd.pid" etcd
      exit 1
    fi
    write_kubeconfig
    write_user_kubeconfigs
    echo "started in $(( $(date +%s) - t_start ))s: KUBECONFIG=$DIR/kubeconfig (env: $DIR/env)"
    ;;
  stop)
    stop_proc "$DIR/apiserver.pid" kube-apiserver
    stop_proc "$DIR/etcd.pid" etcd
    ;;
  stop-apiserver)
    stop_proc "$DIR/apiserver.pid" kube-apiserver
    ;;
  start-apiserver)
    load_env
    if alive "$DIR/apiserver.pid" kube-apiserver; then echo "kube-apiserver already running"; exit 0; fi
    alive "$DIR/etcd.pid" etcd || { echo "apiserver.sh: etcd is not running in $DIR" >&2; exit 1; }
    start_apiserver || { stop_proc "$DIR/apiserver.pid" kube-apiserver; exit 1; }
    ;;
  status)
    load_env
    readyz
    ;;
  sa-token)
    load_env
    [[ $3 =~ ^[a-z0-9.-]+$ && $4 =~ ^[a-z0-9.-]+$ ]] || { echo "apiserver.sh: bad service account $3/$4" >&2; exit 2; }
    sa_token "$3" "$4"
    ;;
  *) usage ;;
esac
