/*
 * kcsi C API test: exercises libkcsi as a C host does, including bad input, against a real
 * CSI driver. Built with -std=c11 -Wall -Wextra -Werror -pedantic; also run under ASAN and
 * valgrind by scripts/test-c.sh.
 *
 * usage: api_test <driver socket path> <driver name> <scratch dir>
 */
#define _POSIX_C_SOURCE 200809L
#include <kcsi.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

/* Checks that a call failed with `want` and that its error names `needle`; frees the error. */
static void expect_error(const char *what, kcsi_result got, kcsi_error *err, kcsi_result want,
                         const char *needle) {
    checks++;
    const char *msg = err ? kcsi_error_message(err) : NULL;
    /* Every error has upstream's wording too (kcsi's message when kcsi adds no context). */
    const char *upstream = err ? kcsi_error_upstream_message(err) : NULL;
    if (got != want || err == NULL || kcsi_error_result(err) != want || msg == NULL ||
        upstream == NULL ||
        (needle && strstr(msg, needle) == NULL)) {
        failures++;
        fprintf(stderr, "%s: got %s (%s), want %s naming \"%s\"\n", what, kcsi_result_name(got),
                msg ? msg : "(no message)", kcsi_result_name(want), needle ? needle : "");
    }
    kcsi_error_free(err);
}

/* Runs `call` (which writes its error to `&err`) first, then checks it: C leaves the order of
 * evaluation of function arguments unspecified, so the call must not be an argument next to
 * `err` itself. */
#define EXPECT(what, want, needle, call)                  \
    do {                                                  \
        kcsi_error *err = NULL;                           \
        kcsi_result got_ = (call);                        \
        expect_error((what), got_, err, (want), (needle)); \
    } while (0)

static char config[1024];

static kcsi_host *new_host(const char *root, const char *node) {
    snprintf(config, sizeof config, "{\"nodeName\":\"%s\",\"rootDir\":\"%s\"}", node, root);
    kcsi_host *h = NULL;
    kcsi_error *err = NULL;
    kcsi_result r = kcsi_host_new(config, &h, &err);
    if (r != KCSI_OK) {
        fprintf(stderr, "kcsi_host_new: %s: %s\n", kcsi_result_name(r), kcsi_error_message(err));
        kcsi_error_free(err);
        exit(1);
    }
    return h;
}

/* Writes <root>/<name>, a kubeconfig of an API server nobody listens on (a host makes its
 * client without sending a request), into path; false when it cannot be written. */
static bool write_kubeconfig(const char *root, const char *name, char *path, size_t n) {
    snprintf(path, n, "%s/%s", root, name);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f == NULL) return false;
    fputs("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
          "users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
          "current-context: x\n", f);
    fclose(f);
    return true;
}

static void test_version_and_result_names(void) {
    const char *v = kcsi_version();
    CHECK(v != NULL && strchr(v, '.') != NULL);
    static const char *const names[] = {
        "KCSI_OK", "KCSI_ERR_INVALID_ARGUMENT", "KCSI_ERR_NOT_FOUND", "KCSI_ERR_ALREADY_EXISTS",
        "KCSI_ERR_UNSUPPORTED_VERSION", "KCSI_ERR_DRIVER", "KCSI_ERR_KUBERNETES", "KCSI_ERR_IO",
        "KCSI_ERR_TIMEOUT", "KCSI_ERR_NOT_SUPPORTED", "KCSI_ERR_UNAVAILABLE",
        "KCSI_ERR_FAILED_PRECONDITION", "KCSI_ERR_INTERNAL"};
    for (kcsi_result r = KCSI_OK; r <= KCSI_ERR_INTERNAL; r++) {
        CHECK(strcmp(kcsi_result_name(r), names[r]) == 0);
    }
    CHECK(strcmp(kcsi_result_name(-1), "KCSI_UNKNOWN_RESULT") == 0);
    CHECK(strcmp(kcsi_result_name(KCSI_ERR_INTERNAL + 1), "KCSI_UNKNOWN_RESULT") == 0);
    CHECK(KCSI_API_VERSION == 1);
}

