/* libmeganeura_mpi.so: the few MPI calls of data-parallel training behind mpi_plugin.h's table, so that
 * only this library links MPI (CMake's find_package(MPI)). Counts past INT_MAX go in pieces. */
#include "mpi_plugin.h"

#include <limits.h>
#include <mpi.h>
#include <string.h>

static struct mn_mpi_plugin table;

enum { kPiece = INT_MAX / 8 }; /* elements per call: counts are ints in MPI */

static int init(void) {
    int provided = 0, err;
    if ((err = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided))) return err;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm local;
    if ((err = MPI_Comm_rank(MPI_COMM_WORLD, &table.rank)) || (err = MPI_Comm_size(MPI_COMM_WORLD, &table.size))) return err;
    /* the processes of this machine, to pick a device by the rank among them */
    if ((err = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, table.rank, MPI_INFO_NULL, &local))) return err;
    if ((err = MPI_Comm_rank(local, &table.local_rank)) || (err = MPI_Comm_size(local, &table.local_size))) return err;
    return MPI_Comm_free(&local);
}

static int allreduce_sum_f32(const float* send, float* receive, size_t count) {
    for (size_t at = 0; at < count; at += kPiece) {
        const int n = (int)(count - at < kPiece ? count - at : kPiece);
        const int err = MPI_Allreduce(send + at, receive + at, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        if (err) return err;
    }
    return 0;
}

static int broadcast(void* bytes, size_t count, int root) {
    for (size_t at = 0; at < count; at += kPiece) {
        const int n = (int)(count - at < kPiece ? count - at : kPiece);
        const int err = MPI_Bcast((char*)bytes + at, n, MPI_BYTE, root, MPI_COMM_WORLD);
        if (err) return err;
    }
    return 0;
}

static int allgather_u64(const uint64_t* mine, size_t count, uint64_t* all) {
    return MPI_Allgather(mine, (int)count, MPI_UINT64_T, all, (int)count, MPI_UINT64_T, MPI_COMM_WORLD);
}

static void error_string(int code, char* out, size_t size) {
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    if (MPI_Error_string(code, text, &length)) length = 0;
    text[length < MPI_MAX_ERROR_STRING ? length : MPI_MAX_ERROR_STRING - 1] = 0;
    strncpy(out, length ? text : "unknown MPI error", size - 1);
    out[size - 1] = 0;
}

static int finalize(void) { return MPI_Finalize(); }

struct mn_mpi_plugin* mn_mpi_plugin_table(void) {
    table.version = MN_MPI_PLUGIN_VERSION;
    table.init = init;
    table.allreduce_sum_f32 = allreduce_sum_f32;
    table.broadcast = broadcast;
    table.allgather_u64 = allgather_u64;
    table.error_string = error_string;
    table.finalize = finalize;
    return &table;
}
