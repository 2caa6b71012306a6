#!/usr/bin/env bash
# Runtime suite: real containers on `kcsi volume-plugin` volumes, run by Debian's dockerd and by
# Podman (both with runc), in front of the real csi-driver-host-path. dockerd runs on a private
# data root, exec root and socket, Podman on a private containers.conf and storage, so the
# machine's own daemons, config and storage are never read or touched; dockerd finds the plugin
# through a spec file in /etc/docker/plugins, removed at the end. The image is a tar of
# busybox-static, imported (no registry). Every NodeStage/NodePublish and its undoing is
# asserted from the driver's own log and state, and the mount table; nothing is left behind.
# The driver needs attaching (-enable-attach): every first NodeStage follows a
# ControllerPublishVolume, every last NodeUnstage is followed by ControllerUnpublishVolume.
set -uo pipefail
cd "$(dirname "$0")/.."
HOSTPATH_FLAGS=-enable-attach
# shellcheck source=runtime-env.sh
source scripts/runtime-env.sh

# The driver's own record: its log has one gRPCCall line per call (request, response, error),
# its state.json each volume's staging and publish paths. A call line it cannot read fails.
cat >"$D/driver.py" <<'EOF'
import json, sys
log, state, prefix, what, *args = sys.argv[1:]

def calls():
    for n, line in enumerate(open(log, errors="replace"), 1):
        _, sep, record = line.partition("gRPCCall: ")
        if sep:
            try:
                yield json.loads(record)
            except ValueError as e:
                sys.exit(f"{log}:{n}: not a gRPCCall record ({e}): {line!r}")

def ok(method):
    return [c for c in calls() if c["Method"].endswith("/" + method) and not c["Error"]]

def handles(name):  # the ids CreateVolume gave the plugin's volume NAME
    return {c["Response"]["volume"]["volume_id"] for c in ok("CreateVolume")
            if c["Request"]["name"] == prefix + name}

def of(name, method):  # successful calls of METHOD on volume NAME
    ids = handles(name)
    return [c["Request"] for c in ok(method)
            if c["Request"].get("volume_id") in ids or c["Request"].get("name") == prefix + name]

def volumes():
    with open(state) as f:
        return json.load(f).get("Volumes") or []

if what == "handle":  # NAME
    print(*sorted(handles(args[0])))
elif what == "node":  # NAME: NodeStage/NodePublish/NodeUnpublish/NodeUnstage calls
    print("/".join(str(len(of(args[0], m))) for m in (
        "NodeStageVolume", "NodePublishVolume", "NodeUnpublishVolume", "NodeUnstageVolume")))
elif what == "count":  # METHOD
    print(len(ok(args[0])))
elif what == "field":  # METHOD NAME KEY...: a field of the last request on NAME
    r = of(args[1], args[0])[-1]
    for k in args[2:]:
        r = r[k]
    print(r)
elif what in ("Published", "Staged"):  # name:paths of each volume with any, sorted
    print(" ".join(sorted(f'{v["VolName"].removeprefix(prefix)}:{len(v[what])}'
                          for v in volumes() if v.get(what))))
elif what == "paths":  # every publish path
    print("\n".join(sorted(p for v in volumes() for p in v.get("Published") or [])))
elif what == "order":  # NAME: the methods of the successful calls on volume NAME, in order
    ids = handles(args[0])
    print(*[c["Method"].rsplit("/", 1)[1] for c in calls()
            if not c["Error"] and c["Request"].get("volume_id") in ids])
elif what == "failed":  # calls that failed
    for c in calls():
        if c["Error"]:
            print(c["Method"], c["Error"])
EOF
drv() { python3 "$D/driver.py" "$D/driver.log" "$STATE/state.json" "$NAME-" "$@"; }
mounted() { findmnt -rn -o TARGET | grep "^$ROOT/" | sort; }

failed=0
check() {
  local what=$1; shift
  if "$@"; then echo "PASS $what"; else echo "FAIL $what"; failed=$((failed + 1)); fi
}
is() { [ "$1" = "$2" ] || { echo "  got '$1', want '$2'"; return 1; }; }
has() { case "$1" in *"$2"*) ;; *) echo "  '$2' not in: $1"; return 1 ;; esac; }
# Exactly these volumes are in use (name:publishes, as the driver records them), and the
# mount table holds exactly the driver's publish paths below the plugin's root.
in_use() { is "$(drv Published)" "$1" && is "$(mounted)" "$(drv paths)"; }
# NodeStage/NodePublish/NodeUnpublish/NodeUnstage calls on volume $1 are $2, and in_use $3.
node() { is "$(drv node "$1")" "$2" && in_use "$3"; }

