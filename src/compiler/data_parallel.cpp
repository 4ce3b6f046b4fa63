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
// Not overlapped yet: the whole backward runs, then every bucket is reduced. Overlapping (reducing a
// bucket while the backward's later segments run) would record the first program in segments cut after
// the step that writes each bucket's last gradient, and reduce a bucket while the next segment runs.
#include "compiler/data_parallel.hpp"

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

void exchange(Session::Impl& impl) {
    const GradientExchange& dp = *impl.options.data_parallel;
    const auto* readback = static_cast<const uint8_t*>(impl.readback.mapped());
    auto* upload = static_cast<uint8_t*>(impl.upload.mapped());
    const int32_t loss = impl.schedule.root(impl.live(kLossOutput));
    std::vector<GradientExchange::Span> spans;
    spans.push_back({reinterpret_cast<const float*>(readback + impl.readback_at.at(loss)), &impl.loss_sum, 1});
    for (const auto& e : impl.exchanged)
        spans.push_back({reinterpret_cast<const float*>(readback + e.readback_at),
                         reinterpret_cast<float*>(upload + e.upload_at), e.floats});
    dp.all_reduce(spans);
}

}  // namespace mn::compiler
