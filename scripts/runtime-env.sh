#!/usr/bin/env bash
# Sourced by scripts/test-runtime.sh and scripts/bench-runtime.sh: the runtime set-up both share.
# Installs what is missing (apt-get), builds the hostpath driver and `kcsi`, and brings up, in a
# fresh dir $D, the real hostpath driver, `kcsi volume-plugin` ($NAME on $SOCK), a private
# dockerd 20.10 (live-restore, its own data root, exec root and socket) and a private Podman
# config (runc), each with the busybox-static image $IMG imported; dockerd finds the plugin
# through the spec file $SPEC. An EXIT trap removes all of it: containers, daemons, mounts,
# the spec file and what the daemons made outside $D.
[ "$(id -u)" = 0 ] || { echo "it runs containers and mounts volumes: run as root" >&2; exit 2; }

installed() { dpkg-query -W -f '${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
missing=()
for pkg in podman docker.io runc busybox-static; do installed "$pkg" || missing+=("$pkg"); done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "--- installing ${missing[*]} (apt-get)"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"; } \
    >/dev/null || { echo "cannot install ${missing[*]}" >&2; exit 1; }
fi
scripts/peers/path.sh hostpath >/dev/null 2>&1 || scripts/peers/build.sh hostpath || exit 1
HOSTPATH=$(scripts/peers/path.sh hostpath)
cargo build --quiet --release -p kcsi-cli --bin kcsi || exit 1
KCSI=$PWD/target/release/kcsi
# Debian's client, the one matching its dockerd (another docker client may come first in PATH).
DOCKER=/usr/bin/docker DOCKERD=/usr/sbin/dockerd

D=$(mktemp -d /tmp/kcsi-rt-XXXXXX)
SOCK=$D/kcsi.sock CSI=$D/csi.sock ROOT=$D/root STATE=$D/state DSOCK=$D/docker.sock
# The plugin's name for both runtimes, unique to this run: its spec file is machine-wide.
NAME=kcsi-rt-${D##*-}
SPEC=/etc/docker/plugins/$NAME.spec
IMG=kcsi-busybox
export DOCKER_HOST=unix://$DSOCK DOCKER_CONFIG=$D/docker-client
export CONTAINERS_CONF=$D/containers.conf CONTAINERS_STORAGE_CONF=$D/storage.conf
# What dockerd, Podman and runc make outside their roots, removed at the end if this run made
# it: directories (Podman's blob cache, run dirs), the spec file's, and cgroups.
made_dirs=() made_cgroups=()
for p in /run/docker /run/containers /var/lib/containers /etc/docker/plugins; do
  [ -e "$p" ] || made_dirs+=("$p")
done
for p in /sys/fs/cgroup/ /sys/fs/cgroup/*/; do
  for n in docker libpod_parent; do [ -e "$p$n" ] || made_cgroups+=("$p$n"); done
done
PLUGIN='' DRIVER='' DOCKERD_PID='' PODMAN_SERVICE=''

stop_plugin() {
  [ -n "$PLUGIN" ] || return 0
  kill -"${1:-TERM}" "$PLUGIN" 2>/dev/null; wait "$PLUGIN" 2>/dev/null; PLUGIN=''
}
stop_dockerd() {
  [ -n "$DOCKERD_PID" ] || return 0
  kill "$DOCKERD_PID" 2>/dev/null; wait "$DOCKERD_PID" 2>/dev/null; DOCKERD_PID=''
}
# Podman's API service (`podman system service`) on a private socket, for the clients that
# use it (podman --url); containers outlive it, as they outlive dockerd with live-restore.
PSOCK=$D/podman.sock
start_podman_service() {
  podman system service --time=0 "unix://$PSOCK" >>"$D/podman-service.log" 2>&1 &
  PODMAN_SERVICE=$!
  for _ in $(seq 200); do
    podman --url "unix://$PSOCK" version >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  echo "podman system service did not come up:"; tail -20 "$D/podman-service.log"; exit 1
}
stop_podman_service() {
  [ -n "$PODMAN_SERVICE" ] || return 0
  kill "$PODMAN_SERVICE" 2>/dev/null; wait "$PODMAN_SERVICE" 2>/dev/null; PODMAN_SERVICE=''
}
cleanup() {
  exec 3>&-
  [ -n "$DOCKERD_PID" ] && $DOCKER ps -aq | xargs -r $DOCKER rm -f >/dev/null 2>&1
  podman rm -f -a -t 0 >/dev/null 2>&1
  stop_dockerd
  stop_podman_service
  # What dockerd's containerd still runs on this run's sockets (after a dockerd that died), and
  # the conmon of an exec session Podman's API service started (it outlives the container).
  for f in $(grep -lsF -e "$D/dexec/" -e "$D/podman/" /proc/[0-9]*/cmdline); do
    f=${f#/proc/}; kill -9 "${f%/cmdline}" 2>/dev/null
  done
  stop_plugin
  [ -n "$DRIVER" ] && { kill "$DRIVER" 2>/dev/null; wait "$DRIVER" 2>/dev/null; }
  rm -f "$SPEC"
  findmnt -rn -o TARGET | grep "^$D/" | sort -r | xargs -r -n1 umount -l
  rm -rf "${made_dirs[@]}"
  for c in "${made_cgroups[@]}"; do
    [ -d "$c" ] && find "$c" -depth -type d -exec rmdir {} + 2>/dev/null
  done
  rm -rf "$D"
}
trap cleanup EXIT

# One call of the plugin's protocol, as a runtime makes it.
api() { curl -sS --fail-with-body --unix-socket "$SOCK" -X POST -d "$2" "http://plugin$1"; }
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

# HOSTPATH_FLAGS: the caller's extra driver flags (e.g. -enable-attach).
# shellcheck disable=SC2086
"$HOSTPATH" --endpoint="unix://$CSI" --nodeid=kcsi-node --statedir="$STATE" -v=5 ${HOSTPATH_FLAGS:-} \
  >"$D/driver.log" 2>&1 &
DRIVER=$!
for _ in $(seq 200); do [ -S "$CSI" ] && break; sleep 0.05; done

start_plugin() {
  "$KCSI" volume-plugin --endpoint "unix://$CSI" --name "$NAME" --root "$ROOT" --listen "$SOCK" \
    2>>"$D/plugin.log" &
  PLUGIN=$!
  for _ in $(seq 200); do
    api /Plugin.Activate '{}' >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  echo "the plugin did not come up:"; cat "$D/plugin.log"; exit 1
}
# The trust key dockerd 20.10 would write to /etc/docker/key.json goes to the run's dir.
echo "{\"deprecated-key-path\": \"$D/docker-key.json\"}" >"$D/daemon.json"
start_dockerd() {
  "$DOCKERD" --config-file "$D/daemon.json" --data-root "$D/docker" --exec-root "$D/dexec" \
    --pidfile "$D/docker.pid" -H "unix://$DSOCK" \
    --storage-driver vfs --iptables=false --ip6tables=false --bridge=none --live-restore \
    >>"$D/dockerd.log" 2>&1 &
  DOCKERD_PID=$!
  for _ in $(seq 300); do
    $DOCKER version >/dev/null 2>&1 && return 0
    kill -0 "$DOCKERD_PID" 2>/dev/null || break
    sleep 0.1
  done
  echo "dockerd did not come up:"; tail -20 "$D/dockerd.log"; exit 1
}

# This machine's root may not raise rlimits (no CAP_SYS_RESOURCE), which Podman does by default;
# crun fails on its cgroup layout, runc does not.
# No static_dir: Podman 4.3 does not hand it to the `container cleanup` conmon runs when a
# container exits, so that process looked for the container in the default database, failed,
# and every `podman run` waited out its 20 s conmon timeout. The default (under graphroot) is
# private all the same.
cat >"$D/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
netns = "none"

[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "$D/podman/events.log"
lock_type = "file"
runtime = "runc"
tmp_dir = "$D/podman/tmp"
volume_path = "$D/podman/volumes"

[network]
network_config_dir = "$D/podman/networks"

[engine.volume_plugins]
$NAME = "$SOCK"
EOF
cat >"$D/storage.conf" <<EOF
[storage]
driver = "vfs"
graphroot = "$D/podman/storage"
runroot = "$D/podman/run"
EOF

# Podman reads the docker client's config too: both get an empty one.
mkdir -p "$DOCKER_CONFIG" && echo '{}' >"$DOCKER_CONFIG/config.json"
start_plugin
mkdir -p /etc/docker/plugins && echo "unix://$SOCK" >"$SPEC"
start_dockerd
mkdir -p "$D/image/bin"
cp /bin/busybox "$D/image/bin/"
for a in sh cat sleep true; do ln -s busybox "$D/image/bin/$a"; done
tar -C "$D/image" -cf "$D/busybox.tar" .
$DOCKER import "$D/busybox.tar" $IMG >/dev/null || exit 1
podman import "$D/busybox.tar" $IMG >/dev/null 2>&1 || exit 1
echo "--- $($DOCKERD --version), $(podman --version), $(runc --version | head -1), hostpath $("$HOSTPATH" --version 2>&1 | head -1)"