# A container that runs until stopped, and stops at once.
LONG='trap "exit 0" TERM; sleep 1000 & wait'

echo "--- docker run -v, the volume created on first use with --volume-driver"
t=$(date +%s%N)
out=$($DOCKER run --rm --network none --volume-driver "$NAME" -v first:/data $IMG \
  sh -c 'echo from docker >/data/f; cat /data/f' 2>&1)
t_docker_first=$(ms "$t")
check "docker run --volume-driver -v first:/data wrote /data" is "$out" "from docker"
check "the bytes are in the driver's volume" is "$(cat "$STATE/$(drv handle first)/f" 2>&1)" "from docker"
check "first: one NodeStage, NodePublish, NodeUnpublish, NodeUnstage; nothing in use" \
  node first 1/1/1/1 ""
check "first: attached before its NodeStage, detached after its NodeUnstage" \
  is "$(drv order first)" "ControllerPublishVolume NodeStageVolume NodePublishVolume NodeUnpublishVolume NodeUnstageVolume ControllerUnpublishVolume"

echo "--- docker run --mount type=volume with volume-driver and volume-opt"
out=$($DOCKER run --rm --network none \
  --mount "type=volume,source=opts,target=/data,volume-driver=$NAME,volume-opt=size=8Mi,volume-opt=attribute.tier=gold,volume-opt=parameter.class=fast" \
  $IMG sh -c 'echo with opts >/data/f; cat /data/f' 2>&1)
check "docker run --mount ... volume-opt wrote /data" is "$out" "with opts"
check "CreateVolume asked for 8 MiB" is "$(drv field CreateVolume opts capacity_range required_bytes)" 8388608
check "with parameter class=fast" is "$(drv field CreateVolume opts parameters class)" fast
check "NodePublish carried tier=gold" is "$(drv field NodePublishVolume opts volume_context tier)" gold
check "the bytes are in the driver's volume" is "$(cat "$STATE/$(drv handle opts)/f" 2>&1)" "with opts"
check "opts: set up and torn down once; nothing in use" node opts 1/1/1/1 ""

echo "--- two running docker containers on one volume: exec, cp, stop, start, restart"
$DOCKER volume create --driver "$NAME" -o size=16Mi shared >/dev/null
$DOCKER run -d --name c1 --network none -v shared:/data $IMG sh -c "$LONG" >/dev/null
$DOCKER run -d --name c2 --network none --mount type=volume,source=shared,target=/data $IMG \
  sh -c "$LONG" >/dev/null
check "two containers share one NodeStage, one NodePublish each" node shared 1/2/0/0 shared:2
check "and one staging" is "$(drv Staged)" shared:1
h=$(drv handle shared)
$DOCKER exec c1 sh -c 'echo from exec >/data/e'
check "docker exec wrote into the driver's volume" is "$(cat "$STATE/$h/e" 2>&1)" "from exec"
check "c2 reads what c1 wrote" is "$($DOCKER exec c2 cat /data/e 2>&1)" "from exec"
echo "copied in" >"$D/in.txt"
$DOCKER cp "$D/in.txt" c1:/data/in.txt
check "docker cp into a running container: the bytes are in the driver's volume" \
  is "$(cat "$STATE/$h/in.txt" 2>&1)" "copied in"
$DOCKER cp c1:/data/e "$D/out.txt"
check "docker cp out of it" is "$(cat "$D/out.txt" 2>&1)" "from exec"
check "docker cp unpublished nothing (it nests a Mount and an Unmount)" node shared 1/2/0/0 shared:2
check "c1 still reads its volume" is "$($DOCKER exec c1 cat /data/in.txt 2>&1)" "copied in"
$DOCKER stop c2 >/dev/null
check "docker stop c2: its publish goes, c1's stays" node shared 1/2/1/0 shared:1
$DOCKER start c2 >/dev/null
check "docker start c2: published again" node shared 1/3/1/0 shared:2
$DOCKER restart c2 >/dev/null
check "docker restart c2: unpublished and published again" node shared 1/4/2/0 shared:2