static void test_errors_and_free_null(void) {
    CHECK(kcsi_error_result(NULL) == KCSI_ERR_INVALID_ARGUMENT);
    CHECK(kcsi_error_message(NULL) == NULL);
    CHECK(kcsi_error_upstream_message(NULL) == NULL);
    CHECK(kcsi_error_grpc_code(NULL) == -1);
    CHECK(kcsi_error_class(NULL) == -1);
    kcsi_error_free(NULL);
    kcsi_string_free(NULL);
    kcsi_host_free(NULL);
    kcsi_mounter_free(NULL);
    kcsi_unmounter_free(NULL);
    kcsi_attacher_free(NULL);
    kcsi_block_mapper_free(NULL);
    kcsi_block_unmapper_free(NULL);
}

static void test_host_config(const char *root) {
    kcsi_host *h = NULL;
    char cfg[1024];

    snprintf(cfg, sizeof cfg, "{\"nodeName\":\"n\",\"rootDir\":\"%s\",\"bogusKey\":1}", root);
    EXPECT("unknown key", KCSI_ERR_INVALID_ARGUMENT, "bogusKey",
           kcsi_host_new(cfg, &h, &err));
    CHECK(h == NULL); /* outputs are written only on success */

    snprintf(cfg, sizeof cfg, "{\"rootDir\":\"%s\"}", root);
    EXPECT("missing nodeName", KCSI_ERR_INVALID_ARGUMENT, "nodeName",
           kcsi_host_new(cfg, &h, &err));

    EXPECT("NULL config", KCSI_ERR_INVALID_ARGUMENT, "config_json",
           kcsi_host_new(NULL, &h, &err));

    EXPECT("malformed config", KCSI_ERR_INVALID_ARGUMENT, NULL,
           kcsi_host_new("{\"nodeName\":", &h, &err));

    snprintf(cfg, sizeof cfg, "{\"nodeName\":\"n\",\"rootDir\":\"%s\"}", root);
    EXPECT("NULL host_out", KCSI_ERR_INVALID_ARGUMENT, "host_out",
           kcsi_host_new(cfg, NULL, &err));

    /* err_out may be NULL: the code alone comes back. */
    CHECK(kcsi_host_new(NULL, &h, NULL) == KCSI_ERR_INVALID_ARGUMENT);

    kcsi_host *ok = new_host(root, "node-c");
    char *status = NULL;
    CHECK(kcsi_host_status(ok, &status, NULL) == KCSI_OK);
    CHECK(status != NULL && strstr(status, "\"csiNodeInitialized\"") != NULL);
    CHECK(status != NULL && strstr(status, "\"lastError\":null") != NULL);
    kcsi_string_free(status);
    EXPECT("NULL status out", KCSI_ERR_INVALID_ARGUMENT, "status_json_out",
           kcsi_host_status(ok, NULL, &err));
    EXPECT("NULL host", KCSI_ERR_INVALID_ARGUMENT, "host",
           kcsi_host_status(NULL, &status, &err));

    char *metrics = NULL;
    CHECK(kcsi_host_metrics(ok, &metrics, NULL) == KCSI_OK);
    /* No RPC yet: csi_operations_seconds has no series, so no lines (as in Go's client). */
    CHECK(metrics != NULL && strstr(metrics, "csi_operations_seconds") == NULL);
    CHECK(metrics != NULL && strstr(metrics, "# TYPE kcsi_registered_drivers gauge\n") != NULL);
    CHECK(metrics != NULL && strstr(metrics, "kcsi_registered_drivers 0\n") != NULL);
    kcsi_string_free(metrics);
    EXPECT("NULL metrics out", KCSI_ERR_INVALID_ARGUMENT, "text_out",
           kcsi_host_metrics(ok, NULL, &err));
    kcsi_host_free(ok);
}

