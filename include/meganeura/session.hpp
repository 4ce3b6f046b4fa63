#pragma once
// Device and Session: what a user holds at run time.
//
//   auto dev = mn::Device::open();             // best GPU; lavapipe when there is none
//   auto s   = mn::compile(graph, dev);        // one pre-recorded dispatch sequence
//   s.set("x", data); s.run(); auto y = s.get("y");
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "meganeura/graph.hpp"
#include "meganeura/optim.hpp"
#include "meganeura/precision.hpp"

struct VkCommandBuffer_T;  // VkCommandBuffer, as <vulkan/vulkan.h> declares it

namespace mn {

namespace rt { class Context; }
struct VulkanHandles;  // meganeura/vulkan.hpp

class Device {
public:
    // The best device, or the one `selector` names (an index or part of the name); when empty,
    // the MEGANEURA_DEVICE environment variable is read.
    static Device open(const std::string& selector = "");
    // A host application's device and queue (meganeura/vulkan.hpp), shared, never destroyed here.
    static Device adopt(const VulkanHandles& handles);
    std::string name() const;
    // Its capabilities as `meganeura devices` prints them (subgroup size, shared memory, ...).
    std::string describe() const;
    std::shared_ptr<rt::Context> context() const { return ctx_; }

private:
    std::shared_ptr<rt::Context> ctx_;
};

// Data-parallel training, one process per device (meganeura's --distributed runs it over MPI through
// src/distributed/): the step compiles to the forward and backward, in segments, then the optimizer
// update, and step() calls `all_reduce` for each segment's gradients. The update reads the sum of the processes'
// gradients divided by `processes`, so that N processes of batch b step as one process of batch N * b.
struct GradientExchange {
    // `send` holds this process's floats; `receive` must get the sum of every process's `send`, the
    // same bits in every process (each process's parameters then stay bit-identical to the others').
    struct Span {
        const float* send;
        float* receive;
        size_t count;
    };
    // Called once a bucket: the backward runs in segments, each ending where it has written about
    // bucket_bytes more of the gradients, and each segment's gradients are reduced while the later segments
    // run, in the order the backward finishes them; every process calls it with the same spans, in the same
    // order. One span per gradient; the last call's span 0 is the step's loss (one float, so that step()
    // returns the mean over the processes). The gradients' spans lie end to end in memory (each count
    // includes its tensor's padding to 16 bytes, zeros), so that adjacent ones can be reduced as one.
    std::function<void(const std::vector<Span>& spans)> all_reduce;
    int processes = 1;
    size_t bucket_bytes = size_t(25) << 20;  // PyTorch DDP's default bucket
};

struct CompileOptions {
    // Training: with a loss, compile appends the backward graph and the optimizer's updates of every
    // f32 parameter that requires a gradient (Graph::set_requires_grad), and Session::step() runs forward + backward + update in one submit.
    std::optional<Tensor> loss;
    Optimizer optimizer = AdamW{};
    LrSchedule schedule;
    double clip_grad_norm = 0;  // clip gradients to this global L2 norm; 0: off

    Precision precision = Precision::Strict;
    bool optimize = true;         // rewrite the graph first (optimize/: dead code, identities, common subexpressions)
    // The rewrites as a bounded equality saturation over the same rules and a few more, rather than greedily
    // (MEGANEURA_OPTIMIZE=saturate or greedy overrides it); it stops at the first budget it reaches, 0 taking
    // optimize/'s (2^19 e-nodes, 1000 ms), and its graph is correct wherever it stops.
    bool saturate = false;
    size_t saturate_nodes = 0;
    double saturate_ms = 0;
    bool plan_memory = true;      // let transient values share arena bytes
    bool poison_outputs = false;  // fill outputs and the arena with NaN before every run (tests)
    bool profile = false;         // per-dispatch GPU timestamps
    // The outputs copied to host memory at the end of every run, by name; unset: all of them. Session::get
    // reads any other output on demand with a submit of its own, so a benchmark can leave large outputs
    // (logits, gradients) on the device as a framework's training loop does.
    std::optional<std::vector<std::string>> read_back;
    uint64_t seed = 0;            // parameter initialization
    // Parameters that the caller gives values right after compiling (Session::load, set, copy_to): compile
    // leaves them zero rather than drawing their initial values, as Hugging Face's from_pretrained does not
    // initialize what its checkpoint holds (SmolLM2-135M's 135M values took 1.9 s of two cores' time to draw).
    std::function<bool(const std::string& parameter)> skip_init;
    static bool every_parameter(const std::string&) { return true; }  // skip_init where all of them are loaded next
    // Training only: reduce the gradients across processes before every update (GradientExchange).
    std::optional<GradientExchange> data_parallel;
};

struct SessionStats {
    size_t dispatches = 0, barriers = 0, pipelines = 0;  // of a run with the parameters unchanged
    // Dispatches that run only after a parameter changed: those whose values depend on nothing but
    // parameters and constants (a batch norm folded into its convolution's weights), in a session
    // that does not train.
    size_t hoisted_dispatches = 0;
    uint64_t logical_bytes = 0;   // every transient value at its own address
    uint64_t physical_bytes = 0;  // the planned arena
    uint64_t pinned_bytes = 0;    // parameters, inputs, constants, outputs
    double compile_ms = 0;
    std::vector<std::pair<std::string, double>> pass_ms;  // compile time per pass, in order
};

class Session {
public:
    Session();
    ~Session();
    Session(Session&&) noexcept;
    Session& operator=(Session&&) noexcept;

