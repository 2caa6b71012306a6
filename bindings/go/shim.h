// C shims between Go and kcsi: each wraps one kcsi call and, in the same cgo call, copies the
// kcsi_error's fields into a gk_err and frees it, so Go never makes a second call to read an
// error (and there is no per-thread state a goroutine could lose by switching threads).
#ifndef KCSI_GO_SHIM_H
#define KCSI_GO_SHIM_H

#include <stdlib.h>
#include <kcsi.h>

typedef struct gk_err {
	int32_t result;
	int32_t klass;
	int32_t grpc_code;
	char *message;  // malloc'd copy, or NULL; the Go side frees it
	char *upstream; // kcsi_error_upstream_message, likewise
} gk_err;

// gk_take records r and the fields of err in *out, then frees err. Returns r.
kcsi_result gk_take(kcsi_result r, kcsi_error *err, gk_err *out);

#define GK_SHIM(call)                                                                          \
	kcsi_error *err = NULL;                                                                    \
	kcsi_result r = (call);                                                                    \
	return gk_take(r, err, e)

// Registration, status and queries.
kcsi_result gk_host_new(const char *config_json, kcsi_host **out, gk_err *e);
kcsi_result gk_host_status(kcsi_host *h, char **out, gk_err *e);
kcsi_result gk_host_metrics(kcsi_host *h, char **out, gk_err *e);
kcsi_result gk_validate_plugin(kcsi_host *h, const char *name, const char *endpoint,
                               const char *const *versions, size_t versions_len, gk_err *e);
kcsi_result gk_register_plugin(kcsi_host *h, const char *name, const char *endpoint,
                               const char *const *versions, size_t versions_len, int64_t timeout_ms,
                               gk_err *e);
kcsi_result gk_deregister_plugin(kcsi_host *h, const char *name, gk_err *e);
kcsi_result gk_list_drivers(kcsi_host *h, char **out, gk_err *e);
kcsi_result gk_get_volume_name(kcsi_host *h, const char *spec_json, char **out, gk_err *e);
kcsi_result gk_can_support(kcsi_host *h, const char *spec_json, bool *out, gk_err *e);
kcsi_result gk_can_attach(kcsi_host *h, const char *spec_json, bool *out, gk_err *e);
kcsi_result gk_driver_attach_required(kcsi_host *h, const char *driver_name, bool *out, gk_err *e);
kcsi_result gk_host_csidriver_generation(kcsi_host *h, const uint64_t **out, gk_err *e);
kcsi_result gk_host_csidriver_apply(kcsi_host *h, const char *csidriver_json, gk_err *e);
kcsi_result gk_host_csidriver_delete(kcsi_host *h, const char *name, gk_err *e);
kcsi_result gk_host_csidrivers_synced(kcsi_host *h, gk_err *e);
kcsi_result gk_host_volumeattachment_apply(kcsi_host *h, const char *va_json, gk_err *e);
kcsi_result gk_host_volumeattachment_delete(kcsi_host *h, const char *name, gk_err *e);
kcsi_result gk_host_volumeattachments_synced(kcsi_host *h, gk_err *e);
kcsi_result gk_can_device_mount(kcsi_host *h, const char *spec_json, bool *out, gk_err *e);
kcsi_result gk_requires_remount(kcsi_host *h, const char *spec_json, bool *out, gk_err *e);
kcsi_result gk_verify_exhausted_resource(kcsi_host *h, const char *spec_json, bool *out, gk_err *e);

// Logging: the trampoline forwards kcsi records to the exported Go function.
kcsi_result gk_set_log_callback(int enable, int32_t max_level, gk_err *e);

#endif
