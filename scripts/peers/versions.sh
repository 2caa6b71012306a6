# shellcheck shell=bash
# The ONE place where kcsi's real test peers are pinned. Sourced by build.sh and path.sh.
# Binaries live outside git, keyed on (peer, version, Go version), so a Go or pin change
# simply builds a new directory and stale ones are never reused.

# Use exactly the machine's Go: the cache key must name the Go that really built the binary.
export GOTOOLCHAIN=local
KCSI_GO=${KCSI_GO:-$(command -v go || echo /usr/local/go/bin/go)}
KCSI_GO_VERSION=$("$KCSI_GO" env GOVERSION)
KCSI_PEERS_CACHE=${KCSI_PEERS_CACHE:-$HOME/.cache/kcsi-peers}

KCSI_PEERS=(hostpath registrar sanity etcd apiserver mockdriver faultdriver attacher resizer)
# What tests use and build by default. The kubernetes-csi peers (hostpath, registrar, sanity)
# come from the Go module proxy where it serves them, else from the source archives (with
# their vendor trees) in $KCSI_PEER_ARCHIVES; see build.sh.
KCSI_DEFAULT_PEERS=(hostpath registrar sanity etcd apiserver mockdriver faultdriver attacher resizer)
# Source archives of the kubernetes-csi peers at their tags, used when the proxy refuses them.
KCSI_PEER_ARCHIVES=${KCSI_PEER_ARCHIVES:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/../shared/peers}
KCSI_PEERS_SCRIPTS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# Per peer: MODULE@VERSION is fetched from the proxy, PKG is built into BIN; STAGING, if set,
# maps every k8s.io staging module to that version; SRC, if set, is a directory of our own
# main package built inside the wrapper module instead of PKG.

# csi-driver-host-path: the main CSI driver used by tests.
HOSTPATH_MODULE=github.com/kubernetes-csi/csi-driver-host-path
HOSTPATH_VERSION=v1.18.0
HOSTPATH_PKG=$HOSTPATH_MODULE/cmd/hostpathplugin
HOSTPATH_BIN=hostpathplugin
HOSTPATH_STAGING=v0.36.1   # its k8s.io/kubernetes v1.36.1 needs staging replaces at v0.36.1
HOSTPATH_STAMP="-X main.version=v1.18.0"   # without it GetPluginInfo fails ("Driver is missing version")
HOSTPATH_ARCHIVE=csi-driver-host-path-v1.18.0
HOSTPATH_ARCHIVE_PKG=./cmd/hostpathplugin

# node-driver-registrar: no /v2 in its module path, so v2.x tags are not Go versions: pin a commit.
REGISTRAR_MODULE=github.com/kubernetes-csi/node-driver-registrar
REGISTRAR_VERSION=c5794c45f34c   # = v2.17.0
REGISTRAR_PKG=$REGISTRAR_MODULE/cmd/csi-node-driver-registrar
REGISTRAR_BIN=csi-node-driver-registrar
REGISTRAR_STAGING=v0.36.1
REGISTRAR_STAMP="-X main.version=v2.17.0"
REGISTRAR_ARCHIVE=node-driver-registrar-v2.17.0
REGISTRAR_ARCHIVE_PKG=./cmd/csi-node-driver-registrar

# csi-sanity (csi-test v5): the CSI spec conformance suite, run against the real hostpath driver.
SANITY_MODULE=github.com/kubernetes-csi/csi-test/v5
SANITY_VERSION=v5.4.0
SANITY_PKG=$SANITY_MODULE/cmd/csi-sanity
SANITY_BIN=csi-sanity
SANITY_STAGING=
SANITY_STAMP="-X main.VERSION=v5.4.0"
SANITY_ARCHIVE=csi-test-v5.4.0
SANITY_ARCHIVE_PKG=./cmd/csi-sanity

# external-attacher: the sidecar that turns VolumeAttachments into ControllerPublish /
# ControllerUnpublish calls, for the controller host's Attach and Detach.
ATTACHER_MODULE=github.com/kubernetes-csi/external-attacher/v4
ATTACHER_VERSION=v4.12.0
ATTACHER_PKG=$ATTACHER_MODULE/cmd/csi-attacher
ATTACHER_BIN=csi-attacher
ATTACHER_STAGING=
ATTACHER_STAMP="-X main.version=v4.12.0"
ATTACHER_ARCHIVE=external-attacher-v4.12.0
ATTACHER_ARCHIVE_PKG=./cmd/csi-attacher

# external-resizer: the sidecar that turns a PVC size increase into ControllerExpandVolume and
# updates the PV's capacity, after which the kubelet calls NodeExpandVolume (the suite's expand
# scenarios).
RESIZER_MODULE=github.com/kubernetes-csi/external-resizer/v2
RESIZER_VERSION=v2.2.1
RESIZER_PKG=$RESIZER_MODULE/cmd/csi-resizer
RESIZER_BIN=csi-resizer
RESIZER_STAGING=
RESIZER_STAMP="-X main.version=v2.2.1"
RESIZER_ARCHIVE=external-resizer-v2.2.1
RESIZER_ARCHIVE_PKG=./cmd/csi-resizer