static void test_bad_input(const char *root) {
    kcsi_host *h = new_host(root, "node-bad");
    const char *v1[] = {"1.0.0"};
    const char *with_null[] = {"1.0.0", NULL};
    const char bad_utf8[] = {'a', (char)0xff, (char)0xfe, 0};
    const char *with_bad[] = {"1.0.0", bad_utf8};

    EXPECT("NULL name", KCSI_ERR_INVALID_ARGUMENT, "name",
           kcsi_validate_plugin(h, NULL, "/tmp/x.sock", v1, 1, &err));
    EXPECT("bad UTF-8 name", KCSI_ERR_INVALID_ARGUMENT, "name",
           kcsi_validate_plugin(h, bad_utf8, "/tmp/x.sock", v1, 1, &err));
    EXPECT("NULL versions with length", KCSI_ERR_INVALID_ARGUMENT, "versions",
           kcsi_validate_plugin(h, "a.b", "/tmp/x.sock", NULL, 2, &err));
    EXPECT("NULL version element", KCSI_ERR_INVALID_ARGUMENT, "versions[1]",
           kcsi_register_plugin(h, "a.b", "/tmp/x.sock", with_null, 2, 1000, &err));
    EXPECT("bad UTF-8 version", KCSI_ERR_INVALID_ARGUMENT, "versions[1]",
           kcsi_register_plugin(h, "a.b", "/tmp/x.sock", with_bad, 2, 1000, &err));
    EXPECT("empty versions", KCSI_ERR_UNSUPPORTED_VERSION, "empty list",
           kcsi_validate_plugin(h, "a.b", "/tmp/x.sock", NULL, 0, &err));
    EXPECT("malformed spec", KCSI_ERR_INVALID_ARGUMENT, "spec_json",
           kcsi_get_volume_name(h, "{not json", &(char *){NULL}, &err));
    bool out = false;
    EXPECT("NULL bool out", KCSI_ERR_INVALID_ARGUMENT, "out",
           kcsi_can_support(h, "{\"volume\":{\"name\":\"v\",\"csi\":{\"driver\":\"d\"}}}", NULL, &err));
    CHECK(kcsi_can_support(h, "{\"volume\":{\"name\":\"v\",\"csi\":{\"driver\":\"d\"}}}", &out, NULL) == KCSI_OK);
    CHECK(out == true);

    char *list = NULL;
    CHECK(kcsi_list_drivers(h, &list, NULL) == KCSI_OK);
    CHECK(list != NULL && strcmp(list, "[]") == 0); /* nothing above changed state */
    kcsi_string_free(list);
    kcsi_host_free(h);
}

/* The attach/detach controller's calls: refused on a node host, bad input named on a
 * controller host (whose API server these calls never reach). */
static void test_controller_calls(const char *root) {
    const char *spec = "{\"persistentVolume\":{\"metadata\":{\"name\":\"pv-1\"},"
                       "\"spec\":{\"csi\":{\"driver\":\"d.example.com\",\"volumeHandle\":\"h\"}}}}";
    char *out = NULL;
    kcsi_host *node = new_host(root, "node-ctl");
    kcsi_attacher *a = NULL;
    CHECK(kcsi_attacher_new(node, &a, NULL) == KCSI_OK);
    EXPECT("attach on a node host", KCSI_ERR_NOT_SUPPORTED,
           "attaching volumes from the kubelet is not supported",
           kcsi_attacher_attach(a, spec, "node-ctl", 100, &out, &err));
    EXPECT("detach on a node host", KCSI_ERR_NOT_SUPPORTED, "kcsi_attacher_detach",
           kcsi_attacher_detach(a, "d.example.com^h", "node-ctl", 100, &err));
    kcsi_attacher_free(a);
    kcsi_host_free(node);

    char kubeconfig[512];
    if (!write_kubeconfig(root, "ctl-kubeconfig", kubeconfig, sizeof kubeconfig)) return;
    snprintf(config, sizeof config, "{\"role\":\"controller\",\"kubeconfig\":\"%s\"}", kubeconfig);
    kcsi_host *ctl = NULL;
    CHECK(kcsi_host_new(config, &ctl, NULL) == KCSI_OK);
    if (ctl == NULL) return;
    CHECK(kcsi_attacher_new(ctl, &a, NULL) == KCSI_OK);
    EXPECT("attach: empty node", KCSI_ERR_INVALID_ARGUMENT, "node_name",
           kcsi_attacher_attach(a, spec, "", 100, &out, &err));
    EXPECT("attach: NULL spec", KCSI_ERR_INVALID_ARGUMENT, "spec_json",
           kcsi_attacher_attach(a, NULL, "n", 100, &out, &err));
    EXPECT("attach: non-CSI spec", KCSI_ERR_INVALID_ARGUMENT, "volume source not found",
           kcsi_attacher_attach(a, "{\"persistentVolume\":{\"spec\":{}}}", "n", 100, &out, &err));
    EXPECT("detach: no caret", KCSI_ERR_INVALID_ARGUMENT, "volume_name",
           kcsi_attacher_detach(a, "d.example.com-h", "n", 100, &err));
    EXPECT("are attached: not an array", KCSI_ERR_INVALID_ARGUMENT, "specs_json",
           kcsi_attacher_volumes_are_attached(a, spec, "n", &out, &err));
    EXPECT("node call on a controller host", KCSI_ERR_NOT_SUPPORTED, "kcsi_attacher_wait_for_attach",
           kcsi_attacher_wait_for_attach(a, spec, 100, &out, &err));
    CHECK(out == NULL); /* no failed call wrote an output */
    CHECK(kcsi_attacher_volumes_are_attached(a, "[]", "n", &out, NULL) == KCSI_OK);
    CHECK(out != NULL && strcmp(out, "[]") == 0);
    kcsi_string_free(out);
    kcsi_attacher_free(a);
    kcsi_host_free(ctl);
    remove(kubeconfig);
}

