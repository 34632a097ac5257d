/*
 * replay_main.c — main() for the fuzz targets outside libFuzzer: runs
 * LLVMFuzzerTestOneInput once on each file named on the command line (a
 * directory: on each file in it, in name order), so a plain gcc build, and
 * its ASan/UBSan and TSan passes, replay the seed corpora and the crash
 * regressions (ctest fuzz_replay_<target>). Exits 1 if a file cannot be
 * read; a crash ends the process like it would under libFuzzer.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return 1;
    }
    size_t cap = 4096, n = 0, got;
    uint8_t *buf = malloc(cap);
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            uint8_t *b = realloc(buf, cap * 2);
            if (!b) free(buf);
            buf = b;
            cap *= 2;
        }
    }
    int err = ferror(f);
    fclose(f);
    if (!buf || err) {
        free(buf);
        fprintf(stderr, "replay: cannot read %s\n", path);
        return 1;
    }
    /* an exact-size copy, so ASan sees a read past the input's end */
    uint8_t *exact = malloc(n ? n : 1);
    if (!exact) {
        free(buf);
        return 1;
    }
    memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 0;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int run_path(const char *path, int *count) {
    struct stat sb;
    if (stat(path, &sb) != 0) {
        fprintf(stderr, "replay: no such file %s\n", path);
        return 1;
    }
    if (!S_ISDIR(sb.st_mode)) {
        (*count)++;
        return run_file(path);
    }
    DIR *d = opendir(path);
    if (!d) return 1;
    char **names = NULL;
    size_t n = 0, cap = 0;
    int bad = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **nn = realloc(names, cap * sizeof *names);
            if (!nn) {
                bad = 1;
                break;
            }
            names = nn;
        }
        size_t len = strlen(path) + strlen(e->d_name) + 2;
        if (!(names[n] = malloc(len))) {
            bad = 1;
            break;
        }
        snprintf(names[n++], len, "%s/%s", path, e->d_name);
    }
    closedir(d);
    if (n) qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 0; i < n; i++) {
        if (!bad) bad = run_path(names[i], count);
        free(names[i]);
    }
    free(names);
    return bad;
}

int main(int argc, char **argv) {
    int count = 0, bad = 0;
    for (int i = 1; i < argc && !bad; i++) bad = run_path(argv[i], &count);
    printf("replay: %d input(s)%s\n", count, bad ? ", stopped at an unreadable one" : ", all ran");
    return bad;
}
