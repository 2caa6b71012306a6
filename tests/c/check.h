/* The C tests' assertions: CHECK counts every check and reports each failure by line, OK does
 * the same for a kcsi call that must succeed; the test's exit status comes from `failures`. */
#ifndef KCSI_TEST_CHECK_H
#define KCSI_TEST_CHECK_H

#include <kcsi.h>

#include <stdio.h>
#include <string.h>

static int failures = 0;
static int checks = 0;

#define CHECK(cond)                                                                   \
    do {                                                                              \
        checks++;                                                                     \
        if (!(cond)) {                                                                \
            failures++;                                                               \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                             \
    } while (0)

/* Runs `call`, which must succeed; on failure prints kcsi's error and counts it. */
#define OK(call)                                                                        \
    do {                                                                                \
        kcsi_error *err = NULL;                                                         \
        kcsi_result r_ = (call);                                                        \
        checks++;                                                                       \
        if (r_ != KCSI_OK) {                                                            \
            failures++;                                                                 \
            fprintf(stderr, "%s:%d: %s: %s: %s\n", __FILE__, __LINE__, #call,           \
                    kcsi_result_name(r_), err ? kcsi_error_message(err) : "(no error)"); \
        }                                                                               \
        kcsi_error_free(err);                                                           \
    } while (0)

/* Writes the JSON of a ReadWriteOnce CSI PersistentVolume spec (block: volumeMode Block) into buf. */
static inline void pv_spec(char *buf, size_t size, const char *pv, const char *driver, const char *handle, int block) {
    snprintf(buf, size,
             "{\"persistentVolume\":{\"metadata\":{\"name\":\"%s\"},\"spec\":{\"accessModes\":"
             "[\"ReadWriteOnce\"],%s\"csi\":{\"driver\":\"%s\",\"volumeHandle\":\"%s\"}}}}",
             pv, block ? "\"volumeMode\":\"Block\"," : "", driver, handle);
}

#endif
