#pragma once
// The trainer loop for classifiers: seeded epochs over a dataset, one Session::step() per batch,
// progress on stderr, a checkpoint and a test-set evaluation after every epoch, and the loss curve
// as CSV and SVG.
#include <string>

#include "distributed/world.hpp"
#include "meganeura/session.hpp"
#include "train/dataset.hpp"

namespace mn::train {

struct ClassifierRun {
    std::string model = "mlp";
    int64_t epochs = 2;
    int64_t batch = 64;
    int64_t eval_batch = 500;
    uint64_t seed = 0;
    Optimizer optimizer = AdamW{.lr = 1e-3, .weight_decay = 0};
    std::string checkpoint = "fashion-mnist.safetensors";
    std::string resume;        // a checkpoint to continue from, with its optimizer state
    std::string curve_prefix;  // writes <prefix>.csv and <prefix>.svg; empty: next to the checkpoint
    bool cosine = true;        // decay the learning rate to 0 over the run (cosine), else keep it constant
    // Data parallel (--distributed): `batch` is each process's, and the processes step together through
    // the batches a single process of batch size() * batch would see, rank r taking rows r * batch ..
    // (r + 1) * batch - 1 of each. Rank 0 broadcasts its parameters first and alone writes the checkpoint
    // and the curve, evaluates and prints; the other ranks say nothing.
    distributed::World* world = nullptr;
};

struct Evaluation {
    double accuracy = 0;  // fraction of correct argmax predictions
    double loss = 0;      // mean cross-entropy
    int64_t count = 0;
};

// Adds the cross-entropy and the correct argmax predictions of the first `rows` rows of `logits`
// ([batch, classes], a batch whose rows past `rows` are padding) to the sums in `e`, and counts them.
void add_scores(const std::vector<float>& logits, int64_t batch, const std::vector<int32_t>& labels, int64_t rows,
                Evaluation& e);

// Where the loss curve goes: run.curve_prefix, else the checkpoint's path without its extension.
std::string curve_prefix(const ClassifierRun& run);

// Trains and returns the final test-set evaluation. The output paths are checked before anything
// runs; a non-finite loss or parameter stops training with an mn::Error naming the step, and the
// checkpoint keeps the last finite state it was given.
Evaluation train_classifier(const Device& device, const ClassifierRun& run, const Dataset& train_set,
                            const Dataset& test_set);

// Evaluates the parameters of `checkpoint` on `data`.
Evaluation evaluate_classifier(const Device& device, const std::string& model, const std::string& checkpoint,
                               const Dataset& data, int64_t batch = 500);

}  // namespace mn::train
