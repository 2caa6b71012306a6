/*
 * Resolves every contract function (tests/c/contract_symbols.txt) in libkcsi at run time, as a
 * host that dlopen()s the library does, and lists exactly the ones missing. It casts with the
 * function-pointer types of kcsi_dlopen.h and links nothing of libkcsi.
 *
 * usage: dlopen_test <libkcsi.so path> <contract_symbols.txt>
 */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "kcsi_dlopen.h"

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s <libkcsi.so> <contract_symbols.txt>\n", argv[0]);
        return 2;
    }
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
        return 1;
    }
    FILE *f = fopen(argv[2], "r");
    if (!f) {
        perror(argv[2]);
        return 1;
    }
    char line[256];
    int total = 0, missing = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, " \t\r\n")] = 0;
        if (line[0] == 0 || line[0] == '#') {
            continue;
        }
        total++;
        dlerror();
        void *sym = dlsym(lib, line);
        if (sym == NULL) {
            missing++;
            printf("MISSING %s\n", line);
        }
    }
    fclose(f);
    /* The one static string every build has: prove a resolved symbol is callable. */
    kcsi_version_fn version = NULL;
    *(void **)&version = dlsym(lib, "kcsi_version");
    if (version) {
        printf("dlopen_test: libkcsi %s: %d of %d contract functions resolved\n", version(), total - missing,
               total);
    }
    dlclose(lib);
    return missing == 0 && total > 0 ? 0 : 1;
}
