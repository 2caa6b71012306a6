/*
 * A minimal kcsi host: creates a host, registers the CSI driver whose socket is given, prints
 * the registered drivers and the host status, and deregisters it.
 *
 * Build against an installed kcsi:
 *   cc -std=c11 host.c $(pkg-config --cflags --libs kcsi) -o kcsi-host
 * Run:
 *   ./kcsi-host <driver name> <driver socket> <root dir> [node name]
 */
#include <kcsi.h>

#include <stdio.h>

static int fail(const char *what, kcsi_result r, kcsi_error *err) {
    fprintf(stderr, "%s: %s: %s\n", what, kcsi_result_name(r), err ? kcsi_error_message(err) : "");
    kcsi_error_free(err);
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s <driver name> <driver socket> <root dir> [node name]\n", argv[0]);
        return 2;
    }
    const char *driver = argv[1], *socket = argv[2], *root = argv[3];
    const char *node = argc > 4 ? argv[4] : "node-1";
    printf("kcsi %s (C API %d)\n", kcsi_version(), KCSI_API_VERSION);

    char config[4096];
    /* Standalone host (no kubeconfig). Paths with quotes would need JSON escaping. */
    snprintf(config, sizeof config, "{\"nodeName\":\"%s\",\"rootDir\":\"%s\"}", node, root);
    kcsi_host *host = NULL;
    kcsi_error *err = NULL;
    kcsi_result r = kcsi_host_new(config, &host, &err);
    if (r != KCSI_OK) {
        return fail("kcsi_host_new", r, err);
    }

    const char *versions[] = {"1.0.0"};
    r = kcsi_register_plugin(host, driver, socket, versions, 1, 30000, &err);
    if (r != KCSI_OK) {
        kcsi_host_free(host);
        return fail("kcsi_register_plugin", r, err);
    }

    char *json = NULL;
    if ((r = kcsi_list_drivers(host, &json, &err)) != KCSI_OK) {
        kcsi_host_free(host);
        return fail("kcsi_list_drivers", r, err);
    }
    printf("drivers: %s\n", json);
    kcsi_string_free(json);

    if ((r = kcsi_host_status(host, &json, &err)) != KCSI_OK) {
        kcsi_host_free(host);
        return fail("kcsi_host_status", r, err);
    }
    printf("status: %s\n", json);
    kcsi_string_free(json);

    r = kcsi_deregister_plugin(host, driver, &err);
    kcsi_host_free(host);
    if (r != KCSI_OK) {
        return fail("kcsi_deregister_plugin", r, err);
    }
    printf("deregistered %s\n", driver);
    return 0;
}