echo "--- the plugin SIGKILLed under running containers, restarted"
t=$(date +%s%N)
stop_plugin KILL
start_plugin
t_restart=$(ms "$t")
echo "after the kill" >"$D/held.txt"
$DOCKER cp "$D/held.txt" c1:/data/held.txt
check "docker cp after the restart: the bytes are in the driver's volume" \
  is "$(cat "$STATE/$h/held.txt" 2>&1)" "after the kill"
check "its nested Mount and Unmount left c1's publish" node shared 1/4/2/0 shared:2

# After a live-restore, dockerd 20.10 forgets its Mount count: a docker cp then drops the
# container's mount ID, its last Unmount never comes and the publish stays. No cp after this.
echo "--- dockerd restarted under live containers (live-restore)"
pid1=$($DOCKER inspect -f '{{.State.Pid}}' c1)
t=$(date +%s%N)
stop_dockerd
check "c1 outlives dockerd" kill -0 "$pid1"
start_dockerd
t_dockerd=$(ms "$t")
check "the same c1 runs after dockerd's restart" is "$($DOCKER inspect -f '{{.State.Pid}}' c1)" "$pid1"
check "dockerd's restart unpublished nothing" node shared 1/4/2/0 shared:2
check "c1 still reads its volume" is "$($DOCKER exec c1 cat /data/e 2>&1)" "from exec"

echo "--- docker rm -f of the running containers, docker volume rm"
$DOCKER rm -f c1 c2 >/dev/null
check "removal unpublished both, then unstaged; nothing mounted" node shared 1/4/4/1 ""
check "nothing staged" is "$(drv Staged)" ""
check "shared: attached once for all its users, detached after the last" \
  is "$(drv order shared | tr ' ' '\n' | grep -c '^Controller')/$(drv order shared | tr ' ' '\n' | tail -1)" \
  2/ControllerUnpublishVolume
handles="$(drv handle first) $(drv handle opts) $h"
$DOCKER volume rm first opts shared >/dev/null
check "docker volume rm: DeleteVolume for each, the driver's volumes gone" \
  is "$(drv count DeleteVolume)/$(cd "$STATE" && ls -d $handles 2>/dev/null)" 3/

echo "--- podman run -v and --mount type=volume on a kcsi volume"
# Podman 4.3 takes no volume-driver in --mount and no --volume-driver: the volume comes first.
podman volume create --driver "$NAME" -o size=16Mi pod >/dev/null
t=$(date +%s%N)
out=$(podman run --rm -v pod:/data $IMG sh -c 'echo from podman >/data/f; cat /data/f' 2>&1)
t_podman=$(ms "$t")
check "podman run -v pod:/data wrote /data" is "$out" "from podman"
h=$(drv handle pod)
check "the bytes are in the driver's volume" is "$(cat "$STATE/$h/f" 2>&1)" "from podman"
check "pod: set up and torn down once; nothing in use" node pod 1/1/1/1 ""
out=$(podman run --rm --mount type=volume,source=pod,target=/data $IMG cat /data/f 2>&1)
check "podman run --mount type=volume reads it" is "$out" "from podman"
check "and set up and tore it down once more" node pod 2/2/2/2 ""

echo "--- two running podman containers on one volume; the plugin SIGKILLed under them"
podman run -d --name p1 -v pod:/data $IMG sh -c "$LONG" >/dev/null
podman run -d --name p2 -v pod:/data $IMG sh -c "$LONG" >/dev/null
check "podman mounts the volume once for both: one NodeStage, one NodePublish" node pod 3/3/2/2 pod:1
stop_plugin KILL
start_plugin
podman exec p2 sh -c 'echo after the kill >/data/k'
check "podman exec writes into the driver's volume after the plugin's restart" \
  is "$(cat "$STATE/$h/k" 2>&1)" "after the kill"
podman stop p1 >/dev/null
check "podman stop p1: p2 keeps the volume" node pod 3/3/2/2 pod:1
podman stop p2 >/dev/null
check "podman stop p2: the restarted plugin unpublished and unstaged it" node pod 3/3/3/3 ""
podman rm p1 p2 >/dev/null

echo "--- Podman's API service restarted under a running container"
start_podman_service
PR="podman --url unix://$PSOCK"
$PR run -d --name s1 -v pod:/data $IMG sh -c "$LONG" >/dev/null
check "a container run through the service: one more NodeStage and NodePublish" node pod 4/4/3/3 pod:1
stop_podman_service
start_podman_service
check "the service's restart unpublished nothing" node pod 4/4/3/3 pod:1
$PR exec s1 sh -c 'echo after the service restart >/data/s'
check "exec through the restarted service writes into the driver's volume" \
  is "$(cat "$STATE/$h/s" 2>&1)" "after the service restart"
