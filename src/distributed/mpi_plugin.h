/* The MPI calls meganeura makes, as a table of C functions in a plugin (libmeganeura_mpi.so, built from
 * mpi_plugin.c where CMake finds MPI) that the command loads only for --distributed: the command itself
 * keeps no dependency beyond libvulkan.so.1, so the one binary runs on machines without MPI, and a
 * build without MPI still builds. Every call returns 0 or an MPI error code (error_string names it). */
#ifndef MEGANEURA_MPI_PLUGIN_H
#define MEGANEURA_MPI_PLUGIN_H
#include <stddef.h>
#include <stdint.h>

#define MN_MPI_PLUGIN_VERSION 1

struct mn_mpi_plugin {
    int version; /* MN_MPI_PLUGIN_VERSION */
    int (*init)(void);
    int rank, size, local_rank, local_size; /* set by init */
    /* receive = the sum of every process's send, the same bits in every process (MPI_Allreduce) */
    int (*allreduce_sum_f32)(const float* send, float* receive, size_t count);
    int (*broadcast)(void* bytes, size_t count, int root);
    /* all = every process's `count` values, rank by rank */
    int (*allgather_u64)(const uint64_t* mine, size_t count, uint64_t* all);
    void (*error_string)(int code, char* out, size_t size);
    int (*finalize)(void);
};

/* The plugin's one exported symbol. */
struct mn_mpi_plugin* mn_mpi_plugin_table(void);

#endif
