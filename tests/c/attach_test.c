/*
 * kcsi C attach test: the attach/detach exports for real, as kube-controller-manager and the
 * kubelet call them, against a real kube-apiserver, the real external-attacher and the real
 * hostpath driver started with -enable-attach. scripts/test-c.sh runs it plain, under ASAN and
 * under valgrind, and after each phase reads the VolumeAttachment from the API server and the
 * ControllerPublishVolume / ControllerUnpublishVolume calls from the driver's log itself.
 *
 * usage: attach_test attach|detach <kubeconfig> <driver name> <node> <root dir> <pv name> <volume id>
 *   attach: a controller host attaches the PersistentVolume's volume to <node>
 *     (kcsi_attacher_attach returns once the external-attacher set status.attached) and
 *     reports it attached (kcsi_attacher_volumes_are_attached); a node host on <node> finds the
 *     attachment (kcsi_attacher_wait_for_attach). Prints "attached <VolumeAttachment name>".
 *   detach: a fresh controller host, as after a restart, detaches (kcsi_attacher_detach returns
 *     once the attachment is gone) and reports it not attached; the node host's
 *     wait_for_attach fails, transient. Prints "detached".
 */
#define _POSIX_C_SOURCE 200809L
#include <kcsi.h>

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "check.h"

/* Generous for valgrind, where the host's TLS handshakes alone take seconds. */
#define TIMEOUT_MS 120000

static const char *kubeconfig, *driver, *node, *root;
static char spec[1024], specs[1100], volume_name[512];

/* A controller host whose VolumeAttachment and CSIDriver watches have synced (attach waits for
 * the external-attacher on the first, and reads attachRequired from the second); NULL when it
 * cannot be made. */
static kcsi_host *controller_host(void) {
    char config[1024];
    snprintf(config, sizeof config, "{\"role\":\"controller\",\"kubeconfig\":\"%s\"}", kubeconfig);
    kcsi_host *h = NULL;
    OK(kcsi_host_new(config, &h, &err));
    if (!h) return NULL;
    bool synced = false;
    for (int i = 0; i < TIMEOUT_MS / 100 && !synced; i++) {
        char *status = NULL;
        OK(kcsi_host_status(h, &status, &err));
        synced = status && strstr(status, "\"volumeAttachmentsSynced\":true") &&
                 strstr(status, "\"csiDriversSynced\":true");
        kcsi_string_free(status);
        if (!synced) nanosleep(&(struct timespec){.tv_nsec = 100 * 1000 * 1000}, NULL);
    }
    CHECK(synced);
    return h;
}

/* A synced controller host and its attacher in *h and *a; false (nothing left to free) when
 * either cannot be made. */
static bool controller_attacher(kcsi_host **h, kcsi_attacher **a) {
    *a = NULL;
    *h = controller_host();
    if (*h) OK(kcsi_attacher_new(*h, a, &err));
    if (*a) return true;
    kcsi_host_free(*h);
    return false;
}

/* kcsi_attacher_volumes_are_attached for the one volume: its JSON answer. */
static void check_attached(kcsi_attacher *a, const char *want) {
    char *out = NULL;
    OK(kcsi_attacher_volumes_are_attached(a, specs, node, &out, &err));
    CHECK(out != NULL && strcmp(out, want) == 0);
    if (out && strcmp(out, want) != 0) fprintf(stderr, "volumes_are_attached: %s, want %s\n", out, want);
    kcsi_string_free(out);
}

/* The node host's kcsi_attacher_wait_for_attach: its result, and the name it wrote. */
static kcsi_result node_wait_for_attach(char **name, kcsi_error **err_out) {
    char config[1024];
    snprintf(config, sizeof config, "{\"nodeName\":\"%s\",\"rootDir\":\"%s\",\"kubeconfig\":\"%s\"}", node,
             root, kubeconfig);
    kcsi_host *h = NULL;
    OK(kcsi_host_new(config, &h, &err));
    if (!h) return KCSI_ERR_INTERNAL;
    kcsi_attacher *a = NULL;
    OK(kcsi_attacher_new(h, &a, &err));
    kcsi_result r = a ? kcsi_attacher_wait_for_attach(a, spec, TIMEOUT_MS, name, err_out) : KCSI_ERR_INTERNAL;
    kcsi_attacher_free(a);
    kcsi_host_free(h);
    return r;
}

static void attach(void) {
    kcsi_host *h;
    kcsi_attacher *a;
    if (!controller_attacher(&h, &a)) return;
    char *name = NULL;
    OK(kcsi_attacher_attach(a, spec, node, TIMEOUT_MS, &name, &err));
    CHECK(name != NULL && strncmp(name, "csi-", 4) == 0);
    check_attached(a, "[true]");
    kcsi_attacher_free(a);
    kcsi_host_free(h);

    char *found = NULL;
    OK(node_wait_for_attach(&found, &err));
    CHECK(name != NULL && found != NULL && strcmp(found, name) == 0);
    kcsi_string_free(found);
    if (name) printf("attached %s\n", name);
    kcsi_string_free(name);
}

static void detach(void) {
    kcsi_host *h;
    kcsi_attacher *a;
    if (!controller_attacher(&h, &a)) return;
    OK(kcsi_attacher_detach(a, volume_name, node, TIMEOUT_MS, &err));
    check_attached(a, "[false]");
    kcsi_attacher_free(a);
    kcsi_host_free(h);

    char *found = NULL;
    kcsi_error *werr = NULL;
    CHECK(node_wait_for_attach(&found, &werr) != KCSI_OK);
    CHECK(found == NULL && kcsi_error_class(werr) == KCSI_CLASS_TRANSIENT);
    kcsi_error_free(werr);
    printf("detached\n");
}

int main(int argc, char **argv) {
    if (argc != 8 || (strcmp(argv[1], "attach") != 0 && strcmp(argv[1], "detach") != 0)) {
        fprintf(stderr, "usage: %s attach|detach <kubeconfig> <driver name> <node> <root dir> <pv name> <volume id>\n",
                argv[0]);
        return 2;
    }
    kubeconfig = argv[2];
    driver = argv[3];
    node = argv[4];
    root = argv[5];
    const char *pv = argv[6], *handle = argv[7];
    pv_spec(spec, sizeof spec, pv, driver, handle, 0);
    snprintf(specs, sizeof specs, "[%s]", spec);
    snprintf(volume_name, sizeof volume_name, "%s^%s", driver, handle);

    if (strcmp(argv[1], "attach") == 0) {
        attach();
    } else {
        detach();
    }
    printf("attach_test %s: %d checks, %d failed\n", argv[1], checks, failures);
    return failures == 0 ? 0 : 1;
}
