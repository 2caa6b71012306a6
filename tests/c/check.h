/* The C tests' one assertion: CHECK counts every check and reports each failure by line; the
 * test's exit status comes from `failures`. */
#ifndef KCSI_TEST_CHECK_H
#define KCSI_TEST_CHECK_H

#include <stdio.h>

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

#endif
