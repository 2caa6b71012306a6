#!/usr/bin/env bash
# Runtime suite: `kcsi volume-plugin` as the real Podman uses it (Debian's podman, installed
# with apt-get when missing), in front of the real csi-driver-host-path. Podman runs on a
# private containers.conf, storage root and runroot under a temp dir, so the machine's own
# config and storage are never read or touched. Containers cannot run in this sandbox (crun
# may not set rlimits), so `podman volume mount` is the mount path, as it is for a container.
# Every driver call is asserted from the driver's own log; nothing is left behind.
set -uo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "the runtime suite mounts volumes: run as root" >&2; exit 2; }

if ! command -v podman >/dev/null; then
  echo "--- installing podman (apt-get)"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman; } \
    >/dev/null || { echo "cannot install podman" >&2; exit 1; }
fi
scripts/peers/path.sh hostpath >/dev/null 2>&1 || scripts/peers/build.sh hostpath || exit 1
HOSTPATH=$(scripts/peers/path.sh hostpath)
cargo build --quiet --release -p kcsi-cli --bin kcsi || exit 1
KCSI=$PWD/target/release/kcsi
echo "--- $(podman --version), hostpath $("$HOSTPATH" --version 2>&1 | head -1)"

D=$(mktemp -d /tmp/kcsi-rt-XXXXXX)
SOCK=$D/kcsi.sock CSI=$D/csi.sock ROOT=$D/root STATE=$D/state
[ -e /run/containers ] && had_run_containers=1 || had_run_containers=0
PLUGIN='' DRIVER=''

stop_plugin() {
  [ -n "$PLUGIN" ] || return 0
  kill -"${1:-TERM}" "$PLUGIN" 2>/dev/null; wait "$PLUGIN" 2>/dev/null; PLUGIN=''
}
cleanup() {
  stop_plugin
  [ -n "$DRIVER" ] && { kill "$DRIVER" 2>/dev/null; wait "$DRIVER" 2>/dev/null; }
  findmnt -rn -o TARGET | grep "^$D/" | sort -r | xargs -r -n1 umount -l
  # Podman's netavark makes /run/containers/networks even for volume commands.
  [ "$had_run_containers" = 0 ] && rmdir /run/containers/networks /run/containers 2>/dev/null
  rm -rf "$D"
}
trap cleanup EXIT

cat >"$D/containers.conf" <<EOF
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "$D/podman/events.log"
lock_type = "file"
tmp_dir = "$D/podman/tmp"
static_dir = "$D/podman/libpod"
volume_path = "$D/podman/volumes"

[network]
network_config_dir = "$D/podman/networks"

[engine.volume_plugins]
kcsi = "$SOCK"
EOF
cat >"$D/storage.conf" <<EOF
[storage]
driver = "vfs"
graphroot = "$D/podman/storage"
runroot = "$D/podman/run"
EOF
export CONTAINERS_CONF=$D/containers.conf CONTAINERS_STORAGE_CONF=$D/storage.conf

"$HOSTPATH" --endpoint="unix://$CSI" --nodeid=kcsi-node --statedir="$STATE" -v=5 \
  >"$D/driver.log" 2>&1 &
DRIVER=$!

start_plugin() {
  "$KCSI" volume-plugin --endpoint "unix://$CSI" --name kcsi --root "$ROOT" --listen "$SOCK" \
    2>>"$D/plugin.log" &
  PLUGIN=$!
  for _ in $(seq 200); do
    api /Plugin.Activate '{}' >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  echo "the plugin did not come up:"; cat "$D/plugin.log"; exit 1
}
# One call of the plugin's protocol, as the runtime makes it.
api() { curl -sS --fail-with-body --unix-socket "$SOCK" -X POST -d "$2" "http://plugin$1"; }
# How often the driver was called for a CSI method (its log has one gRPCCall line per call).
calls() { grep -c "gRPCCall: {\"Method\":\"/csi.v1.[A-Za-z]*/$1\"" "$D/driver.log"; }
handle() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["volumeHandle"])' \
  "$ROOT/volumes/$1.json"; }