/* "csiDriversFromHost": the program's informer feeds the CSIDriver objects. */
static void test_fed_csidrivers(const char *root) {
    kcsi_host *unfed = new_host(root, "node-unfed");
    EXPECT("apply on a host that was not made to be fed", KCSI_ERR_FAILED_PRECONDITION,
           "csiDriversFromHost",
           kcsi_host_csidriver_apply(unfed, "{\"metadata\":{\"name\":\"d.example.com\"}}", &err));
    kcsi_host_free(unfed);

    char kubeconfig[512];
    if (!write_kubeconfig(root, "fed-kubeconfig", kubeconfig, sizeof kubeconfig)) return;
    snprintf(config, sizeof config,
             "{\"nodeName\":\"node-fed\",\"rootDir\":\"%s/fed\",\"kubeconfig\":\"%s\",\"csiDriversFromHost\":true}",
             root, kubeconfig);
    kcsi_host *h = NULL;
    CHECK(kcsi_host_new(config, &h, NULL) == KCSI_OK);
    if (h == NULL) return;
    bool required = false;
    CHECK(kcsi_host_csidrivers_synced(h, NULL) == KCSI_OK);
    CHECK(kcsi_driver_attach_required(h, "d.example.com", &required, NULL) == KCSI_OK && required);
    CHECK(kcsi_host_csidriver_apply(
              h, "{\"metadata\":{\"name\":\"d.example.com\"},\"spec\":{\"attachRequired\":false}}", NULL) ==
          KCSI_OK);
    CHECK(kcsi_driver_attach_required(h, "d.example.com", &required, NULL) == KCSI_OK && !required);
    EXPECT("apply: NULL", KCSI_ERR_INVALID_ARGUMENT, "csidriver_json", kcsi_host_csidriver_apply(h, NULL, &err));
    EXPECT("apply: no name", KCSI_ERR_INVALID_ARGUMENT, "no metadata.name",
           kcsi_host_csidriver_apply(h, "{\"spec\":{}}", &err));
    CHECK(kcsi_host_csidriver_delete(h, "d.example.com", NULL) == KCSI_OK);
    CHECK(kcsi_driver_attach_required(h, "d.example.com", &required, NULL) == KCSI_OK && required);
    EXPECT("delete: gone already", KCSI_ERR_NOT_FOUND, "d.example.com",
           kcsi_host_csidriver_delete(h, "d.example.com", &err));
    EXPECT("delete: NULL", KCSI_ERR_INVALID_ARGUMENT, "name", kcsi_host_csidriver_delete(h, NULL, &err));
    kcsi_host_free(h);
    remove(kubeconfig);
}

