# Sourced by the real-kubelet suite's and benchmarks' scripts (test-kubelet.sh,
# bench-kubelet.sh, bench-fleet.sh) from the repository root, with the peers they need as
# arguments: installs the library into PREFIX (KCSI_GO_PREFIX, default target/go-prefix),
# builds the peers not built yet, and points PKG_CONFIG_PATH and LD_LIBRARY_PATH at the
# library; returns non-zero if any of it fails.
PREFIX=${KCSI_GO_PREFIX:-$PWD/target/go-prefix}
make --no-print-directory install PREFIX="$PREFIX" >/dev/null || return 1
for peer in "$@"; do
  scripts/peers/path.sh "$peer" >/dev/null 2>&1 || scripts/peers/build.sh "$peer" || return 1
done
export PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
export LD_LIBRARY_PATH=$PREFIX/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
