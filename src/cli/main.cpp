// The `meganeura` command: a table of subcommands; errors print one line and exit non-zero.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string_view>

#include "cli/commands.hpp"
#include "meganeura/error.hpp"

namespace {

struct Command {
    const char* name;
    int (*run)(const mn::cli::Args&);
    const char* help;
};

const Command kCommands[] = {
    {"devices", mn::cli::cmd_devices, "list every Vulkan device with its capabilities"},
    {"train", mn::cli::cmd_train, "train fashion-mnist [--model mlp|cnn] [--epochs 2] [--batch 64] [--lr 1e-3] [--schedule cosine|constant] "
                                  "[--checkpoint F] [--resume F | --force] [--curve PREFIX]"},
    {"eval", mn::cli::cmd_eval, "eval fashion-mnist --checkpoint F [--model mlp|cnn]"},
    {"forward", mn::cli::cmd_forward, "forward --model NAME [--size tiny|full] [--config config.json] [--weights W] "
                                      "--inputs I --out O [--backward] [--precision strict|fast]"},
    {"generate", mn::cli::cmd_generate, "generate --model smollm2 [--weights W] --tokens 1,2,3 [--max-new 20] "
                                        "[--size tiny|full] [--config config.json]: greedy token ids"},
    {"bench", mn::cli::cmd_bench, "bench --model NAME [--precision strict|fast] [--size full|tiny] [--json FILE] "
                                  "[--repeat 20] [--warmup 3] [--out-dir DIR] [--seed 0]"},
};

int usage(FILE* out) {
    std::fprintf(out, "usage: meganeura <command> [options]\n\ncommands:\n");
    for (const auto& c : kCommands) std::fprintf(out, "  %-12s %s\n", c.name, c.help);
    return out == stdout ? 0 : 2;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) return usage(stderr);
    std::string_view name = argv[1];
    if (name == "-h" || name == "--help" || name == "help") return usage(stdout);
    for (const auto& c : kCommands) {
        if (name != c.name) continue;
        try {
            return c.run(mn::cli::Args(argv + 2, argv + argc));
        } catch (const mn::Error& e) {
            std::fprintf(stderr, "meganeura %s: error: %s\n", c.name, e.what());
            return 1;
        } catch (const std::exception& e) {
            std::fprintf(stderr, "meganeura %s: internal error: %s\n", c.name, e.what());
            return 3;
        }
    }
    std::fprintf(stderr, "meganeura: unknown command '%s'\n", argv[1]);
    return usage(stderr);
}
