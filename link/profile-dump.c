/* Linked only into the profiling build of scripts/hot-symbols.sh. The kubelet and the
 * controller never exit through libc's exit (Go ends a process with exit_group), so LLVM's
 * profile runtime would never write its counters: this thread writes them every 500 ms to
 * $KCSI_PROFILE_DIR/<pid>.profraw, through a temporary file, so a kill leaves a whole one. */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

void __llvm_profile_set_filename(const char *name);
int __llvm_profile_write_file(void);

static void *dump(void *dir) {
    char tmp[PATH_MAX], done[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s/%d.profraw.tmp", (const char *)dir, (int)getpid());
    snprintf(done, sizeof done, "%s/%d.profraw", (const char *)dir, (int)getpid());
    for (;;) {
        usleep(500 * 1000);
        __llvm_profile_set_filename(tmp); /* truncates it */
        if (__llvm_profile_write_file() == 0)
            rename(tmp, done);
    }
    return 0;
}

__attribute__((constructor)) static void start_dump(void) {
    const char *dir = getenv("KCSI_PROFILE_DIR");
    pthread_t t;
    if (dir && pthread_create(&t, 0, dump, (void *)dir) == 0)
        pthread_detach(t);
}
