#include "distributed/world.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <utility>

#include "distributed/mpi_plugin.h"
#include "runtime/runtime.hpp"

namespace mn::distributed {

namespace {

constexpr const char* kPlugin = "libmeganeura_mpi.so";

// MEGANEURA_MPI_PLUGIN, else next to the executable (the build folder), else in ../lib (an install).
mn_mpi_plugin* load_plugin() {
    std::vector<std::string> tried;
    if (const char* p = std::getenv("MEGANEURA_MPI_PLUGIN"); p && *p) {
        tried.push_back(p);
    } else {
        std::error_code ec;
        const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
        tried.push_back((exe.parent_path() / kPlugin).string());
        tried.push_back((exe.parent_path().parent_path() / "lib" / kPlugin).string());
    }
    std::string why;
    for (const std::string& path : tried) {
        if (!std::filesystem::exists(path)) continue;
        // Global: Open MPI's own components, loaded later, resolve libmpi's symbols through it.
        void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
        if (!lib) {
            why = dlerror();
            continue;
        }
        auto table = reinterpret_cast<mn_mpi_plugin* (*)()>(dlsym(lib, "mn_mpi_plugin_table"));
        if (table && table()->version == MN_MPI_PLUGIN_VERSION) return table();
        why = path + " is not a meganeura MPI plugin of this version";
    }
    std::string where;
    for (const std::string& path : tried) where += (where.empty() ? "" : " or ") + path;
    throw Error("--distributed needs MPI: " +
                (why.empty() ? "no " + std::string(kPlugin) + " at " + where +
                                   " (build meganeura where CMake finds MPI: apt-get install libopenmpi-dev openmpi-bin; "
                                   "or set MEGANEURA_MPI_PLUGIN)"
                             : why));
}

uint64_t fnv1a(const std::vector<float>& v) {
    uint64_t h = 1469598103934665603ull;
    const auto* b = reinterpret_cast<const unsigned char*>(v.data());
    for (size_t i = 0; i < v.size() * sizeof(float); ++i) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

}  // namespace

World& World::join() {
    static World world;
    if (!world.mpi_) {
        mn_mpi_plugin* mpi = load_plugin();
        world.mpi_ = mpi;
        world.check(mpi->init(), "MPI_Init_thread");
    }
    return world;
}

int World::rank() const { return mpi_->rank; }
int World::size() const { return mpi_->size; }
int World::local_rank() const { return mpi_->local_rank; }

void World::check(int code, const char* call) const {
    if (code == 0) return;
    char text[512];
    mpi_->error_string(code, text, sizeof text);
    throw Error(std::string(call) + " failed on rank " + std::to_string(mpi_->rank) + ": " + text);
}

Device World::open_device() const {
    if (const char* d = std::getenv("MEGANEURA_DEVICE"); d && *d) return Device::open(d);
    // Devices in selection order (GPUs first); the CPU device only where there is no GPU.
    const std::vector<rt::DeviceCaps> all = rt::Context::enumerate();
    size_t gpus = 0;
    while (gpus < all.size() && all[gpus].type != "cpu") ++gpus;
    const size_t count = gpus ? gpus : all.size();
    if (count == 0) throw Error("no Vulkan device");
    return Device::open(std::to_string(static_cast<size_t>(local_rank()) % count));
}

GradientExchange World::exchange() {
    return GradientExchange{
        .all_reduce =
            [this](const std::vector<GradientExchange::Span>& spans) {
                const auto t0 = std::chrono::steady_clock::now();
                for (size_t k = 0; k < spans.size();) {
                    const GradientExchange::Span first = spans[k];
                    size_t count = first.count;
                    // Adjacent in both buffers: one call for the bucket.
                    while (++k < spans.size() && spans[k].send == first.send + count &&
                           spans[k].receive == first.receive + count && (count + spans[k].count) * 4 <= bucket_bytes_)
                        count += spans[k].count;
                    check(mpi_->allreduce_sum_f32(first.send, first.receive, count), "MPI_Allreduce");
                }
                reduce_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            },
        .processes = size(),
        .bucket_bytes = bucket_bytes_};
}

void World::broadcast(Session& s, const std::vector<std::string>& names) const {
    for (const std::string& name : names) {
        std::vector<float> v = s.get(name);
        check(mpi_->broadcast(v.data(), v.size() * sizeof(float), 0), "MPI_Bcast");
        if (!root()) s.set(name, v);
    }
}

void World::check_replicas(const Session& s, const std::vector<std::string>& names, int64_t step) const {
    const char* on = std::getenv("MEGANEURA_CHECK_REPLICAS");
    if (!on || std::strcmp(on, "1") != 0) return;
    std::vector<uint64_t> mine;
    for (const std::string& name : names) mine.push_back(fnv1a(s.get(name)));
    std::vector<uint64_t> all(mine.size() * static_cast<size_t>(size()));
    check(mpi_->allgather_u64(mine.data(), mine.size(), all.data()), "MPI_Allgather");
    for (int r = 1; r < size(); ++r) {
        for (size_t i = 0; i < names.size(); ++i) {
            if (all[static_cast<size_t>(r) * names.size() + i] != all[i])
                throw Error("MEGANEURA_CHECK_REPLICAS: after step " + std::to_string(step) + ", rank " + std::to_string(r) +
                            "'s '" + names[i] + "' differs from rank 0's");
        }
    }
}

double World::take_reduce_seconds() { return std::exchange(reduce_seconds_, 0.0); }

void World::finish() {
    if (mpi_) check(mpi_->finalize(), "MPI_Finalize");
    mpi_ = nullptr;
}

}  // namespace mn::distributed
