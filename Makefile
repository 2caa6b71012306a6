# kcsi: the two commands a new user needs are `make demo` and `make test`.
# Everything they need (pinned tools, real Go peers) is built on first use into caches
# outside git (~/.cache/kcsi-tools, ~/.cache/kcsi-peers) and reused afterwards.

PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
RELEASE := target/release
TOOLS = $(shell scripts/tools.sh)

.PHONY: all build header check-header peers demo test lint test-rust test-python test-c test-go bench bench-upstream bench-kubelet bench-fleet bench-footprint hot-symbols chaos bench-runtime bench-conformance fuzz install clean

all: build

## build: the shared and static library, with SONAME libkcsi.so.1 and its dev symlinks, and the
## `kcsi` command line (target/release/kcsi). One cargo invocation: the library and the command
## share one feature set of their dependencies, so the crate compiles once and a second
## `make build` (or `make install`) does nothing.
build:
	cargo build --release --workspace
	cd $(RELEASE) && ln -sf libkcsi.so libkcsi.so.1

## header: regenerate include/kcsi.h and include/kcsi_dlopen.h (the dlopen function-pointer
## types) from src/ffi with the pinned cbindgen. It edits no config: it fails when
## cbindgen_dlopen.toml does not list the exports' types.
CBINDGEN_DLOPEN = $(TOOLS)/cbindgen --config cbindgen_dlopen.toml --crate kcsi --output include/kcsi_dlopen.h

header:
	python3 scripts/gen_dlopen.py
	$(TOOLS)/cbindgen --config cbindgen.toml --crate kcsi --output include/kcsi.h
	$(CBINDGEN_DLOPEN)
	python3 bindings/python/gen_signatures.py

check-header:
	python3 scripts/gen_dlopen.py --check
	scripts/check-docs.sh
	$(TOOLS)/cbindgen --config cbindgen.toml --crate kcsi --verify --output include/kcsi.h \
	  || { echo "include/kcsi.h is stale: run 'make header' and commit it" >&2; exit 1; }
	$(CBINDGEN_DLOPEN) --verify \
	  || { echo "include/kcsi_dlopen.h is stale: run 'make header' and commit it" >&2; exit 1; }
	python3 bindings/python/gen_signatures.py --check \
	  || { echo "run 'make header' and commit bindings/python/kcsi/_signatures.py" >&2; exit 1; }
	@! grep -nE '^(#define|typedef|[a-z_][a-z_ ]*\**[ ]*[a-z_]+\()' include/kcsi.h include/kcsi_dlopen.h | grep -vE 'KCSI_|kcsi_' \
	  || { echo "include/kcsi.h exports names without the kcsi prefix (exclude them in cbindgen.toml)" >&2; exit 1; }

## peers: the real programs tests run against (first build is slow, later runs reuse it).
peers:
	scripts/peers/build.sh

## demo: build what the demo runs (library, `kcsi`, hostpath driver, registrar; each step says
## what it builds), then a node agent on libkcsi with the plugin watcher takes one volume
## through its life against the real hostpath driver and node-driver-registrar.
demo:
	scripts/demo.sh

## test: every test, as CI runs it.
test:
	scripts/test.sh

## lint: formatting and clippy, as CI runs them.
lint:
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings

## test-rust, test-python, test-c, test-go: one suite each, the same commands scripts/test.sh runs.
test-rust: peers
	scripts/test-rust.sh

test-python: build peers
	scripts/test-python.sh

test-c: build peers
	scripts/test-c.sh

test-go: peers
	scripts/test-go.sh

## chaos: the real-kubelet suite's chaos run (issue #39): KILLS SIGKILLs of the kubelet and the
## node's driver (default 100; some inside held CSI calls) while pods come and go, on the
## schedule SEED draws, kcsi then upstream's plugin; prints the kills and what each stranded,
## and fails if kcsi stranded anything (scripts/chaos.sh, tests/kubelet/pkg/scenarios/chaos.go).
chaos: build
	scripts/chaos.sh

## bench: figures, not assertions.
bench: build peers
	scripts/bench.sh