/* "volumeAttachmentsFromHost": the controller's informer feeds the VolumeAttachments. */
static void test_fed_volume_attachments(const char *root) {
    const char *va = "{\"metadata\":{\"name\":\"csi-1\"},\"spec\":{\"attacher\":\"d.example.com\","
                     "\"nodeName\":\"n\",\"source\":{\"persistentVolumeName\":\"pv-1\"}},"
                     "\"status\":{\"attached\":true}}";
    char kubeconfig[512];
    if (!write_kubeconfig(root, "va-kubeconfig", kubeconfig, sizeof kubeconfig)) return;
    kcsi_host *h = NULL;
    snprintf(config, sizeof config,
             "{\"nodeName\":\"node-va\",\"rootDir\":\"%s/va\",\"kubeconfig\":\"%s\",\"volumeAttachmentsFromHost\":true}",
             root, kubeconfig);
    EXPECT("a node host fed VolumeAttachments", KCSI_ERR_INVALID_ARGUMENT, "volumeAttachmentsFromHost",
           kcsi_host_new(config, &h, &err));
    snprintf(config, sizeof config, "{\"role\":\"controller\",\"kubeconfig\":\"%s\"}", kubeconfig);
    CHECK(kcsi_host_new(config, &h, NULL) == KCSI_OK);
    if (h == NULL) return;
    EXPECT("apply on a controller host that watches them", KCSI_ERR_FAILED_PRECONDITION,
           "volumeAttachmentsFromHost", kcsi_host_volumeattachment_apply(h, va, &err));
    kcsi_host_free(h);
    h = NULL;
    snprintf(config, sizeof config,
             "{\"role\":\"controller\",\"kubeconfig\":\"%s\",\"volumeAttachmentsFromHost\":true}", kubeconfig);
    CHECK(kcsi_host_new(config, &h, NULL) == KCSI_OK);
    if (h == NULL) return;
    CHECK(kcsi_host_volumeattachments_synced(h, NULL) == KCSI_OK);
    CHECK(kcsi_host_volumeattachment_apply(h, va, NULL) == KCSI_OK);
    EXPECT("apply: NULL", KCSI_ERR_INVALID_ARGUMENT, "volumeattachment_json",
           kcsi_host_volumeattachment_apply(h, NULL, &err));
    EXPECT("apply: no name", KCSI_ERR_INVALID_ARGUMENT, "no metadata.name",
           kcsi_host_volumeattachment_apply(h, "{\"spec\":{\"attacher\":\"d\",\"nodeName\":\"n\",\"source\":{}}}", &err));
    CHECK(kcsi_host_volumeattachment_delete(h, "csi-1", NULL) == KCSI_OK);
    EXPECT("delete: gone already", KCSI_ERR_NOT_FOUND, "csi-1", kcsi_host_volumeattachment_delete(h, "csi-1", &err));
    EXPECT("delete: NULL", KCSI_ERR_INVALID_ARGUMENT, "name", kcsi_host_volumeattachment_delete(h, NULL, &err));
    EXPECT("synced: NULL host", KCSI_ERR_INVALID_ARGUMENT, NULL, kcsi_host_volumeattachments_synced(NULL, &err));
    kcsi_host_free(h);
    remove(kubeconfig);
}

static void test_register(const char *root, const char *socket, const char *driver) {
    kcsi_host *h = new_host(root, "node-reg");
    kcsi_error *err = NULL;
    const char *versions[] = {"0.3.0", "v1.2.0"};
    kcsi_result r = kcsi_register_plugin(h, driver, socket, versions, 2, 10000, &err);
    if (r != KCSI_OK) {
        fprintf(stderr, "register: %s: %s\n", kcsi_result_name(r), kcsi_error_message(err));
        kcsi_error_free(err);
    }
    CHECK(r == KCSI_OK);

    char *list = NULL;
    CHECK(kcsi_list_drivers(h, &list, NULL) == KCSI_OK);
    char want[512];
    snprintf(want, sizeof want, "\"name\":\"%s\"", driver);
    CHECK(list != NULL && strstr(list, want) != NULL);
    CHECK(list != NULL && strstr(list, "\"highestSupportedVersion\":\"1.2.0\"") != NULL);
    kcsi_string_free(list);

    EXPECT("same version again", KCSI_ERR_ALREADY_EXISTS, "higher supported version",
           kcsi_register_plugin(h, driver, socket, versions, 2, 10000, &err));

    CHECK(kcsi_deregister_plugin(h, driver, NULL) == KCSI_OK);
    EXPECT("deregister twice", KCSI_ERR_NOT_FOUND, driver,
           kcsi_deregister_plugin(h, driver, &err));

    /* A child handle outliving its host fails cleanly. */
    kcsi_mounter *m = NULL;
    char spec[512];
    snprintf(spec, sizeof spec,
             "{\"persistentVolume\":{\"metadata\":{\"name\":\"pv-c\"},\"spec\":{\"csi\":{\"driver\":\"%s\","
             "\"volumeHandle\":\"h\"}}},\"readOnly\":false}",
             driver);
    const char *pod = "{\"metadata\":{\"name\":\"p\",\"namespace\":\"default\",\"uid\":\"6f0a1d2e-0000-4000-8000-000000000001\"}}";
    err = NULL;
    r = kcsi_mounter_new(h, spec, pod, &m, &err);
    if (r != KCSI_OK) {
        fprintf(stderr, "mounter_new: %s: %s\n", kcsi_result_name(r), kcsi_error_message(err));
        kcsi_error_free(err);
    }
    CHECK(r == KCSI_OK && m != NULL);
    kcsi_host_free(h);
    if (m) {
            EXPECT("mounter after host free", KCSI_ERR_FAILED_PRECONDITION, "freed",
           kcsi_mounter_set_up(m, NULL, &err));
        /* One rule for every call on a child handle, cheap queries included. */
        char *path = NULL;
        EXPECT("mounter path after host free", KCSI_ERR_FAILED_PRECONDITION, "freed",
               kcsi_mounter_path(m, &path, &err));
        CHECK(path == NULL);
        kcsi_mounter_free(m);
    }
}

