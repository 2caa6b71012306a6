/*
 * kcsi C lifecycle test: drives every volume export of libkcsi through a whole lifecycle, as
 * a C node agent does, against the real hostpath driver: queries, attacher (device mount path,
 * stage, unstage), mounter (publish, metrics), reconstruction, unmounter, node expansion,
 * device-mount listing and unstage by handle, and a block volume (stage, map, metrics,
 * reconstruct, unmap, unstage). scripts/test-c.sh runs it plain, under ASAN and under valgrind,
 * and checks that the C tests together call every exported function.
 *
 * usage: lifecycle_test <driver socket> <driver name> <root dir> <fs volume id> <block volume id>
 * (the volumes are created by the caller with `kcsi create-volume`, the provisioner's job).
 */
#define _POSIX_C_SOURCE 200809L
#include <kcsi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

/* Copies the string value of "key" in a flat JSON object into buf ("" when absent). */
static void json_string(const char *json, const char *key, char *buf, size_t n) {
    char pattern[128];
    snprintf(pattern, sizeof pattern, "\"%s\":\"", key);
    buf[0] = '\0';
    const char *p = json ? strstr(json, pattern) : NULL;
    if (!p) return;
    p += strlen(pattern);
    const char *end = strchr(p, '"');
    size_t len = end ? (size_t)(end - p) : 0;
    if (len >= n) len = n - 1;
    memcpy(buf, p, len);
    buf[len] = '\0';
}

static int exists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

static const char *driver, *socket_path, *root;
static char spec[2048], block_spec[2048], pod[512];

static void test_queries(kcsi_host *h) {
    bool b = true;
    OK(kcsi_can_attach(h, spec, &b, &err));
    CHECK(!b); /* the standalone CSIDriver says attachRequired: false */
    b = true;
    OK(kcsi_driver_attach_required(h, driver, &b, &err));
    CHECK(!b);
    OK(kcsi_driver_attach_required(h, "no-csidriver.example.com", &b, &err));
    CHECK(b); /* no CSIDriver object: attach required, as upstream's skipAttach */
    kcsi_error *bad = NULL;
    CHECK(kcsi_driver_attach_required(h, "", &b, &bad) == KCSI_ERR_INVALID_ARGUMENT);
    kcsi_error_free(bad);
    bad = NULL;
    CHECK(kcsi_driver_attach_required(h, NULL, &b, &bad) == KCSI_ERR_INVALID_ARGUMENT);
    kcsi_error_free(bad);
    const uint64_t *generation = NULL;
    OK(kcsi_host_csidriver_generation(h, &generation, &err));
    CHECK(generation != NULL);
    CHECK(__atomic_load_n(generation, __ATOMIC_ACQUIRE) == 0); /* a config's CSIDrivers never change */
    bad = NULL;
    CHECK(kcsi_host_csidriver_generation(h, NULL, &bad) == KCSI_ERR_INVALID_ARGUMENT);
    kcsi_error_free(bad);
    OK(kcsi_can_device_mount(h, spec, &b, &err));
    CHECK(b);
    OK(kcsi_requires_remount(h, spec, &b, &err));
    CHECK(!b);
    OK(kcsi_supports_selinux_context_mount(h, spec, &b, &err));
    CHECK(!b); /* the SELinuxMount gates are off */
    b = true;
    OK(kcsi_verify_exhausted_resource(h, spec, &b, &err));
    CHECK(!b); /* no VolumeAttachment, no ResourceExhausted */
}