mountpoint_of() { podman volume inspect --format '{{.Mountpoint}}' "$1"; }
plugin_path() { api /VolumeDriver.Path "{\"Name\": \"$1\"}" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["Mountpoint"])'; }
mounted() { findmnt -rn -o TARGET | grep -c "^$ROOT/"; }
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

failed=0
check() {
  local what=$1; shift
  if "$@"; then echo "PASS $what"; else echo "FAIL $what"; failed=$((failed + 1)); fi
}
is() { [ "$1" = "$2" ] || { echo "  got '$1', want '$2'"; return 1; }; }
differ() { [ -n "$2" ] && [ "$1" != "$2" ] || { echo "  '$1' vs '$2'"; return 1; }; }
has() { case "$1" in *"$2"*) ;; *) echo "  '$2' not in: $1"; return 1 ;; esac; }

for _ in $(seq 200); do [ -S "$CSI" ] && break; sleep 0.05; done
start_plugin

echo "--- create, mount, write, unmount, rm"
t=$(date +%s%N); out=$(podman volume create --driver kcsi -o size=1Gi data 2>&1); t_create=$(ms "$t")
check "podman volume create --driver kcsi -o size=1Gi data" is "$out" data
check "CreateVolume once, 1 GiB" is "$(calls CreateVolume)/$(grep 'gRPCCall: ' "$D/driver.log" |
  grep -c '"capacity_range":{"required_bytes":1073741824}')" 1/1
check "podman volume inspect names the kcsi driver" \
  is "$(podman volume inspect --format '{{.Driver}}' data)" kcsi
# Podman 4.3 prints an empty line for a plugin's volume; inspect shows where it is mounted.
t=$(date +%s%N); podman volume mount data >/dev/null; t_mount=$(ms "$t")
mp=$(mountpoint_of data)
check "the mountpoint is the volume's publish path" has "$mp" "$ROOT/kubelet/pods/"
check "the mountpoint is mounted" findmnt "$mp" >/dev/null
echo "hello from podman" >"$mp/hello.txt"
h=$(handle data)
check "the bytes are in the driver's volume" is "$(cat "$STATE/$h/hello.txt")" "hello from podman"
check "one NodeStage, one NodePublish" is "$(calls NodeStageVolume)/$(calls NodePublishVolume)" 1/1
check "podman's mountpoint is the plugin's Path" is "$(plugin_path data)" "$mp"
t=$(date +%s%N); podman volume unmount data >/dev/null; t_unmount=$(ms "$t")
check "unmounted: NodeUnpublish, NodeUnstage" \
  is "$(calls NodeUnpublishVolume)/$(calls NodeUnstageVolume)/$(mounted)" 1/1/0
t=$(date +%s%N); podman volume rm data >/dev/null; t_rm=$(ms "$t")
check "rm: DeleteVolume, the driver's volume and the description gone" \
  is "$(calls DeleteVolume)/$([ -e "$STATE/$h" ] && echo kept || echo gone)/$(ls "$ROOT/volumes")" 1/gone/

echo "--- two mounts of one volume: one stage, two publishes"
podman volume create --driver kcsi -o size=16Mi twice >/dev/null
podman volume mount twice >/dev/null; a=$(mountpoint_of twice)
podman volume mount twice >/dev/null
check "podman counts its own second mount (no second Mount call)" \
  is "$(podman volume inspect --format '{{.MountCount}}' twice)/$(calls NodePublishVolume)" 2/2
b=$(api /VolumeDriver.Mount '{"Name": "twice", "ID": "another-container"}' |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["Mountpoint"])')
check "a second caller gets its own publish" differ "$a" "$b"
check "one NodeStage, two NodePublish, two mounts" \
  is "$(calls NodeStageVolume)/$(calls NodePublishVolume)/$(mounted)" 2/3/2
