#!/usr/bin/env bash
# make hot-symbols: regenerates link/hot-symbols.txt, the library's functions that the kubelet
# and the attach/detach controller run, which build.rs has the linker lay out first, side by
# side. The kernel maps a library's code 64 KiB around each page a process touches
# (fault-around): scattered, the functions that run would make nearly all of .text resident.
# How:
#   1. The library is built as `make build` builds it, plus LLVM's IR profiling
#      (-Cprofile-generate), into target/hot-symbols, with link/profile-dump.c linked in: a
#      thread that writes the counters every 500 ms, as the kubelet and the controller never
#      exit through libc.
#   2. The memory benchmark (benches/kubelet/footprint, a short run: one pod on an
#      attach-required volume per plugin) runs with that library in place of the installed one.
#   3. llvm-profdata (rustup's llvm-tools, LLVM as rustc's) merges the counters; every
#      function of the release library that ran is listed, then every one without counters.
# A listed name the next build no longer has (changed code, another rustc) is skipped by the
# linker. Regenerate after large changes; `make bench-footprint` shows the effect. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
[ "$(id -u)" = 0 ] || { echo "hot-symbols: the kubelet and the drivers mount volumes and loop devices: run it as root" >&2; exit 1; }
rustup component list --installed 2>/dev/null | grep -q '^llvm-tools' || rustup component add llvm-tools >&2
profdata=$(rustc --print sysroot)/lib/rustlib/$(rustc -vV | sed -n 's/^host: //p')/bin/llvm-profdata

out=$REPO/target/hot-symbols
rm -rf "$out/profiles" "$out/lib"
mkdir -p "$out/profiles" "$out/lib"
echo "--- the library with IR profiling"
cc -O2 -fPIC -c link/profile-dump.c -o "$out/profile-dump.o"
# The flags go in through RUSTC_WRAPPER, which cargo leaves out of each crate's metadata: the
# profiling build's symbol names are then the release build's, hashes included. LLVM's
# pre-inliner is off: it would inline small functions before counting, so a function that the
# release build calls would count as never run.
cat >"$out/rustc-wrapper" <<WRAP
#!/bin/sh
rustc=\$1; shift
case " \$* " in *" --crate-type cdylib "*) set -- "\$@" -Clink-arg=$out/profile-dump.o ;; esac
exec "\$rustc" "\$@" -Cprofile-generate=$out/profiles -Cllvm-args=-disable-preinline
WRAP
chmod +x "$out/rustc-wrapper"
CARGO_TARGET_DIR=$out/build RUSTC_WRAPPER=$out/rustc-wrapper cargo build --quiet --release --locked --workspace
rm -f "$out/profiles"/*   # the build scripts' own
cp "$out/build/release/libkcsi.so" "$out/lib/libkcsi.so.1"

source scripts/kubelet-setup.sh hostpath registrar attacher etcd apiserver
E2E=$(scripts/kubelet-e2e-bin.sh)
FOOTPRINT=$(scripts/kubelet-e2e-bin.sh footprint)
echo "--- benches/kubelet/footprint on the profiling library"
LD_LIBRARY_PATH=$out/lib:$LD_LIBRARY_PATH KCSI_PROFILE_DIR=$out/profiles \
  "$FOOTPRINT" -repo "$REPO" -e2e "$E2E" -steady 10s -every 5s

"$profdata" merge -o "$out/merged.profdata" "$out/profiles"/*.profraw
# `show --counts` prints each function as "  <name>:" (a local one as "<file>;<name>") and,
# below it, "Block counts: [...]": it ran if one is not 0.
"$profdata" show --all-functions --counts "$out/merged.profdata" |
  awk '/^  [^ ].*:$/ { name = substr($0, 3, length($0) - 3); sub(/^.*;/, "", name); print "profiled", name }
       /^    Block counts: / && $0 ~ /[1-9]/ { print "ran", name }' >"$out/profile.txt"
nm --defined-only target/release/libkcsi.so | awk '$2 ~ /^[tTwW]$/ { print $3 }' >"$out/symbols.txt"
# Listed: the functions that ran, then every function with no counters at all, which may have
# run too: the prebuilt standard library's, ring's C and assembly (about 0.5 MiB together).
python3 - "$out/profile.txt" "$out/symbols.txt" link/hot-symbols.txt <<'PY'
import sys
profiled, ran = set(), set()
for line in open(sys.argv[1]):
    kind, name = line.split(" ", 1)
    (ran if kind == "ran" else profiled).add(name.strip())
symbols = sorted({s.strip() for s in open(sys.argv[2])})
hot = [s for s in symbols if s in ran] + [s for s in symbols if s not in profiled]
open(sys.argv[3], "w").write("".join(s + "\n" for s in hot))
print(f"hot-symbols: {len(ran)} functions ran; {len(hot)} symbols listed in {sys.argv[3]}, "
      f"{sum(s in ran for s in hot)} of them that ran, the rest without counters")
PY