static void test_filesystem(kcsi_host *h, const char *handle) {
    kcsi_attacher *a = NULL;
    OK(kcsi_attacher_new(h, &a, &err));
    CHECK(a != NULL);

    /* Standalone: no VolumeAttachment to wait for; a transient error, nothing changed. */
    char *device = NULL;
    kcsi_error *werr = NULL;
    kcsi_result r = kcsi_attacher_wait_for_attach(a, spec, 1000, &device, &werr);
    CHECK(r != KCSI_OK && device == NULL && kcsi_error_class(werr) == KCSI_CLASS_TRANSIENT);
    kcsi_error_free(werr);

    char *staging = NULL;
    OK(kcsi_attacher_device_mount_path(a, spec, &staging, &err));
    CHECK(staging != NULL && strstr(staging, "/globalmount") != NULL);
    OK(kcsi_attacher_mount_device(a, spec, staging, NULL, &err));

    char *mounts = NULL;
    OK(kcsi_list_device_mounts(h, &mounts, &err));
    CHECK(mounts != NULL && strstr(mounts, handle) != NULL);
    kcsi_string_free(mounts);

    kcsi_mounter *m = NULL;
    OK(kcsi_mounter_new(h, spec, pod, &m, &err));
    char *path = NULL;
    OK(kcsi_mounter_path(m, &path, &err));
    OK(kcsi_mounter_set_up(m, NULL, &err));

    /* Really mounted: a file written through the pod's path is in the driver's volume. */
    char file[4096];
    snprintf(file, sizeof file, "%s/hello", path ? path : "");
    FILE *f = fopen(file, "w");
    CHECK(f != NULL);
    if (f) {
        fputs("through the bind mount\n", f);
        fclose(f);
    }

    char *metrics = NULL;
    OK(kcsi_mounter_metrics(m, &metrics, &err));
    CHECK(metrics != NULL && strstr(metrics, "\"capacityBytes\":") != NULL);
    kcsi_string_free(metrics);
    kcsi_mounter_free(m);

    bool resized = false;
    char opts[4096];
    snprintf(opts, sizeof opts,
             "{\"spec\":%s,\"deviceMountPath\":\"%s\",\"deviceStagePath\":\"%s\","
             "\"newSize\":\"32Mi\",\"oldSize\":\"16Mi\"}",
             spec, staging ? staging : "", staging ? staging : "");
    OK(kcsi_node_expand(h, opts, &resized, &err));
    CHECK(resized);

    /* Reconstruction from the pod volume dir's vol_data.json. */
    char voldir[4096];
    snprintf(voldir, sizeof voldir, "%s", path ? path : "");
    char *slash = strrchr(voldir, '/');
    if (slash) *slash = '\0';
    char *rec = NULL;
    OK(kcsi_construct_volume_spec(h, "pv-c", voldir, &rec, &err));
    CHECK(rec != NULL && strstr(rec, handle) != NULL);
    kcsi_string_free(rec);

    kcsi_unmounter *u = NULL;
    OK(kcsi_unmounter_new(h, "pv-c", "pod-c", &u, &err));
    OK(kcsi_unmounter_tear_down(u, &err));
    kcsi_unmounter_free(u);
    CHECK(!exists(voldir));

    OK(kcsi_attacher_unmount_device(a, staging, &err));
    kcsi_attacher_free(a);

    /* Stage again, then unstage by handle alone, as after a restart that lost the spec. */
    a = NULL;
    OK(kcsi_attacher_new(h, &a, &err));
    OK(kcsi_attacher_mount_device(a, spec, staging, NULL, &err));
    kcsi_attacher_free(a);
    OK(kcsi_unmount_device_by_handle(h, driver, handle, &err));
    char *left = NULL;
    OK(kcsi_list_device_mounts(h, &left, &err));
    CHECK(left != NULL && strstr(left, handle) == NULL);
    kcsi_string_free(left);
    kcsi_string_free(staging);
    kcsi_string_free(path);
}

