/*
 * fuzz.h — shared by the libFuzzer targets tests/fuzz/fuzz_<target>.c and
 * their replay driver (replay_main.c): the libFuzzer entry point and a
 * helper that puts the fuzzed bytes in a file, since pipit's readers take
 * paths. See docs/fuzzing.md.
 */
#ifndef PIPIT_FUZZ_H
#define PIPIT_FUZZ_H

#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* What each target defines (libFuzzer's interface). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Writes data[0..size) to "$TMPDIR/pipit_fuzz_<pid>_<name>" (truncating it;
 * the same path on every call of one process) and returns the path, or NULL
 * if the file cannot be written (the input is then skipped). The file is
 * removed at exit. name is a string literal (its suffix, e.g. ".bin", is
 * what some readers look at). */
#define PIPIT_FUZZ_MAX_FILES 4
static char pipit_fuzz_paths[PIPIT_FUZZ_MAX_FILES][512];

static inline void pipit_fuzz_cleanup(void) {
    for (int i = 0; i < PIPIT_FUZZ_MAX_FILES; i++)
        if (pipit_fuzz_paths[i][0]) unlink(pipit_fuzz_paths[i]);
}

static inline const char *pipit_fuzz_file(const char *name, const uint8_t *data, size_t size) {
    static int registered;
    int slot = -1;
    char want[512];
    const char *base = getenv("TMPDIR");
    snprintf(want, sizeof want, "%s/pipit_fuzz_%d_%s", base && *base ? base : "/tmp", (int)getpid(),
             name);
    for (int i = 0; i < PIPIT_FUZZ_MAX_FILES && slot < 0; i++)
        if (!pipit_fuzz_paths[i][0] || strcmp(pipit_fuzz_paths[i], want) == 0) slot = i;
    if (slot < 0) return NULL;
    if (!pipit_fuzz_paths[slot][0]) memcpy(pipit_fuzz_paths[slot], want, sizeof want);
    if (!registered) {
        registered = 1;
        atexit(pipit_fuzz_cleanup);
    }
    int fd = open(want, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return NULL;
    size_t done = 0;
    while (done < size) {
        ssize_t w = write(fd, data + done, size - done);
        if (w <= 0) {
            close(fd);
            return NULL;
        }
        done += (size_t)w;
    }
    close(fd);
    return pipit_fuzz_paths[slot];
}

#endif
