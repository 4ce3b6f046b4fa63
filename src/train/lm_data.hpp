#pragma once
// Text for causal-LM fine-tuning, as Hugging Face's run_clm prepares it: each document tokenized and
// ended with the end-of-sequence token, all of them concatenated and cut into blocks of `seq` tokens
// (the remainder dropped), each block its own labels (the model shifts them). The last tenth of the
// blocks (at least one) is held out for the evaluation loss.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "io/tokenizer.hpp"

namespace mn::train {

// A .txt file is one document; a .jsonl file holds one JSON object per line with a "text" string.
// An mn::Error names the file and line of anything else.
std::vector<std::string> read_documents(const std::string& path);

struct LmBlocks {
    std::vector<std::vector<int32_t>> train, eval;
    int64_t tokens = 0;  // of all documents, before cutting
};
// An mn::Error when there are fewer than two blocks (one to train on, one to hold out).
LmBlocks pack_blocks(const io::Tokenizer& tokenizer, const std::vector<std::string>& documents, int64_t seq,
                     std::optional<int32_t> eos);

}  // namespace mn::train
