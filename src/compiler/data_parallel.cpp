// Data-parallel training: N processes, one per device, each with its slice of the batch, step as one
// process of the whole batch would, and their parameters stay bit-identical.
//
// Why the step is split into two programs. The gradients must be summed over the processes before the
// optimizer update reads them, and the sum is the host's (MPI), so the device has to stop between the
// backward and the update. The alternative, one program whose update waits on a host-signalled event,
// would keep one submit but makes the host's reduction a callback racing the queue, and Vulkan events
// set from the host are slow on some drivers and absent on portability ones; two submits cost one fence
// wait (~50 us) against a reduction of megabytes. So compile() appends the backward as usual, marks each
// gradient an output and has the update read an input instead ("train.reduced_grad.NAME", training.cpp);
// the schedule moves every step that reads those inputs behind the others (sched::split_update), and
// two programs are recorded: the forward and backward, which reads the gradients back into host-visible
// memory, and the update, which uploads the reduced ones first. The update reads the reduced gradient,
// never the product's own result, so FusionPlan's update-in-the-epilogue of a product does not apply to
// these gradients: the split costs the fused updates their fusion, not their correctness.
//
// The transport. The gradients are read back into the session's readback buffer (host-visible, cached)
// and reduced by the options' all_reduce straight into the upload buffer (host-visible, coherent) the
// update program copies from, one span per tensor lying end to end, so that a caller can reduce adjacent
// tensors as one bucket with no copy of its own. What GPU-direct transport would change (the device's
// own buffers exported to a CUDA-aware MPI or NCCL) is in README.md, "--distributed".
//
// Overlap. The first program is recorded as segments (Impl::later_segments after `program`), each ending
// after the step that writes the last gradient of a bucket (about GradientExchange::bucket_bytes of
// gradients, in the order the backward finishes them) and reading that bucket back; all are submitted at
// once, and the host reduces a bucket as soon as its segment's fence signals, while the device runs the
// later segments. A segment opens with a barrier, as the next level of one program would.
#include "compiler/data_parallel.hpp"

#include <algorithm>
#include <map>

#include "compiler/training.hpp"

namespace mn::compiler {

std::vector<Session::Impl::Exchanged> exchanged_gradients(const Graph& graph, const sched::Schedule& s) {
    std::vector<Session::Impl::Exchanged> out;
    std::map<std::string, int32_t, std::less<>> inputs, outputs;
    for (size_t i = 0; i < graph.nodes().size(); ++i)
        if (graph.nodes()[i].op == Op::Input) inputs[graph.nodes()[i].name] = s.node_value[i];
    for (const auto& [name, id] : graph.outputs()) outputs[name] = s.node_value[static_cast<size_t>(id)];
    for (const Node& n : graph.nodes()) {
        if (n.op != Op::Parameter) continue;
        const auto in = inputs.find(reduced_gradient_input(n.name));
        if (in == inputs.end()) continue;  // frozen, or not f32: no gradient
        const int32_t gradient = outputs.at(gradient_output(n.name));
        if (in->second < 0) throw Error("compile: the update of '" + n.name + "' reads no reduced gradient");
        Session::Impl::Exchanged e{.gradient = s.root(gradient), .reduced = s.root(in->second)};
        e.floats = (static_cast<uint64_t>(numel(n.shape)) + 3) / 4 * 4;
        out.push_back(e);
    }
    return out;
}

void order_by_completion(Session::Impl& impl) {
    const sched::Schedule& s = impl.schedule;
    std::map<int32_t, size_t> finished;  // gradient root -> the step after its last write
    for (size_t i = 0; i < impl.first_update_step; ++i)
        for (size_t b = 0; b < s.steps[i].values.size(); ++b)
            if (s.steps[i].kernel.iface.bindings[b].writes) finished[s.root(s.steps[i].values[b])] = i + 1;
    for (auto& e : impl.exchanged) e.finished = finished.at(e.gradient);
    std::stable_sort(impl.exchanged.begin(), impl.exchanged.end(),
                     [](const auto& a, const auto& b) { return a.finished < b.finished; });
    // A bucket closes at bucket_bytes, but never between gradients the same step finishes: its segment
    // would hold no step.
    const size_t bucket_bytes = std::max<size_t>(impl.options.data_parallel->bucket_bytes, 1);
    impl.bucket_ends.clear();
    uint64_t bytes = 0;
    for (size_t i = 0; i < impl.exchanged.size(); ++i) {
        bytes += impl.exchanged[i].floats * 4;
        const bool last = i + 1 == impl.exchanged.size();
        if (last || (bytes >= bucket_bytes && impl.exchanged[i + 1].finished > impl.exchanged[i].finished)) {
            impl.bucket_ends.push_back(i + 1);
            bytes = 0;
        }
    }
}

void exchange(Session::Impl& impl, size_t bucket) {
    const GradientExchange& dp = *impl.options.data_parallel;
    const auto* readback = static_cast<const uint8_t*>(impl.readback.mapped());
    auto* upload = static_cast<uint8_t*>(impl.upload.mapped());
    std::vector<GradientExchange::Span> spans;
    if (bucket + 1 == impl.bucket_ends.size()) {
        const int32_t loss = impl.schedule.root(impl.live(kLossOutput));
        spans.push_back({reinterpret_cast<const float*>(readback + impl.readback_at.at(loss)), &impl.loss_sum, 1});
    }
    for (size_t i = bucket ? impl.bucket_ends[bucket - 1] : 0; i < impl.bucket_ends[bucket]; ++i) {
        const auto& e = impl.exchanged[i];
        spans.push_back({reinterpret_cast<const float*>(readback + e.readback_at),
                         reinterpret_cast<float*>(upload + e.upload_at), e.floats});
    }
    dp.all_reduce(spans);
}

}  // namespace mn::compiler