struct hanging_call {
    kcsi_host *h;
    const char *endpoint;
    kcsi_result result;
};

static void *register_against_silent_socket(void *arg) {
    struct hanging_call *c = arg;
    const char *v1[] = {"1.0.0"};
    kcsi_error *err = NULL;
    c->result = kcsi_register_plugin(c->h, "silent.example.com", c->endpoint, v1, 1, 1500, &err);
    kcsi_error_free(err);
    return NULL;
}

/* A host freed while another thread is inside a call on it: the call finishes (here it times
 * out against a socket that accepts connections but never answers); ASAN sees no
 * use-after-free. */
static void test_free_host_during_call(const char *root) {
    char sock[256];
    snprintf(sock, sizeof sock, "%s/silent.sock", root);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    strncpy(addr.sun_path, sock, sizeof addr.sun_path - 1);
    unlink(sock);
    CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&addr, sizeof addr) == 0 && listen(fd, 8) == 0);
    char endpoint[300];
    snprintf(endpoint, sizeof endpoint, "unix://%s", sock);
    struct hanging_call c = {.h = new_host(root, "node-free"), .endpoint = endpoint, .result = -1};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, register_against_silent_socket, &c) == 0);
    struct timespec pause = {.tv_sec = 0, .tv_nsec = 300 * 1000 * 1000};
    nanosleep(&pause, NULL);
    kcsi_host_free(c.h);
    pthread_join(t, NULL);
    CHECK(c.result == KCSI_ERR_TIMEOUT || c.result == KCSI_ERR_UNAVAILABLE);
    close(fd);
    unlink(sock);
}

static atomic_int log_count;

static void on_log(void *user_data, int32_t level, const char *target, const char *message) {
    (void)target;
    (void)message;
    if (level >= 0 && level <= 4 && user_data == &log_count) {
        atomic_fetch_add(&log_count, 1);
    }
}

static void test_log_callback(const char *root) {
    CHECK(kcsi_set_log_callback(on_log, &log_count, 4, NULL) == KCSI_OK);
    kcsi_host *h = new_host(root, "node-log");
    const char *v1[] = {"1.0.0"};
    CHECK(kcsi_validate_plugin(h, "log.example.com", "/tmp/log.sock", v1, 1, NULL) == KCSI_OK);
    CHECK(atomic_load(&log_count) > 0);
    CHECK(kcsi_set_log_callback(NULL, NULL, 1, NULL) == KCSI_OK);
    EXPECT("max_level 9", KCSI_ERR_INVALID_ARGUMENT, "max_level",
           kcsi_set_log_callback(on_log, NULL, 9, &err));
    kcsi_host_free(h);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s <driver socket> <driver name> <scratch dir>\n", argv[0]);
        return 2;
    }
    const char *socket = argv[1], *driver = argv[2], *root = argv[3];
#if defined(__SANITIZE_ADDRESS__)
    printf("asan: on\n"); /* scripts/test-c.sh checks this line to prove the ASAN build */
#endif
    test_version_and_result_names();
    test_errors_and_free_null();
    test_host_config(root);
    test_bad_input(root);
    test_controller_calls(root);
    test_fed_csidrivers(root);
    test_fed_volume_attachments(root);
    test_register(root, socket, driver);
    test_log_callback(root);
    test_free_host_during_call(root);
    printf("api_test: %d checks, %d failed\n", checks, failures);
    return failures == 0 ? 0 : 1;
}
