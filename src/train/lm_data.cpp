#include "train/lm_data.hpp"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "io/json.hpp"
#include "meganeura/error.hpp"

namespace mn::train {

std::vector<std::string> read_documents(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error("--data " + path + ": cannot open it");
    const bool jsonl = path.size() >= 6 && path.compare(path.size() - 6, 6, ".jsonl") == 0;
    const bool txt = path.size() >= 4 && path.compare(path.size() - 4, 4, ".txt") == 0;
    if (!jsonl && !txt) throw Error("--data " + path + ": expected a .txt or a .jsonl file");
    if (txt) {
        std::stringstream all;
        all << in.rdbuf();
        return {all.str()};
    }
    std::vector<std::string> documents;
    int64_t number = 0;
    for (std::string line; std::getline(in, line);) {
        ++number;
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        const std::string where = path + " line " + std::to_string(number);
        const nlohmann::json j = io::parse_json(line, where);
        if (!j.is_object() || !j.contains("text") || !j["text"].is_string())
            throw Error(where + ": expected an object with a \"text\" string");
        documents.push_back(j["text"].get<std::string>());
    }
    if (documents.empty()) throw Error("--data " + path + ": no documents");
    return documents;
}

LmBlocks pack_blocks(const io::Tokenizer& tokenizer, const std::vector<std::string>& documents, int64_t seq,
                     std::optional<int32_t> eos) {
    std::vector<int32_t> stream;
    for (const std::string& d : documents) {
        const std::vector<int32_t> ids = tokenizer.encode(d);
        stream.insert(stream.end(), ids.begin(), ids.end());
        if (eos) stream.push_back(*eos);
    }
    LmBlocks b{.tokens = static_cast<int64_t>(stream.size())};
    const auto n = static_cast<int64_t>(stream.size()) / seq;
    if (n < 2)
        throw Error("the data has " + std::to_string(stream.size()) + " tokens, fewer than two blocks of --seq " +
                    std::to_string(seq) + " (one to train on, one held out for evaluation)");
    const int64_t held_out = std::max<int64_t>(1, n / 10);
    for (int64_t i = 0; i < n; ++i) {
        std::vector<int32_t> block(stream.begin() + i * seq, stream.begin() + (i + 1) * seq);
        (i < n - held_out ? b.train : b.eval).push_back(std::move(block));
    }
    return b;
}

}  // namespace mn::train
