#pragma once
// The compiled program behind a Session: the schedule, where each value lives, the staging
// buffers and the recorded command sequence.
#include <functional>
#include <map>
#include <set>
#include <string>

#include "compiler/trace.hpp"
#include "meganeura/session.hpp"
#include "runtime/runtime.hpp"
#include "schedule/schedule.hpp"

namespace mn {

struct Session::Impl {
    std::shared_ptr<rt::Context> ctx;
    sched::Schedule schedule;
    rt::Buffer pinned, arena, upload, readback;
    std::vector<const rt::Buffer*> home;  // per value (roots only): pinned or arena
    std::vector<uint64_t> offset;         // per value (roots only): byte offset in its home
    std::map<std::string, int32_t, std::less<>> names;  // inputs, parameters, outputs -> value
    // The parameters and state by their own names: a checkpoint's tensors (not an output's name for one of them).
    std::set<std::string, std::less<>> checkpointed;
    std::map<int32_t, uint64_t> upload_at;    // input root -> offset in `upload`
    std::map<int32_t, uint64_t> readback_at;  // output root -> offset in `readback`
    std::unique_ptr<rt::Program> program;
    std::vector<const rt::Pipeline*> step_pipelines;  // per schedule step
    // Steps [0, hoisted_steps) compute the same values every run while the parameters are unchanged
    // (sched::hoist_parameter_work); steady_program is the program without them, run while
    // parameters_changed is false (set, load and copy_to of a parameter make it true).
    size_t hoisted_steps = 0;
    std::unique_ptr<rt::Program> steady_program;
    bool parameters_changed = true;
    rt::Program* last_run = nullptr;  // the one whose dispatch times profile() reports
    rt::Program& next_program();      // the one a run takes now; parameters_changed is false after
    // Data-parallel training (compiler/data_parallel.cpp): `program` and then later_segments run the forward
    // and backward, each segment reading back the gradients of one bucket (exchanged[bucket_ends[k - 1],
    // bucket_ends[k])) into `readback`; step() reduces each bucket across processes straight into `upload`
    // while the later segments run, and update_program (the steps from first_update_step on) uploads them
    // and updates.
    struct Exchanged {
        int32_t gradient = -1, reduced = -1;  // root values: the gradient output, the input the update reads
        uint64_t readback_at = 0, upload_at = 0, floats = 0;  // floats: the tensor's, padded to 16 bytes
        size_t finished = 0;  // the step after the last one that writes the gradient
    };
    std::vector<Exchanged> exchanged;
    std::vector<size_t> bucket_ends;
    std::vector<std::unique_ptr<rt::Program>> later_segments;
    std::unique_ptr<rt::Program> update_program;
    size_t first_update_step = 0;
    float loss_sum = 0;  // the loss summed over the processes by the last step
    SessionStats stats;
    bool profiled = false;
    CompileOptions options;
    bool training = false;
    sched::CoopChoice coop;  // the cooperative matrices the kernels run on, and why (MEGANEURA_DEBUG=1)
    int64_t steps_taken = 0;
    // What each dispatch computes (trace and debug labels), and MEGANEURA_TRACE's tracks of this session, 0 when off.
    std::vector<compiler::DispatchName> dispatch_names;
    int trace_session = 0;
    // MEGANEURA_CHECK (compiler/check.hpp): the compiled graph and the limit; null when off. The
    // program then copies every binding a dispatch writes into `check_snapshot` right after that
    // dispatch, so that the check sees what each write produced even where a later one overwrote it.
    struct CheckedWrite {
        size_t step, binding;
        uint64_t at;  // offset in check_snapshot
    };
    std::shared_ptr<const Graph> check_graph;
    double check_limit = 0;
    rt::Buffer check_snapshot;
    std::vector<CheckedWrite> checked_writes;  // in dispatch order

    const sched::Value& value(int32_t v) const { return schedule.values[static_cast<size_t>(v)]; }
    rt::BufferRange range(int32_t v) const;
    int32_t lookup(std::string_view name) const;  // throws listing the known names; -1: dead leaf
    int32_t live(std::string_view name) const;    // lookup, and throws for a dead leaf
    void write_now(int32_t v, const void* bytes);  // one-shot upload to a value's device bytes
    // Uploads many values at once: `fill(i, dst)` writes values[i]'s bytes into staging memory (called
    // from several threads, each index once); the copies go in a few large submits.
    void write_many(const std::vector<int32_t>& values, const std::function<void(size_t, uint8_t*)>& fill);
    // The same in pieces of at most `piece` elements: `fill(i, begin, end, dst)` writes elements [begin,
    // end) of values[i] at dst, the staging bytes of element `begin`. One large value then keeps every
    // thread busy (SmolLM2's embedding is a fifth of its weights).
    void write_pieces(const std::vector<int32_t>& values, int64_t piece,
                      const std::function<void(size_t, int64_t, int64_t, uint8_t*)>& fill);
    // The values' bytes read from the device now, in submits of at most 64 MiB of staging each.
    std::vector<std::vector<uint8_t>> read_now(const std::vector<int32_t>& values) const;
    // Whether v's bytes are in the readback memory (an output of the last run), and where.
    const uint8_t* read_back(int32_t v) const;
    // v's bytes: in the readback memory if an output of the last run, else read_now into `read`.
    const uint8_t* bytes_of(int32_t v, std::vector<uint8_t>& read) const;
    // One submit, checked against the reference under MEGANEURA_CHECK; in a data-parallel session, next_program()
    // and later_segments queued at once, segment_done(k) called as each segment k finishes, while the later run.
    void run_program(const std::function<void(size_t segment)>& segment_done = {});
};

}  // namespace mn
