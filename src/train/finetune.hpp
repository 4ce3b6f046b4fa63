#pragma once
// Fine-tuning a causal LM of a Hugging Face model folder on text: the data packed into blocks
// (lm_data.hpp), AdamW over every parameter or over LoRA adapters only (the base frozen: no gradient,
// no optimizer state), a held-out evaluation loss, progress with tokens/s, a checkpoint to resume
// from, the loss curve, and the result in Hugging Face's formats (peft.hpp).
//
// Everything lands in the output folder: checkpoint.safetensors (the trainable parameters, their
// optimizer state and the step: a LoRA run's holds the adapter, not the frozen base, which a resumed
// run reads from the model folder again), loss.csv and loss.svg, then the adapter (adapter_model.safetensors, adapter_config.json) or,
// for a full fine-tune, a model folder; with `merge`, also merged/ (base plus adapter, a model folder).
#include <string>

#include "meganeura/session.hpp"
#include "models/lora.hpp"
#include "models/model_folder.hpp"
#include "train/finetune_loop.hpp"

namespace mn::train {

struct FinetuneRun {
    models::ModelFolder folder;
    std::string data;  // .txt or .jsonl
    std::string out;
    models::LoraConfig lora;  // rank 0: a full fine-tune
    int64_t steps = 0;        // 0: `epochs` passes over the training blocks
    int64_t epochs = 1, batch = 4, seq = 128;
    int64_t eval_every = 0;   // also evaluate (and checkpoint) every this many steps; 0: at the end only
    double lr = 2e-4, weight_decay = 0;
    uint64_t seed = 0;
    bool resume = false;      // continue from out/checkpoint.safetensors
    bool merge = false;       // LoRA: also write the merged model folder
    Precision precision = Precision::Strict;  // of the training step and of the evaluation
    // Data parallel (--distributed): `batch` blocks per process, each step's batch * size() blocks those a
    // single process of that batch would take, in rank order; rank 0 alone writes OUT (StepLoop::world).
    distributed::World* world = nullptr;
};

FinetuneResult finetune(const Device& device, const FinetuneRun& run);

}  // namespace mn::train
