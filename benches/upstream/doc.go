// Package upstream holds the benchmarks of kcsi's kubelet volume plugin
// (kcsi.dev/kcsi/volumeplugin) side by side with upstream's pkg/volume/csi v1.36.3, in one Go
// process on one real hostpath driver (volumeplugintest's environment): a volume's node
// lifecycle (lifecycle_test.go) and the reconciler's queries (queries_test.go). They print
// figures and assert nothing; scripts/bench-upstream.sh (make bench-upstream) runs them as root.
package upstream