    // Inputs and parameters by name; the data's length must equal the tensor's element count.
    void set(std::string_view name, const std::vector<float>& data);
    void set(std::string_view name, const std::vector<int32_t>& data);
    // Several at once, as set() each (checked before any is written), in one transfer: set() one at a time waits for
    // the device each time (a model's weights: a few milliseconds a tensor).
    void set(const std::map<std::string, std::vector<float>>& tensors);
    // Runs the recorded program once (one submit).
    void run();
    // Records what run() submits into the caller's VkCommandBuffer (in the recording state, on this
    // session's device), for a host that shares its queue (meganeura/vulkan.hpp): inputs set before
    // the submit are read, outputs are readable with get() once it has completed.
    // Or one segment of it, for a host that spreads the work over several command buffers (one per
    // frame, say): record(cmd, i, k) for i = 0 .. k-1, submitted in that order on the session's queue,
    // with the host's own work between them, computes exactly what run() does, bit for bit. The
    // dispatches split evenly by count and each segment holds at least one, so 1 <= k <=
    // stats().dispatches (a program without dispatches: k = 1); anything else throws. Segment 0 reads
    // the inputs and the last writes the outputs: set() nothing while the segments are in flight.
    void record(VkCommandBuffer_T* command_buffer, size_t segment = 0, size_t of = 1) const;
    // Training sessions: one optimizer step (forward + backward + update, one submit); returns
    // the loss. step_count() is the number of steps taken, restored by load().
    float step();
    // step() for a host's command buffers, in segments as record(): recording segment 0 sets the step's
    // learning rate and bias corrections and counts the step (so each recorded segment 0 must be
    // submitted, after the previous step's last segment); the loss is get("loss") once the last
    // segment has completed.
    void record_step(VkCommandBuffer_T* command_buffer, size_t segment = 0, size_t of = 1);
    int64_t step_count() const;

    // Checkpoints: every parameter and optimizer state, by name, in safetensors, written
    // atomically. load() requires every parameter of this session to be in the file with its
    // shape (optimizer state too when the file has it and this session trains) and names the
    // offending tensor otherwise; tensors this session does not have are ignored.
    void save(const std::string& path) const;
    // Leaves out the parameters for which `omit` says yes (a LoRA run's frozen base: its checkpoint is
    // the adapter's size); the loader reads them elsewhere, and loads this file with the same `keep`.
    void save(const std::string& path, const std::function<bool(const std::string&)>& omit) const;
    void load(const std::string& path);
    // The shards of one checkpoint (model.safetensors.index.json's files): each tensor in one of them.
    // A parameter for which `keep` says yes is not read: it keeps its value, whether or not a file has
    // it (a LoRA adapter's, or a new classifier head's, loading the base model).
    void load(const std::vector<std::string>& files, const std::function<bool(const std::string&)>& keep = {});
    // Copies the named values (state such as a KV cache, parameters) into the same names of `dst`, a
    // session on the same device, on the device: no round trip through host memory.
    void copy_to(Session& dst, const std::vector<std::string>& names) const;
    // Outputs, inputs and parameters by name (f16 values are widened; i32 read with get_i32).
    std::vector<float> get(std::string_view name) const;
    // The same into `out`, of the tensor's size: no allocation, for a loop that reads an output every run (a decode
    // step's logits).
    void get(std::string_view name, std::span<float> out) const;
    // Several by name, as get() each, in one transfer from the device.
    std::map<std::string, std::vector<float>> get(const std::vector<std::string>& names) const;
    std::vector<int32_t> get_i32(std::string_view name) const;
    Shape shape(std::string_view name) const;
    DType dtype(std::string_view name) const;

    const SessionStats& stats() const;
    // After run() with CompileOptions::profile: (kernel label, ms) per dispatch.
    std::vector<std::pair<std::string, double>> profile() const;

    struct Impl;
    explicit Session(std::unique_ptr<Impl> impl);

private:
    std::unique_ptr<Impl> impl_;
};

Session compile(const Graph& graph, const Device& device, const CompileOptions& options = {});

}  // namespace mn