echo shared >"$a/f"
check "both callers see the same bytes" is "$(cat "$b/f")" shared
podman volume unmount twice >/dev/null; podman volume unmount twice >/dev/null
check "podman's last unmount unpublishes its caller only" \
  is "$(calls NodeUnpublishVolume)/$(calls NodeUnstageVolume)/$(mounted)" 2/1/1
api /VolumeDriver.Unmount '{"Name": "twice", "ID": "another-container"}' >/dev/null
check "the last caller's unmount unstages" \
  is "$(calls NodeUnpublishVolume)/$(calls NodeUnstageVolume)/$(mounted)" 3/2/0
podman volume rm twice >/dev/null

echo "--- plugin SIGKILLed while mounted, restarted"
podman volume create --driver kcsi -o size=8Mi survivor >/dev/null
podman volume mount survivor >/dev/null; mp=$(mountpoint_of survivor)
echo before >"$mp/f"
stop_plugin KILL
check "the volume stays mounted while the plugin is down" findmnt "$mp" >/dev/null
t=$(date +%s%N); start_plugin; t_restart=$(ms "$t")
check "the restarted plugin found the mount on disk" \
  has "$(cat "$D/plugin.log")" "found volume survivor published for"
check "the restarted plugin's Path is podman's mountpoint" is "$(plugin_path survivor)" "$mp"
podman volume unmount survivor >/dev/null
check "unmount after the restart: NodeUnpublish, NodeUnstage, no mount" \
  is "$(calls NodeUnpublishVolume)/$(calls NodeUnstageVolume)/$(mounted)" 4/3/0
h=$(handle survivor)
podman volume rm survivor >/dev/null
check "rm after the restart deletes the volume" \
  is "$(calls DeleteVolume)/$([ -e "$STATE/$h" ] && echo kept || echo gone)" 3/gone

echo "--- bad options are refused with a clear Err"
out=$(podman volume create --driver kcsi -o size=lots bad 2>&1)
check "size=lots: podman fails with kcsi's message" has "$out" 'option size="lots" is not valid'
check "size=lots: and kcsi's class" has "$out" "kcsi InvalidArgument, class final"
out=$(podman volume create --driver kcsi -o size=1Gi -o volumeHandle=x bad 2>&1)
check "size with volumeHandle: refused" has "$out" "exclude each other"
out=$(podman volume create --driver kcsi -o block=maybe bad 2>&1)
check "block=maybe: refused" has "$out" "true or false"
check "nothing was created" is "$(calls CreateVolume)/$(ls "$ROOT/volumes")/$(podman volume ls -q)" 3//

echo "--- podman volume ls matches the plugin's list"
podman volume create --driver kcsi -o size=1Mi one >/dev/null
podman volume create --driver kcsi -o size=1Mi two >/dev/null
# A volume another runtime (Docker) made through the same socket appears after a reload.
api /VolumeDriver.Create '{"Name": "from-docker", "Opts": {"size": "1Mi"}}' >/dev/null
podman volume reload >/dev/null
plugin_list=$(api /VolumeDriver.List '' |
  python3 -c 'import json,sys; print(" ".join(sorted(v["Name"] for v in json.load(sys.stdin)["Volumes"])))')
podman_list=$(podman volume ls --filter driver=kcsi --format '{{.Name}}' | sort | xargs)
check "podman volume ls = the plugin's List" is "$podman_list" "$plugin_list"
check "three volumes" is "$plugin_list" "from-docker one two"
for v in one two from-docker; do podman volume rm "$v" >/dev/null; done
check "all removed" is "$(ls "$ROOT/volumes")/$(calls DeleteVolume)/$(podman volume ls -q)" /6/

stop_plugin
check "the plugin removed its socket on SIGTERM" [ ! -e "$SOCK" ]
check "no mount left" is "$(mounted)" 0
echo "--- figures (ms, through podman): create $t_create, mount $t_mount, unmount $t_unmount, rm $t_rm; plugin restart to serving $t_restart"
echo "runtime: $([ "$failed" = 0 ] && echo ok || echo "FAILED: $failed check(s)")"
[ "$failed" = 0 ]