# etcd 3.6 (Debian's 3.4 is too old for kube-apiserver 1.36). Main package is the server module.
ETCD_MODULE=go.etcd.io/etcd/server/v3
ETCD_VERSION=v3.6.16
ETCD_PKG=$ETCD_MODULE
ETCD_BIN=etcd
ETCD_STAGING=

# kube-apiserver from k8s.io/kubernetes (newest 1.36 patch on the proxy); staging modules at v0.36.x.
APISERVER_MODULE=k8s.io/kubernetes
APISERVER_VERSION=v1.36.3
APISERVER_PKG=$APISERVER_MODULE/cmd/kube-apiserver
APISERVER_BIN=kube-apiserver
APISERVER_STAGING=v0.36.3

# Kubernetes' own mock CSI driver (test/e2e/storage/drivers/csi-test in k8s.io/kubernetes),
# wrapped as a standalone binary by mockdriver/main.go: a real upstream driver without mounts
# whose call log tests read, and whose flags give capabilities hostpath lacks (VOLUME_MOUNT_GROUP).
MOCKDRIVER_MODULE=$APISERVER_MODULE
MOCKDRIVER_VERSION=$APISERVER_VERSION
MOCKDRIVER_PKG=
MOCKDRIVER_BIN=csi-mock-driver
MOCKDRIVER_STAGING=$APISERVER_STAGING
MOCKDRIVER_SRC=$KCSI_PEERS_SCRIPTS/mockdriver

# k8s.io/kubernetes' local ./staging replaces mean nothing outside its repo: a wrapper module
# maps each of these to the published k8s.io/<m>@<staging version> instead.
KCSI_K8S_STAGING=(api apiextensions-apiserver apimachinery apiserver cli-runtime client-go
  cloud-provider cluster-bootstrap code-generator component-base component-helpers
  controller-manager cri-api cri-client cri-streaming csi-translation-lib
  dynamic-resource-allocation endpointslice externaljwt kms kube-aggregator
  kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics mount-utils
  pod-security-admission sample-apiserver sample-cli-plugin sample-controller streaming)

# kcsi_peer_key NAME: accepts a peer name or its binary name; prints the canonical peer name.
kcsi_peer_key() {
  case "$1" in
    hostpath|hostpathplugin) echo hostpath ;;
    registrar|csi-node-driver-registrar|node-driver-registrar) echo registrar ;;
    sanity|csi-sanity) echo sanity ;;
    etcd) echo etcd ;;
    apiserver|kube-apiserver) echo apiserver ;;
    mockdriver|csi-mock-driver) echo mockdriver ;;
    faultdriver|csi-fault-driver) echo faultdriver ;;
    attacher|csi-attacher|external-attacher) echo attacher ;;
    resizer|csi-resizer|external-resizer) echo resizer ;;
    *) echo "kcsi peers: unknown peer '$1' (known: ${KCSI_PEERS[*]})" >&2; return 1 ;;
  esac
}

# kcsi_peer_var NAME FIELD: e.g. kcsi_peer_var etcd VERSION -> v3.6.16
kcsi_peer_var() {
  local v
  v="$(kcsi_peer_key "$1" | tr '[:lower:]' '[:upper:]')_$2"
  printf '%s\n' "${!v:-}"
}

# kcsi_peer_tag NAME: the version part of the cache key; for our own sources it also carries
# a hash of them, so editing mockdriver/main.go builds a new binary instead of reusing one.
kcsi_peer_tag() {
  local src
  src=$(kcsi_peer_var "$1" SRC 2>/dev/null || true)
  if [ -n "$src" ]; then
    printf '%s-src%s\n' "$(kcsi_peer_var "$1" VERSION)" \
      "$({ cat "$src"/*.go; kcsi_peer_var "$1" REQUIRE | grep . || true; } | sha256sum | cut -c1-8)"
  else
    kcsi_peer_var "$1" VERSION
  fi
}

# kcsi_peer_bin NAME: absolute path of the cached binary (whether or not it exists yet).
kcsi_peer_bin() {
  local key
  key=$(kcsi_peer_key "$1") || return 1
  printf '%s/%s-%s-%s/%s\n' "$KCSI_PEERS_CACHE" "$key" "$(kcsi_peer_tag "$key")" \
    "$KCSI_GO_VERSION" "$(kcsi_peer_var "$key" BIN)"
}

# csi-fault-driver (fault-driver/*.go, its package comment says what it does): a hostpath-like
# driver with real mounts that injects faults (fail / hang one RPC, drop a node capability),
# used only by the tests that need one. MODULE is the CSI spec it is built against; REQUIRE
# pins every other module it imports (go get with MODULE@VERSION; part of the cache key).
FAULTDRIVER_MODULE=github.com/container-storage-interface/spec
FAULTDRIVER_VERSION=v1.12.0
FAULTDRIVER_PKG=
FAULTDRIVER_BIN=csi-fault-driver
FAULTDRIVER_STAGING=
FAULTDRIVER_SRC=$KCSI_PEERS_SCRIPTS/fault-driver
FAULTDRIVER_REQUIRE="google.golang.org/grpc@v1.79.3 google.golang.org/protobuf@v1.36.12
  k8s.io/mount-utils@v0.36.3 k8s.io/klog/v2@v2.140.0"
