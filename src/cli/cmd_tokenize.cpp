// `meganeura tokenize`: a model folder's tokenizer.json (io/tokenizer.hpp) on the command line, text to
// ids and back, as Hugging Face's tokenizer(text) and tokenizer.decode(ids) give them.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/commands.hpp"
#include "cli/token_ids.hpp"
#include "io/tokenizer.hpp"
#include "models/model_folder.hpp"

namespace mn::cli {

namespace {

std::string tokenizer_path(const Flags& f) {
    if (!f.str("tokenizer").empty()) return f.str("tokenizer");
    const std::string& dir = f.str("model");
    if (dir.empty()) throw Error("give a model folder (-m DIR) or --tokenizer FILE");
    if (!models::is_directory(dir)) throw Error("--model " + dir + " is not a model folder");
    const std::string path = dir + "/tokenizer.json";
    if (!std::ifstream(path)) throw Error("model folder " + dir + ": no tokenizer.json");
    return path;
}

int run_tokenize(const Flags& f) {
    const int given = !f.str("text").empty() + !f.str("file").empty() + !f.str("decode").empty();
    if (given != 1) throw Error("give one of --text, --file and --decode");
    const io::Tokenizer t = io::Tokenizer::from_file(tokenizer_path(f));
    const bool special = !f.on("no-special");
    if (!f.str("decode").empty()) {
        const std::string text = t.decode(parse_token_ids(f.str("decode"), "--decode"), !special);
        std::fwrite(text.data(), 1, text.size(), stdout);
        std::printf("\n");
        return 0;
    }
    std::string text = f.str("text");
    if (!f.str("file").empty()) {
        std::ifstream in(f.str("file"), std::ios::binary);
        if (!in) throw Error("--file " + f.str("file") + ": cannot open it");
        std::stringstream all;
        all << in.rdbuf();
        text = all.str();
    }
    std::printf("%s\n", format_token_ids(t.encode(text, special)).c_str());
    return 0;
}

}  // namespace

const Command tokenize_command = {
    .name = "tokenize",
    .summary = "text to token ids and back with a model folder's tokenizer.json",
    .description = "Encodes --text (or a --file's text) into token ids, comma-separated, or decodes --decode's ids\n"
                   "into text, with the byte-level BPE tokenizer.json of a Hugging Face model folder, as its own\n"
                   "tokenizer does (special tokens of its post-processor added, unless --no-special).",
    .options = {{"model", "", "DIR", "a Hugging Face model folder with a tokenizer.json (-m DIR)"},
                {"tokenizer", "", "FILE", "a tokenizer.json, instead of a model folder"},
                {"text", "", "TEXT", "the text to encode"},
                {"file", "", "FILE", "a UTF-8 file whose text to encode"},
                {"decode", "", "IDS", "comma-separated token ids to decode"},
                {"no-special", "false", "", "encode without the post-processor's special tokens; decode leaving special tokens out"}},
    .run = run_tokenize,
};

}  // namespace mn::cli