static void test_block(kcsi_host *h, const char *handle) {
    kcsi_block_mapper *m = NULL;
    OK(kcsi_block_mapper_new(h, block_spec, pod, &m, &err));
    char *paths = NULL;
    OK(kcsi_block_mapper_paths(m, &paths, &err));
    char global[4096], publish_want[4096];
    json_string(paths, "globalMapPath", global, sizeof global);
    json_string(paths, "publishPath", publish_want, sizeof publish_want);
    CHECK(global[0] != '\0' && publish_want[0] != '\0');
    kcsi_string_free(paths);

    char *staging = NULL, *publish = NULL;
    OK(kcsi_block_mapper_set_up_device(m, &staging, &err));
    OK(kcsi_block_mapper_map_pod_device(m, &publish, &err));
    CHECK(publish != NULL && strcmp(publish, publish_want) == 0);
    struct stat st;
    CHECK(publish != NULL && stat(publish, &st) == 0 && S_ISBLK(st.st_mode));

    /* The kubelet's MapBlockVolume (its operation executor, not the plugin) binds the device
     * at <globalMapPath>/<podUID>, where the mapper's metrics measure it: do the same. */
    char link[4200];
    snprintf(link, sizeof link, "%s/pod-c", global);
    mkdir(global, 0750);
    int fd = open(link, O_CREAT | O_WRONLY, 0600);
    CHECK(fd >= 0);
    if (fd >= 0) close(fd);
    CHECK(publish != NULL && mount(publish, link, "none", MS_BIND, NULL) == 0);
    char *metrics = NULL;
    OK(kcsi_block_mapper_metrics(m, &metrics, &err));
    CHECK(metrics != NULL && strstr(metrics, "\"capacityBytes\":") != NULL);
    kcsi_string_free(metrics);
    CHECK(umount(link) == 0 && unlink(link) == 0);
    kcsi_block_mapper_free(m);

    char *rec = NULL;
    OK(kcsi_construct_block_volume_spec(h, "pod-c", "pv-c-block", global, &rec, &err));
    CHECK(rec != NULL && strstr(rec, handle) != NULL && strstr(rec, "\"volumeMode\":\"Block\""));
    kcsi_string_free(rec);

    kcsi_block_unmapper *u = NULL;
    OK(kcsi_block_unmapper_new(h, "pv-c-block", "pod-c", &u, &err));
    OK(kcsi_block_unmapper_unmap_pod_device(u, &err));
    OK(kcsi_block_unmapper_tear_down_device(u, global, "", &err));
    kcsi_block_unmapper_free(u);
    CHECK(publish != NULL && !exists(publish));
    kcsi_string_free(staging);
    kcsi_string_free(publish);
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: %s <driver socket> <driver name> <root dir> <fs volume id> <block volume id>\n", argv[0]);
        return 2;
    }
    socket_path = argv[1];
    driver = argv[2];
    root = argv[3];
    const char *fs_handle = argv[4], *block_handle = argv[5];

    pv_spec(spec, sizeof spec, "pv-c", driver, fs_handle, 0);
    pv_spec(block_spec, sizeof block_spec, "pv-c-block", driver, block_handle, 1);
    snprintf(pod, sizeof pod,
             "{\"metadata\":{\"name\":\"pod-c\",\"namespace\":\"default\",\"uid\":\"pod-c\"}}");

    char config[2048];
    snprintf(config, sizeof config,
             "{\"nodeName\":\"node-c\",\"rootDir\":\"%s\",\"csiDrivers\":[{\"metadata\":{\"name\":\"%s\"},"
             "\"spec\":{\"attachRequired\":false}}]}",
             root, driver);
    kcsi_host *h = NULL;
    OK(kcsi_host_new(config, &h, &err));
    if (!h) return 1;
    const char *versions[] = {"1.0.0"};
    OK(kcsi_register_plugin(h, driver, socket_path, versions, 1, 10000, &err));

    test_queries(h);
    test_filesystem(h, fs_handle);
    test_block(h, block_handle);

    OK(kcsi_deregister_plugin(h, driver, &err));
    kcsi_host_free(h);
    printf("lifecycle_test: %d checks, %d failed\n", checks, failures);
    return failures == 0 ? 0 : 1;
}
