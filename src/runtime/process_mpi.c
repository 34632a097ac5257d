/*
 * process_mpi.c — the process layer of an MPI build: pipit_init starts MPI
 * when (and only when) the program was launched by an MPI launcher; a plain
 * `./pipit train` never touches MPI and is one process. (process.c has the
 * build without MPI.)
 */
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "pipit.h"
#include "runtime/agree.h"
#include "util/common.h"

#ifdef PIPIT_HAVE_MPI
#include <mpi.h>

static pthread_mutex_t init_mu = PTHREAD_MUTEX_INITIALIZER;
static int done;          /* pipit_init ran (successfully) */
static int we_initialised; /* pipit called MPI_Init_thread, so finalises */
static int proc_rank, proc_count = 1;

/* Launched by mpirun/mpiexec/srun? Open MPI, PMIx, and PMI(-2) launchers
 * set these in every process they start. */
static int launched_by_mpi(void) {
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) return 1;
    }
    return 0;
}

pipit_status pipit_init(int *argc, char ***argv) {
    pipit_status s = PIPIT_STATUS_OK;
    pthread_mutex_lock(&init_mu);
    if (done) goto out;
    int inited = 0, fin = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&fin);
    if (fin) {
        s = pipit__err(PIPIT_STATUS_MISUSE, "pipit_init: MPI was already finalised");
        goto out;
    }
    if (!inited && !launched_by_mpi()) { /* one process, ranks are threads */
        done = 1;
        goto out;
    }
    /* The transport's progress thread and the rank's threads call MPI
     * concurrently (transport_mpi.c). */
    int provided = 0;
    if (inited) {
        MPI_Query_thread(&provided);
    } else {
        int rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
        if (rc != MPI_SUCCESS) {
            s = pipit__err(PIPIT_STATUS_RUNTIME, "pipit_init: MPI_Init_thread failed (error %d)", rc);
            goto out;
        }
        we_initialised = 1;
    }
    if (provided < MPI_THREAD_MULTIPLE) {
        s = pipit__err(PIPIT_STATUS_RUNTIME,
                       "pipit_init: MPI provides thread level %d, pipit needs MPI_THREAD_MULTIPLE (%d); use an MPI "
                       "built with thread support",
                       provided, MPI_THREAD_MULTIPLE);
        goto out;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &proc_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &proc_count);
    done = 1;
out:
    pthread_mutex_unlock(&init_mu);
    return s;
}

/* The agreement exchanges' communicator (agree.c): created by the first
 * exchange, which every process reaches at the same point. */
static MPI_Comm agree_comm = MPI_COMM_NULL;

pipit_status pipit__proc_allgather(const void *mine, size_t n, void *all) {
    if (proc_count <= 1) {
        memcpy(all, mine, n);
        return PIPIT_STATUS_OK;
    }
    if (n > INT_MAX) return pipit__err(PIPIT_STATUS_INVALID, "agreement record of %zu bytes is too large", n);
    int rc = agree_comm == MPI_COMM_NULL ? MPI_Comm_dup(MPI_COMM_WORLD, &agree_comm) : MPI_SUCCESS;
    if (rc == MPI_SUCCESS) rc = MPI_Allgather(mine, (int)n, MPI_BYTE, all, (int)n, MPI_BYTE, agree_comm);
    if (rc != MPI_SUCCESS) {
        char text[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, text, &len);
        return pipit__err(PIPIT_STATUS_RUNTIME, "the processes could not exchange their agreement records: %s", text);
    }
    return PIPIT_STATUS_OK;
}

void pipit_finalize(void) {
    pthread_mutex_lock(&init_mu);
    int ended = 0;
    if (agree_comm != MPI_COMM_NULL && (MPI_Finalized(&ended), !ended)) MPI_Comm_free(&agree_comm);
    agree_comm = MPI_COMM_NULL;
    if (we_initialised) {
        int fin = 0;
        MPI_Finalized(&fin);
        if (!fin) MPI_Finalize();
        we_initialised = 0;
    }
    proc_rank = 0;
    proc_count = 1;
    pthread_mutex_unlock(&init_mu);
}

/* Before pipit_init these initialise (as pipit_compile would). */
int pipit_process_rank(void) {
    if (!done) (void)pipit_init(NULL, NULL);
    return proc_rank;
}

int pipit_process_count(void) {
    if (!done) (void)pipit_init(NULL, NULL);
    return proc_count;
}

#endif
