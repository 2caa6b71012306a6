#include <string.h>

#include "shim.h"

kcsi_result gk_take(kcsi_result r, kcsi_error *err, gk_err *out) {
	if (r != KCSI_OK) {
		out->result = r;
		out->klass = KCSI_CLASS_FINAL;
		out->grpc_code = -1;
		out->message = NULL;
		out->upstream = NULL;
		if (err != NULL) {
			const char *m = kcsi_error_message(err);
			const char *u = kcsi_error_upstream_message(err);
			out->result = kcsi_error_result(err);
			out->klass = kcsi_error_class(err);
			out->grpc_code = kcsi_error_grpc_code(err);
			out->message = m != NULL ? strdup(m) : NULL;
			out->upstream = u != NULL ? strdup(u) : NULL;
		}
	}
	kcsi_error_free(err);
	return r;
}

kcsi_result gk_host_new(const char *config_json, kcsi_host **out, gk_err *e) {
	GK_SHIM(kcsi_host_new(config_json, out, &err));
}

kcsi_result gk_host_status(kcsi_host *h, char **out, gk_err *e) {
	GK_SHIM(kcsi_host_status(h, out, &err));
}

kcsi_result gk_host_metrics(kcsi_host *h, char **out, gk_err *e) {
	GK_SHIM(kcsi_host_metrics(h, out, &err));
}

kcsi_result gk_validate_plugin(kcsi_host *h, const char *name, const char *endpoint,
                               const char *const *versions, size_t versions_len, gk_err *e) {
	GK_SHIM(kcsi_validate_plugin(h, name, endpoint, versions, versions_len, &err));
}

kcsi_result gk_register_plugin(kcsi_host *h, const char *name, const char *endpoint,
                               const char *const *versions, size_t versions_len, int64_t timeout_ms,
                               gk_err *e) {
	GK_SHIM(kcsi_register_plugin(h, name, endpoint, versions, versions_len, timeout_ms, &err));
}

kcsi_result gk_deregister_plugin(kcsi_host *h, const char *name, gk_err *e) {
	GK_SHIM(kcsi_deregister_plugin(h, name, &err));
}

kcsi_result gk_list_drivers(kcsi_host *h, char **out, gk_err *e) {
	GK_SHIM(kcsi_list_drivers(h, out, &err));
}

kcsi_result gk_get_volume_name(kcsi_host *h, const char *spec_json, char **out, gk_err *e) {
	GK_SHIM(kcsi_get_volume_name(h, spec_json, out, &err));
}

kcsi_result gk_can_support(kcsi_host *h, const char *spec_json, bool *out, gk_err *e) {
	GK_SHIM(kcsi_can_support(h, spec_json, out, &err));
}

kcsi_result gk_can_attach(kcsi_host *h, const char *spec_json, bool *out, gk_err *e) {
	GK_SHIM(kcsi_can_attach(h, spec_json, out, &err));
}

kcsi_result gk_driver_attach_required(kcsi_host *h, const char *driver_name, bool *out, gk_err *e) {
	GK_SHIM(kcsi_driver_attach_required(h, driver_name, out, &err));
}

kcsi_result gk_host_csidriver_generation(kcsi_host *h, const uint64_t **out, gk_err *e) {
	GK_SHIM(kcsi_host_csidriver_generation(h, out, &err));
}

kcsi_result gk_host_csidriver_apply(kcsi_host *h, const char *csidriver_json, gk_err *e) {
	GK_SHIM(kcsi_host_csidriver_apply(h, csidriver_json, &err));
}

kcsi_result gk_host_csidriver_delete(kcsi_host *h, const char *name, gk_err *e) {
	GK_SHIM(kcsi_host_csidriver_delete(h, name, &err));
}

kcsi_result gk_host_csidrivers_synced(kcsi_host *h, gk_err *e) {
	GK_SHIM(kcsi_host_csidrivers_synced(h, &err));
}

kcsi_result gk_host_volumeattachment_apply(kcsi_host *h, const char *va_json, gk_err *e) {
	GK_SHIM(kcsi_host_volumeattachment_apply(h, va_json, &err));
}

kcsi_result gk_host_volumeattachment_delete(kcsi_host *h, const char *name, gk_err *e) {
	GK_SHIM(kcsi_host_volumeattachment_delete(h, name, &err));
}

kcsi_result gk_host_volumeattachments_synced(kcsi_host *h, gk_err *e) {
	GK_SHIM(kcsi_host_volumeattachments_synced(h, &err));
}

kcsi_result gk_verify_exhausted_resource(kcsi_host *h, const char *spec_json, bool *out, gk_err *e) {
	GK_SHIM(kcsi_verify_exhausted_resource(h, spec_json, out, &err));
}

kcsi_result gk_can_device_mount(kcsi_host *h, const char *spec_json, bool *out, gk_err *e) {
	GK_SHIM(kcsi_can_device_mount(h, spec_json, out, &err));
}

kcsi_result gk_requires_remount(kcsi_host *h, const char *spec_json, bool *out, gk_err *e) {
	GK_SHIM(kcsi_requires_remount(h, spec_json, out, &err));
}

// Defined by //export in log.go.
extern void gkLog(int32_t level, char *target, char *message);

static void gk_log_trampoline(void *user_data, int32_t level, const char *target,
                              const char *message) {
	(void)user_data;
	gkLog(level, (char *)target, (char *)message);
}

kcsi_result gk_set_log_callback(int enable, int32_t max_level, gk_err *e) {
	GK_SHIM(kcsi_set_log_callback(enable ? gk_log_trampoline : NULL, NULL, max_level, &err));
}