$PR stop s1 >/dev/null
check "stop through the restarted service: unpublished and unstaged" node pod 4/4/4/4 ""
$PR rm s1 >/dev/null
stop_podman_service

echo "--- bad options are refused with a clear Err, by both runtimes"
out=$($DOCKER volume create --driver "$NAME" -o size=lots bad 2>&1)
check "docker: size=lots fails with kcsi's class" has "$out" "kcsi InvalidArgument, class final"
out=$(podman volume create --driver "$NAME" -o size=lots bad 2>&1)
check "podman: size=lots fails with kcsi's message" has "$out" 'option size="lots" is not valid: '
check "and kcsi's class" has "$out" "kcsi InvalidArgument, class final"
out=$(podman volume create --driver "$NAME" -o size=1Gi -o volumeHandle=x bad 2>&1)
check "size with volumeHandle: refused" has "$out" "exclude each other"
out=$(podman volume create --driver "$NAME" -o block=maybe bad 2>&1)
check "block=maybe: refused" has "$out" "true or false"
out=$($DOCKER volume create --driver "$NAME" -o tier=gold bad 2>&1)
check "docker: an unknown key is refused, naming it" has "$out" 'option "tier" is not known'

check "nothing was created" is "$(drv count CreateVolume)/$(podman volume ls -q)" 4/pod

echo "--- a volume docker made is podman's too"
$DOCKER volume create --driver "$NAME" -o size=1Mi from-docker >/dev/null
podman volume reload >/dev/null
check "podman volume ls = the plugin's List = the driver's volumes" \
  is "$(podman volume ls --filter driver="$NAME" --format '{{.Name}}' | sort | xargs)/$(
    api /VolumeDriver.List '' | python3 -c 'import json,sys; print(*sorted(v["Name"] for v in json.load(sys.stdin)["Volumes"]))')/$(
    python3 -c 'import json,sys; print(*sorted(v["VolName"] for v in json.load(open(sys.argv[1]))["Volumes"]))' "$STATE/state.json")" \
  "from-docker pod/from-docker pod/$NAME-from-docker $NAME-pod"
podman volume rm pod >/dev/null
$DOCKER volume rm from-docker >/dev/null

echo "--- a block volume: the container gets the device"
# Docker's default device cgroup denies a device it did not create: the rule lets the
# container open the one the volume brings.
$DOCKER volume create --driver "$NAME" -o size=4Mi -o block=true blk >/dev/null
out=$($DOCKER run --rm --network none --device-cgroup-rule 'b *:* rwm' -v blk:/data/dev $IMG \
  sh -c 'echo into the device >/data/dev && echo written' 2>&1)
check "docker run wrote into the block device at /data/dev" is "$out" "written"
check "the bytes are at the start of the driver's block volume" \
  is "$(head -c 16 "$STATE/$(drv handle blk)" 2>&1)" "into the device"
check "blk: staged and published as a block volume once, then undone" node blk 1/1/1/1 ""
# Podman mounts volumes nodev unless told `dev`.
podman volume reload >/dev/null
out=$(podman run --rm --device-cgroup-rule 'b *:* rwm' -v blk:/data/dev:dev $IMG \
  sh -c 'echo from podman too >/data/dev && echo written' 2>&1)
check "podman run wrote into the block device at /data/dev" is "$out" "written"
check "the bytes are at the start of the driver's block volume" \
  is "$(head -c 16 "$STATE/$(drv handle blk)" 2>&1)" "from podman too"
check "blk: staged and published once more, then undone" node blk 2/2/2/2 ""
$DOCKER volume rm blk >/dev/null
check "all removed" is "$(drv count DeleteVolume)/$(ls "$STATE" | grep -vx state.json)" 6/

stop_plugin
check "the plugin removed its socket on SIGTERM" [ ! -e "$SOCK" ]
check "no mount left" is "$(mounted)" ""
check "no driver call failed" is "$(drv failed)" ""
echo "--- figures (ms): docker run --rm creating a kcsi volume $t_docker_first, podman run --rm on one $t_podman; dockerd restart $t_dockerd; plugin SIGKILL to serving again $t_restart"
echo "runtime: $([ "$failed" = 0 ] && echo ok || echo "FAILED: $failed check(s)")"
[ "$failed" = 0 ]
