// The layers (DESIGN.md): every #include "folder/..." in src/ and include/ points at the file's own
// folder or at a lower tier, so no layer reaches up and no two folders include each other. Lowest
// tier first; folders of one tier do not include one another.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "host_tools.hpp"

namespace mn::test {
namespace {

const std::vector<std::vector<std::string>> kTiers = {
    {"common", "meganeura"},                          // plain data and the public API's headers
    {"graph", "io"},                                  // the graph builder; file formats
    {"autodiff", "reference", "codegen", "runtime"},  // gradients and oracle of graphs; GLSL; Vulkan
    {"optimize"},                                     // graph rewrites before lowering
    {"schedule"},                                     // graph -> kernels, specialized for DeviceCaps
    {"memory"},                                       // where the schedule's values live
    {"compiler"},                                     // the passes in order, and Session
    {"models", "onnx", "distributed"},                // builders over the graph API; ONNX import; MPI
    {"train", "bench"},                               // the trainer, the benchmark harness
    {"cli", "capi"},                                  // the meganeura command; the C API
};

int tier_of(const std::string& folder) {
    for (size_t t = 0; t < kTiers.size(); ++t) {
        for (const std::string& f : kTiers[t]) {
            if (f == folder) return static_cast<int>(t);
        }
    }
    return -1;
}

// The folder a source file belongs to: src/<folder>/..., or include/meganeura/... ("meganeura").
std::string folder_of(const std::filesystem::path& root, const std::filesystem::path& file) {
    const std::filesystem::path rel = std::filesystem::relative(file, root);
    auto part = rel.begin();
    return *part == "include" ? std::string("meganeura") : (++part)->string();
}

TEST(Layering, IncludesPointDownTheLayers) {
    const std::filesystem::path root = source_dir();
    std::vector<std::string> violations;
    size_t files = 0;
    for (const char* top : {"src", "include"}) {
        for (const auto& entry : std::filesystem::recursive_directory_iterator(root / top)) {
            const std::string ext = entry.path().extension().string();
            if (!entry.is_regular_file() || (ext != ".cpp" && ext != ".hpp" && ext != ".def")) continue;
            ++files;
            const std::string from = folder_of(root, entry.path());
            ASSERT_GE(tier_of(from), 0) << entry.path() << ": folder '" << from << "' is in no tier of this test";
            std::ifstream in(entry.path());
            std::string line;
            for (int number = 1; std::getline(in, line); ++number) {
                const std::string directive = "#include \"";
                if (line.rfind(directive, 0) != 0) continue;
                const size_t slash = line.find('/', directive.size());
                if (slash == std::string::npos) continue;  // a file of the same folder
                const std::string to = line.substr(directive.size(), slash - directive.size());
                if (to == from || (tier_of(to) >= 0 && tier_of(to) < tier_of(from))) continue;
                violations.push_back(std::filesystem::relative(entry.path(), root).string() + ":" + std::to_string(number) +
                                     ": " + from + " includes " + to);
            }
        }
    }
    EXPECT_GT(files, 100u);
    for (const std::string& v : violations) ADD_FAILURE() << v;
}

}  // namespace
}  // namespace mn::test
