#pragma once
// distributed/: data-parallel training across processes, one per Vulkan device, on MPI (`meganeura train
// --distributed` and `finetune --distributed` under mpirun). Above the compiler: it hands a Session the
// all-reduce its step calls between backward and update (CompileOptions::data_parallel), and moves
// parameters between processes; the lower layers know nothing of MPI. MPI itself is behind a plugin
// loaded at run time (mpi_plugin.h says why).
#include <cstdint>
#include <string>
#include <vector>

#include "meganeura/session.hpp"

struct mn_mpi_plugin;

namespace mn::distributed {

class World {
public:
    // Joins the run: loads the MPI plugin and initializes MPI, once per process. Throws mn::Error when
    // the plugin is missing (a build without MPI, or libmpi not installed) or MPI fails to start.
    static World& join();

    int rank() const;
    int size() const;
    int local_rank() const;  // among the processes of this machine
    bool root() const { return rank() == 0; }

    // The Vulkan device of this process: MEGANEURA_DEVICE where it is set, else the local rank's among
    // the machine's GPUs (modulo their count; every rank gets the CPU device where there is no GPU).
    Device open_device() const;

    // What CompileOptions::data_parallel takes: buckets of set_bucket_bytes' gradients (25 MiB, PyTorch DDP's
    // default), each reduced while the backward's later segments run, one MPI_Allreduce per run of adjacent
    // tensors of up to that size.
    GradientExchange exchange();
    void set_bucket_bytes(size_t bytes) { bucket_bytes_ = bytes; }

    // Rank 0's values of `names` (parameters) copied into every other rank's session.
    void broadcast(Session& s, const std::vector<std::string>& names) const;

    // MEGANEURA_CHECK_REPLICAS=1: after a step, every rank's `names` must hold rank 0's bits, else an
    // mn::Error names the step, the rank and the tensor. A no-op when the variable is unset.
    void check_replicas(const Session& s, const std::vector<std::string>& names, int64_t step) const;

    // Seconds spent in the gradients' all-reduce since the last call (the time a step waited on it).
    double take_reduce_seconds();

    // MPI_Finalize after a run that succeeded. A process that fails exits without it, so that mpirun
    // ends the other ranks instead of leaving them waiting in a collective.
    void finish();

private:
    World() = default;
    void check(int code, const char* call) const;
    mn_mpi_plugin* mpi_ = nullptr;
    double reduce_seconds_ = 0;
    size_t bucket_bytes_ = size_t(25) << 20;
};

}  // namespace mn::distributed
