#!/usr/bin/env bash
# Runtime benchmark (make bench-runtime): what a user waits for. `docker run --rm -v VOL:/data
# IMG true` and the same with `podman run`, on a kcsi volume (the real hostpath driver behind
# `kcsi volume-plugin`) against the runtime's built-in `local` driver and against no volume,
# the three interleaved, RUNS (default 20) times each. Prints median and spread (p10, p90, min,
# max) in ms, and the plugin's own share: the time inside its handlers during a run, summed
# from the duration it logs for each call it answers. Figures, never assertions.
# Set-up: scripts/runtime-env.sh, as the runtime suite.
set -uo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-20}
[[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || { echo "RUNS=$RUNS: a positive whole number" >&2; exit 2; }
# shellcheck source=runtime-env.sh
source scripts/runtime-env.sh

$DOCKER volume create --driver "$NAME" -o size=16Mi kvol >/dev/null || exit 1
$DOCKER volume create lvol >/dev/null || exit 1
podman volume create --driver "$NAME" -o size=16Mi pkvol >/dev/null || exit 1
podman volume create plvol >/dev/null || exit 1

# The ms the plugin logged for the calls it answered after line $1 of its log.
plugin_ms() {
  tail -n +"$(($1 + 1))" "$D/plugin.log" |
    sed -n 's/^kcsi volume-plugin: \/[A-Za-z.]*.*: .* (\([0-9.]*\) ms)$/\1/p' |
    awk '{s += $1} END {printf "%.1f", s}'
}

# One timed run of "$@": appends "label total_ms plugin_ms" to $D/runs.
timed() {
  local label=$1; shift
  local before t total
  before=$(wc -l <"$D/plugin.log")
  t=$(date +%s%N)
  "$@" >/dev/null 2>"$D/run.err" || { echo "$label failed:"; cat "$D/run.err"; exit 1; }
  total=$(ms "$t")
  echo "$label $total $(plugin_ms "$before")" >>"$D/runs"
}

echo "--- $RUNS docker and podman runs each, interleaved: $($DOCKERD --version), $(podman --version), $(runc --version | head -1)"
: >"$D/runs"
# One unmeasured run of each first: image and volume caches warm, as for a user's second run.
for i in $(seq 0 "$RUNS"); do
  for v in none:'' local:'-v lvol:/data' kcsi:'-v kvol:/data'; do
    # shellcheck disable=SC2086
    timed "docker-${v%%:*}" $DOCKER run --rm --network none ${v#*:} $IMG true
  done
  for v in none:'' local:'-v plvol:/data' kcsi:'-v pkvol:/data'; do
    # shellcheck disable=SC2086
    timed "podman-${v%%:*}" podman run --rm ${v#*:} $IMG true
  done
  [ "$i" = 0 ] && : >"$D/runs"
done

python3 - "$D/runs" "$RUNS" <<'EOF'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    label, total, plugin = line.split()
    runs.setdefault(label, []).append((float(total), float(plugin)))

def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))]

print(f"{'runtime, volume':<16} {'runs':>4} {'median':>7} {'p10':>6} {'p90':>6} {'min':>6} {'max':>6}"
      f" {'plugin median':>14}  (ms)")
for label in ("docker-none", "docker-local", "docker-kcsi", "podman-none", "podman-local", "podman-kcsi"):
    r = runs.get(label, [])
    if not r:
        continue
    t = [x for x, _ in r]
    plugin = statistics.median(p for _, p in r) if label.endswith("kcsi") else None
    share = f"{plugin:.1f}" if plugin is not None else "-"
    print(f"{label.replace('-', ', '):<16} {len(t):>4} {statistics.median(t):>7.0f} {pct(t, 10):>6.0f}"
          f" {pct(t, 90):>6.0f} {min(t):>6.0f} {max(t):>6.0f} {share:>14}")
for rt in ("docker", "podman"):
    k, l = runs.get(f"{rt}-kcsi"), runs.get(f"{rt}-local")
    if k and l:
        extra = statistics.median(x for x, _ in k) - statistics.median(x for x, _ in l)
        inside = statistics.median(p for _, p in k)
        print(f"{rt}: a kcsi volume adds {extra:.0f} ms to the median run over a local one; "
              f"{inside:.1f} ms of a run is spent inside the plugin's handlers")
EOF
