// Package kcsi is the Go binding of kcsi, the Kubernetes kubelet's CSI volume plugin as a
// C library (libkcsi.so.1 / libkcsi.a).
//
// A Host is one node agent's instance of the plugin. Its PluginHandler plugs into the
// kubelet's plugin manager in place of pkg/volume/csi's registration handler; Mounter,
// Unmounter, Attacher, BlockMapper and BlockUnmapper are the volume operations.
//
// Handles: every wrapper owns a C handle. Close frees it; Close is idempotent, safe to call
// concurrently and while other goroutines are in calls on the same value (the C free waits
// for the last of them). A wrapper dropped without Close is freed by a runtime cleanup, but
// only as a safety net: the GC does not know how much C memory and how many driver
// connections a handle holds.
//
// Errors: every failed call returns an *Error holding the result code, the class the
// kubelet's operation executor acts on (IsUncertain, IsTransient), the driver's gRPC code and
// the message, all copied inside the cgo call that failed. Match them with errors.Is against
// the Err* sentinels; kcsi timeouts also match context.DeadlineExceeded.
//
// Contexts: blocking calls take a context. Where the C API has a timeout argument
// (RegisterPlugin, Attacher.WaitForAttach) the context's deadline becomes it; elsewhere the
// context is checked before the call starts and the host's timeout (Config.Timeout) bounds
// the call. A call that has started is never abandoned: its outcome decides the volume's
// state, so cancelling a context does not interrupt it.
//
// Threads: kcsi runs its work on its own threads; any goroutine may call any method.
package kcsi
