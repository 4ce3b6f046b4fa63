#pragma once
// schedule/: turns a graph into an ordered list of kernel dispatches over values.
//
// A Value is a tensor the program holds: an input, a parameter, a constant, a node's result or a
// scratch buffer a lowering needed. A reshape is a view: it shares its source's storage. Steps run
// in graph order (topological by construction). Device specialization (workgroup sizes, matmul
// tiles) reads DeviceCaps only.
#include <algorithm>
#include <string>
#include <vector>

#include "codegen/families.hpp"
#include "common/device_caps.hpp"
#include "meganeura/graph.hpp"
#include "meganeura/precision.hpp"

namespace mn::sched {

// Counters: the tile counters of a product that sums its own split-K pieces (codegen::MatmulKernels::tile_counters),
// zero before and after each of its dispatches; bytes of their own, filled with zeros once.
enum class Storage { Transient, Input, Parameter, Constant, State, Counters };

struct Value {
    Shape shape;
    DType dtype = DType::F32;
    Storage storage = Storage::Transient;
    int32_t node = -1;     // graph node, -1 for scratch
    int32_t view_of = -1;  // another value whose storage this one shares
    // >= 0: this value is a part of view_of's bytes, starting at this byte (leaves stacked by a concat, which is then
    // no copy: Lowering::stack_leaves); -1: it is all of them (a reshape's view).
    int64_t part_at = -1;
    bool pinned = false;   // never aliased by the planner: leaves and user-visible outputs
    uint64_t bytes() const { return static_cast<uint64_t>(numel(shape)) * dtype_size(dtype); }
};

struct Step {
    codegen::KernelSource kernel;
    std::vector<int32_t> values;  // one value per kernel binding, in binding order
};

struct Schedule {
    std::vector<Value> values;
    std::vector<Step> steps;
    std::vector<int32_t> node_value;  // graph node id -> value id, -1 where the node is dead
    std::vector<int32_t> step_level;  // after order_by_level: steps of one level need no barrier between them

