// Dispatches and barriers of SmolLM2's cached programs (a prefill, or a decode step at tokens = 1) for a
// device profile, without its device: the ordered, hoisted schedule, whose levels after the hoisted steps
// stand in for barriers; or, with the profile "device", the SessionStats of a session compiled on the device
// here (its barriers are the levels and the uploads' one). The counts in bench/results/*-kv-inplace-* come
// from it, at each commit compared (the same file built against that commit's library).
//
//   build/meganeura_cached_counts tiny|full CACHE TOKENS PROFILE|device
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include "common/caps_profiles.hpp"
#include "compiler/program_kernels.hpp"
#include "meganeura/meganeura.hpp"
#include "models/smollm2.hpp"
#include "optimize/optimize.hpp"

int main(int argc, char** argv) {
    using namespace mn;
    if (argc != 5) {
        std::fprintf(stderr, "usage: %s tiny|full CACHE TOKENS PROFILE|device\n", argv[0]);
        return 1;
    }
    try {
        const std::string size = argv[1], profile = argv[4];
        const int64_t cache = std::atoll(argv[2]), tokens = std::atoll(argv[3]);
        models::LlamaConfig c = size == "full" ? models::LlamaConfig::smollm2_135m() : models::LlamaConfig::tiny();
        if (c.max_positions < cache) c.max_positions = cache;
        const models::BuiltModel m = models::build_llama_cached(c, 1, tokens, cache);
        const std::string program = size + ", " + std::to_string(tokens) + " tokens, cache " + std::to_string(cache) + ", " + profile;
        if (profile == "device") {
            const SessionStats st = compile(*m.graph, Device::open()).stats();
            std::printf("%s: %zu dispatches / %zu barriers (%zu hoisted)\n", program.c_str(), st.dispatches, st.barriers,
                        st.hoisted_dispatches);
            return 0;
        }
        const rt::CapsProfile* caps = rt::find_caps_profile(profile);
        if (!caps) throw Error("no device profile '" + profile + "'");
        sched::Schedule s = compiler::lower_program(optimize::optimize(*m.graph), sched::tune_for(caps->caps));
        sched::order_by_level(s);
        const size_t hoisted = sched::hoist_parameter_work(s);
        const std::set<int32_t> levels(s.step_level.begin() + static_cast<std::ptrdiff_t>(hoisted), s.step_level.end());
        std::printf("%s: %zu dispatches / %zu levels (%zu hoisted)\n", program.c_str(), s.steps.size() - hoisted, levels.size(),
                    hoisted);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "meganeura_cached_counts: %s\n", e.what());
        return 1;
    }
    return 0;
}
