#include "cli/world_arg.hpp"

namespace mn::cli {

distributed::World* join_world(const Flags& flags) {
    if (!flags.on("distributed")) {
        if (flags.given("bucket-mb")) throw Error("--bucket-mb is for --distributed");
        return nullptr;
    }
    const double mb = flags.real("bucket-mb", 1e-3, 1e6);
    distributed::World& world = distributed::World::join();
    world.set_bucket_bytes(static_cast<size_t>(mb * double(size_t(1) << 20)));
    return &world;
}

}  // namespace mn::cli