    int32_t root(int32_t v) const {
        while (values[static_cast<size_t>(v)].view_of >= 0) v = values[static_cast<size_t>(v)].view_of;
        return v;
    }
    // The value whose bytes v's are: the first part on v's way to its root, or the root.
    int32_t storage(int32_t v) const {
        while (values[static_cast<size_t>(v)].view_of >= 0 && values[static_cast<size_t>(v)].part_at < 0) {
            v = values[static_cast<size_t>(v)].view_of;
        }
        return v;
    }
    // Where v's bytes start in its root's.
    uint64_t offset_in_root(int32_t v) const {
        uint64_t at = 0;
        for (; values[static_cast<size_t>(v)].view_of >= 0; v = values[static_cast<size_t>(v)].view_of) {
            at += static_cast<uint64_t>(std::max<int64_t>(values[static_cast<size_t>(v)].part_at, 0));
        }
        return at;
    }
};

// Which cooperative-matrix extension precision fast's kernels run on. Their GLSL is NV's either way
// (glslang 12 has no GL_KHR_cooperative_matrix); on the KHR path the compiler rewrites their SPIR-V
// (codegen/spirv_khr.hpp, ShaderOptions::coop_khr). MEGANEURA_COOP=nv|khr|off; unset, KHR where the
// device has it (faster on NVIDIA's driver), else NV. Either needs f16 x f16 + f32 -> f32 at 16x16x16
// on a subgroup in that extension's shapes, f16 arithmetic, the Vulkan memory model and subgroup size
// control. In tuning.cpp.
enum class CoopPath { None, Nv, Khr };
struct CoopChoice {
    CoopPath path = CoopPath::None;
    const char* why = "precision strict";  // MEGANEURA_DEBUG=1's explanation; for None, the kernels' coop_declined
};
CoopChoice choose_coop(const rt::DeviceCaps& caps);
const char* coop_path_name(CoopPath path);  // "NV", "KHR", "none"

struct Tuning {
    CoopChoice coop;  // precision fast's (strict: none)
    codegen::Launch pointwise, reduction;
    // A reduction cut in pieces (a bias's gradient over many rows) summed by its last piece of each output, not a
    // sum dispatch of its own (MEGANEURA_SPLIT_SUM=dispatch): codegen::Reduction.
    bool reduction_last_piece_sums = true;
    codegen::MatmulTuning matmul;
    codegen::AttentionTiles attention;
    uint32_t max_fused_inputs = 16;  // distinct inputs (and extra outputs) of one fused pointwise kernel
    // Where a root value's bytes may start, and a part of it (Value::part_at) that a kernel binds: the device's
    // storage-buffer offset alignment, at least 256 bytes.
    uint64_t binding_alignment = 256;
    // Bindings of one batch of parameter updates (codegen::pointwise_batch_kernel): the device's storage buffers
    // per stage, at most 1024 (a function per member in its shader). A GPU's 1024 take SmolLM2-135M's 62 updates
    // (258 bindings with AdamW) and ResNet-50's 107 (436) in one dispatch; lavapipe's 32 take 6 AdamW updates.
    uint32_t max_batch_bindings = 1024;
    // Members of one batch dispatch at most. SmolLM2-135M's 253 AdamW updates in one shader (a function each) took
    // its training step's cold compile on the H200 from 1.3 to 3.5 s (glslang and the driver, one shader: nothing
    // to run in parallel; bench/results/2026-12-03-h200-session20.md). Dispatches of at most 64 compile in parallel,
    // and those of the same programs and bindings are the same GLSL (the sizes are specialization constants),
    // compiled once (SmolLM2: 5 dispatches, 3 shaders; its step's cold compile on the H200 1.04 s strict, 1.24 fast:
    // bench/results/2026-12-03-h200-session21-protocol-whisper-smollm2.md). A member by quads counts 4
    // (codegen::batch_member_weight): 43 of Whisper-tiny's AdamW updates by quads in one shader took its step's cold
    // compile on the H100 to 2.1 s (bench/results/2026-12-07-session47-h100.md).
    uint32_t max_batch_members = 64;
    // Which products an optimizer's update may be the epilogue of (where its tree fits); the others are batched
    // with the others of their optimizer (FusionPlan::batched_update). SplitSums, the default: only matmuls whose
    // K is split, whose split sum (a bandwidth-bound kernel that reads the partials anyway) applies it. Measured
    // on the H200 (bench/results/2026-12-03-h200-session20.md), batched against every product's epilogue:
    // SmolLM2-135M's AdamW step 9.65 -> 8.95 ms in fast precision and 10.99 -> 10.31 in strict, SmolVLA's
    // 5.25 -> 4.86 (their products are not split: an epilogue reading and writing three tensors per element
    // lengthened them, more so on the cooperative kernels), ResNet-50 and the U-Net unchanged; but Whisper's,
    // whose weight gradients are split over 1,500 rows, 3.70 -> 3.78 (fast) and 7.23 -> 7.42 (strict).
    // MEGANEURA_UPDATES=auto|batched|epilogue (SplitSums, None, All).
    enum class UpdatesInProducts { None, SplitSums, All };
    UpdatesInProducts updates_in_products = UpdatesInProducts::SplitSums;
    // Which gradient products (the matmuls and convolutions mn::grad appends) take the cooperative
    // kernels, with their operands scaled into f16's range (MatmulTuning::coop_scaled); the others stay
    // f32. MEGANEURA_FAST_GRADIENTS=f32|f16|auto. Auto, the default, is what measured faster on the
    // H200 (README, Precision): the gradients of convolutions (1x1 ones too), and matmul gradient
    // products of 2^24 multiply-adds or more (product_precision.cpp's kScaledGradientWork).
    enum class FastGradients { F32, Auto, F16 };
    FastGradients fast_gradients = FastGradients::Auto;
    // Precision fast: a matmul or convolution operand that depends on parameters alone (a weight, ResNet-50's
    // folded weights, the stacked q/k/v) is read as an f16 copy, which a program that does not train
    // computes once (hoist.cpp) and a training step would compute every step, so the compiler turns this off
    // for training. On where the cooperative kernels run (they stage f16 operands anyway, so the values are
    // the same; the GEMVs of a decode step round their weights to f16 too), unless MEGANEURA_F16_WEIGHTS=0;
    // MEGANEURA_F16_WEIGHTS=1 turns it on in precision fast on any device (tests on lavapipe).
    bool f16_weights = false;
    // Precision fast, in a program that computes gradients (a training step, or mn::grad's outputs): the
    // forward products (matmuls and convolutions) on the cooperative kernels that a ReLU, max pool, |x|,
    // maximum or minimum depends on (before_piecewise_gradients) split each f32 operand into two f16
    // parts and multiply three products of them (MatmulTuning::coop_split), about 21 significant bits
    // against f16's 11. f16's rounding flips enough ReLU and max-pool decisions to move ResNet-50's
    // gradients by ~8%, past the 5% its protocol allows; the gradient products' own f16 rounding costs
    // 0.05% (scripts/resnet50_fast_gate_emulation.py). MEGANEURA_FAST_FORWARD=f16 turns it off.
    bool split_forward = false;
};
// Precision Fast lets matmuls, convolutions and attention use f16 cooperative matrices (f32
// accumulation) where choose_coop finds a path; every other op stays f32. `training`: the program
// trains, so its weights change every step (no f16 copies of them). In tuning.cpp.
Tuning tune_for(const rt::DeviceCaps& caps, Precision precision = Precision::Strict, bool training = false);

// Lowers the nodes that `roots` depend on (outputs and assignments). Roots' values are pinned.
Schedule lower(const Graph& graph, const std::vector<int32_t>& roots, const Tuning& tuning);

// Reorders the steps so that independent ones are adjacent (levels.cpp) and fills step_level.
void order_by_level(Schedule& s);
// After order_by_level: the steps flagged `first` move to the front in their order and levels, the others after them,
// levelled again among themselves, a level above them all (hoisting, the data-parallel update's split). Returns how
// many moved.
size_t move_steps_first(Schedule& s, const std::vector<bool>& first);

// After order_by_level, for a program that does not train: moves the steps that compute the same
// values every run while the parameters stay unchanged (they read only parameters, constants, state
// no step writes, and what such steps write) to the front, pins what they compute for the other
// steps, and returns how many they are (hoist.cpp).
size_t hoist_parameter_work(Schedule& s);
// Per node of g: whether it depends on parameters, constants and state that no assignment writes alone, so that a
// program that does not train computes it once: the graph's view of what hoist_parameter_work finds among the
// steps (lowering reads it for Tuning::f16_weights before there are steps).
std::vector<bool> parameter_only_nodes(const Graph& g);
// Per node of g: whether a ReLU, max pool, |x|, maximum or minimum of the forward (not Node::gradient)
// depends on it, whose piecewise gradients f16's rounding would flip: the forward
// products that Tuning::split_forward splits (product_precision.cpp).
std::vector<bool> before_piecewise_gradients(const Graph& g);
// The matmul family's tuning for product node `id` of g (a matmul or a convolution), as precision fast
// chooses it: a forward product that `split` marks (before_piecewise_gradients; empty: none) is split,
// a gradient product (Node::gradient) takes the scaled cooperative kernels or the f32 ones as
// tuning.fast_gradients says (product_precision.cpp).
codegen::MatmulTuning product_tuning(const Graph& g, int32_t id, const Tuning& tuning, const std::vector<bool>& split);
// M x N x K (x batch) of matmul node n of g; 0 for other nodes (product_precision.cpp).
double matmul_multiply_adds(const Graph& g, const Node& n);

// After order_by_level, for data-parallel training: moves the steps that read `reduced_inputs` (the
// gradients summed across processes), or what such steps compute, behind all others, and returns the
// index of the first of them; throws when another step cannot move ahead of them (split.cpp).
size_t split_update(Schedule& s, const std::vector<int32_t>& reduced_inputs);

}  // namespace mn::sched
