#pragma once
// The data-parallel run a command joins: `--distributed` (this process's place among mpirun's, README.md) and
// `--bucket-mb` (the gradients each all-reduce takes while the backward goes on, PyTorch DDP's bucket_cap_mb).
#include "cli/flags.hpp"
#include "distributed/world.hpp"

namespace mn::cli {

inline const Option kDistributed = {"distributed", "false", "",
                                    "data-parallel over the processes of mpirun, one Vulkan device each (README.md)"};
inline const Option kBucketMb = {"bucket-mb", "25", "MB",
                                 "with --distributed: MiB of gradients each all-reduce takes, while the backward "
                                 "goes on (PyTorch DDP's bucket_cap_mb)"};

// With --distributed, the run this process joins, its buckets --bucket-mb's; else null (and --bucket-mb an error).
distributed::World* join_world(const Flags& flags);

}  // namespace mn::cli
