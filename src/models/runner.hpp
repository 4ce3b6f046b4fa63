#pragma once
// Running a registered model on given weights and inputs: the part `meganeura forward` and
// `meganeura bench` share. With `backward`, the compiled program also writes d loss / d p for
// every parameter p, as outputs named "grad.<p>".
#include <string>
#include <utility>
#include <vector>

#include "meganeura/session.hpp"
#include "models/registry.hpp"

namespace mn::models {

struct PreparedModel {
    BuiltModel model;
    std::vector<std::string> grad_names;  // "grad.<parameter>", in graph order; empty without backward
    Session session;
};

// The shapes of `inputs`, as a ModelRequest's input_shapes.
std::map<std::string, Shape> shapes_of(const io::TensorMap& inputs);

// An mn::Error naming the sizes when the graph's parameters, inputs and state alone exceed the
// device's memory: found before compiling, rather than as a failed allocation after it.
void check_fits_device(const Graph& g, const Device& device, const std::string& model);

// Builds `name` for `request`, appends the gradients when `backward`, and compiles it.
PreparedModel prepare_model(const Device& device, const std::string& name, const ModelRequest& request, bool backward,
                            const CompileOptions& options);

// Uploads every input the model reads; an absent input, a wrong shape, an unconvertible dtype or an id
// outside what it indexes (an embedding's rows, a loss's classes) is an mn::Error naming it (i64 ids
// are narrowed to i32 with a range check).
void set_inputs(Session& session, const BuiltModel& model, const io::TensorMap& inputs);

// The output (under its name), "loss", and every "grad.<p>", as f32.
io::TensorMap read_outputs(const PreparedModel& prepared);

}  // namespace mn::models
