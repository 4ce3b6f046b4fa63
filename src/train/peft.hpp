#pragma once
// What a fine-tune leaves behind, in the formats Hugging Face's libraries load:
// - a LoRA adapter as PEFT writes it: adapter_model.safetensors with PEFT's key names
//   (base_model.model.<module>.lora_A.weight ...) and adapter_config.json;
// - a full model folder (config.json, model.safetensors with {"format": "pt"} metadata and no
//   optimizer tensors, tokenizer.json, generation_config.json), which transformers' from_pretrained
//   loads: the fine-tuned weights, or the base with the adapter merged in (W + alpha / r * B A).
#include <string>

#include "io/safetensors.hpp"
#include "models/lora.hpp"
#include "models/model_folder.hpp"

namespace mn::train {

// PEFT's name of the adapter tensor `name` (a graph parameter name), and back.
std::string peft_name(const std::string& name);

void write_adapter(const std::string& dir, const io::TensorMap& adapter, const models::LoraConfig& lora,
                   const std::string& base_model);
struct Adapter {
    models::LoraConfig lora;
    io::TensorMap tensors;  // by graph parameter name
};
// An mn::Error naming the file on anything PEFT's LoRA format has that this does not implement.
Adapter read_adapter(const std::string& dir);

// The folder `dir` with `weights` (every parameter of the model) and the base folder's other files.
void write_model_folder(const std::string& dir, const io::TensorMap& weights, const models::ModelFolder& base);
// The base weights with each adapted W replaced by W + scale * B A (f32).
io::TensorMap merge_adapter(const io::TensorMap& base, const Adapter& adapter);

}  // namespace mn::train