## bench-upstream: kcsi through its Go binding next to upstream's pkg/volume/csi v1.36.3 in one
## process on one real hostpath driver (lifecycle vs. the bare-RPC floor, reconciler queries;
## benches/upstream, scripts/bench-upstream.sh).
bench-upstream: build
	scripts/bench-upstream.sh

## bench-kubelet: pods to Running and torn down in the real kubelet, kcsi and upstream's plugin
## side by side (six rounds, each plugin first in three), 32 and 110 pods, filesystem and block,
## with the rounds compared pair by pair (sign test, median ratio and its 95 % interval); plus
## the attach run (benches/kubelet/pods, scripts/bench-kubelet.sh).
## Then the same without the attach run and with the kubelet's API rate limit lifted (50 -> 1000
## QPS), where the pods wait for the plugins and the driver rather than for the kubelet's client.
bench-kubelet: build
	KCSI_KUBELET_BENCH=32,110 KCSI_KUBELET_BENCH_ARGS="-bench-rounds 6 -bench-volumes fs,block" scripts/bench-kubelet.sh
	KCSI_KUBELET_BENCH=32,110 KCSI_KUBELET_BENCH_ARGS="-bench-rounds 6 -bench-volumes fs,block -bench-attach=false -kubelet-api-qps 1000" \
	  scripts/bench-kubelet.sh

## bench-fleet: 20 hollow nodes (the real kubelet, registrar and hostpath driver each) per
## plugin on one kube-apiserver: API requests per node at registration, at rest and around an
## API server restart, Node/CSINode writes, kubelet RSS; kcsi and upstream side by side
## (benches/kubelet/fleet).
bench-fleet: build
	scripts/bench-fleet.sh

## bench-footprint: the kubelet's and the attach/detach controller's memory with one pod on an
## attach-required CSI volume, kcsi and upstream's plugin side by side, by mapping (the binary,
## libkcsi.so, other files, anonymous) and threads (benches/kubelet/footprint).
bench-footprint: build
	scripts/bench-footprint.sh

## hot-symbols: regenerate link/hot-symbols.txt, the functions the kubelet and the controller
## run, which the library's link lays out together, and refine it twice (scripts/hot-symbols.sh;
## root, about 35 min).
hot-symbols: build
	scripts/hot-symbols.sh

## bench-runtime: `docker run --rm -v VOL:/data ... true` and the same with `podman run`, on a
## kcsi volume vs the runtime's `local` driver vs no volume (RUNS each, default 20): median,
## spread and the plugin's own share. Set-up as the runtime suite (scripts/runtime-env.sh).
bench-runtime:
	scripts/bench-runtime.sh

## bench-conformance: `kcsi conformance` (every case) against the real hostpath driver, plain and
## with an attach limit, timed next to csi-sanity's Node suite on the same driver.
bench-conformance: build peers
	scripts/bench-conformance.sh

## fuzz: libFuzzer + ASAN over the C API's JSON and string entry points (FUZZ_SECONDS per
## target, default 3; `make test` runs it at the default); see scripts/fuzz.sh.
fuzz:
	scripts/fuzz.sh

## install: libkcsi.so.1 (+ symlinks), libkcsi.a, kcsi.h, kcsi_dlopen.h, kcsi.pc and the kcsi
## command under PREFIX.
install: build
	install -d $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(BINDIR)
	install -m 0755 $(RELEASE)/kcsi $(DESTDIR)$(BINDIR)/kcsi
	install -m 0755 $(RELEASE)/libkcsi.so $(DESTDIR)$(LIBDIR)/libkcsi.so.$(VERSION)
	ln -sf libkcsi.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libkcsi.so.1
	ln -sf libkcsi.so.1 $(DESTDIR)$(LIBDIR)/libkcsi.so
	install -m 0644 $(RELEASE)/libkcsi.a $(DESTDIR)$(LIBDIR)/libkcsi.a
	install -m 0644 include/kcsi.h include/kcsi_dlopen.h $(DESTDIR)$(INCLUDEDIR)/
	sed -e 's|@PREFIX@|$(PREFIX)|; s|@LIBDIR@|$(LIBDIR)|; s|@INCLUDEDIR@|$(INCLUDEDIR)|; s|@VERSION@|$(VERSION)|' \
	  kcsi.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/kcsi.pc

clean:
	cargo clean
