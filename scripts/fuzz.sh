#!/usr/bin/env bash
# libFuzzer over every JSON and string entry point of kcsi's C API (fuzz/fuzz_targets), with
# AddressSanitizer. Runs each target for FUZZ_SECONDS (default 3) from the checked-in seeds in
# fuzz/corpus/<target> (new inputs go to a scratch corpus, so the seeds stay small) and prints
# per target the executions, their rate, and libFuzzer's final coverage: `cov` (code edges
# reached), `ft` (features: edges with hit counts and compared values) and the corpus size. A
# crash (panic, INTERNAL result, ASAN report) fails the run; its input is kept in
# target/fuzz/artifacts/<target>/.
#   scripts/fuzz.sh [TARGET...]     FUZZ_SECONDS=60 scripts/fuzz.sh mounter
# Stable rustc with RUSTC_BOOTSTRAP=1 stands in for nightly (cargo-fuzz's flags, without it).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${FUZZ_SECONDS:-3}
triple=$(rustc -vV | sed -n 's/^host: //p')
out=target/fuzz
all=$(awk '/^\[\[bin\]\]/ { bin = 1; next } bin && /^name = / { gsub(/"/, "", $3); print $3; bin = 0 }' fuzz/Cargo.toml)
targets=${*:-$all}

# libfuzzer-sys compiles libFuzzer's C++ sources.
command -v c++ >/dev/null || { apt-get update -qq && apt-get install -y -qq g++ >/dev/null; }

export RUSTC_BOOTSTRAP=1
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Zsanitizer=address -Cforce-frame-pointers"
# --target keeps the instrumentation off build scripts and proc macros. --locked: the targets
# build with the dependencies fuzz/Cargo.lock pins, as the library's own Cargo.lock does.
cargo build --locked --quiet --release --manifest-path fuzz/Cargo.toml --target "$triple" \
  --target-dir "$out" $(printf -- '--bin %s ' $targets) || {
  echo "fuzz: building the fuzz targets failed; when cargo says fuzz/Cargo.lock needs an update (kcsi's" \
    "dependencies changed), 'cargo update --workspace --manifest-path fuzz/Cargo.toml' adds what is missing: commit it" >&2
  exit 1
}

export ASAN_OPTIONS=detect_odr_violation=0:abort_on_error=1:symbolize=1
# kcsi allocates from the malloc ASAN watches (redzones, use after free), not its own heap.
export KCSI_MALLOC=system
# The fuzz root (what kcsi writes) and the scratch corpora: on tmpfs when there is one, where
# creating and removing files is some 10x faster than on a busy disk.
[ -w /dev/shm ] && export TMPDIR=${TMPDIR:-/dev/shm}
total=0; failed=()
printf '%-12s %10s %8s %6s %6s %6s\n' target executions exec/s cov ft corpus
for t in $targets; do
  scratch=$(mktemp -d "${TMPDIR:-/tmp}/kcsi-fuzz-corpus.XXXXXX")
  mkdir -p "$out/artifacts/$t"
  log=$out/$t.log
  if "$out/$triple/release/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 \
       -artifact_prefix="$out/artifacts/$t/" -print_final_stats=1 \
       "$scratch" "fuzz/corpus/$t" >"$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    read -r cov ft corpus < <(sed -n 's/^#[0-9]*[[:space:]]*DONE[[:space:]]*cov: \([0-9]*\) ft: \([0-9]*\) corp: \([0-9]*\)\/.*/\1 \2 \3/p' "$log" | tail -1) || true
    printf '%-12s %10s %8s %6s %6s %6s\n' "$t" "${runs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" "${corpus:-?}"
    total=$((total + ${runs:-0}))
  else
    printf '%-12s %10s   (see %s)\n' "$t" CRASHED "$log"
    tail -40 "$log" >&2
    failed+=("$t")
  fi
  rm -rf "$scratch"
done
echo "fuzz: $total executions in ${seconds} s per target${failed[*]:+; crashed: ${failed[*]}}"
[ ${#failed[@]} = 0 ]
