#pragma once
// MEGANEURA_TRACE=FILE: a Chrome / Perfetto trace (the JSON trace event format; ui.perfetto.dev or
// chrome://tracing open it) of everything the process compiles and runs, written when it exits.
// Each session has a host track (its compile passes, each run or step in wall time) and a GPU track
// with one event per dispatch: named by the graph nodes it computes and the layer they belong to,
// with their shapes, the kernel that computes them and its GPU time (timestamp queries, so tracing
// turns CompileOptions::profile on). A dispatch's time runs from the previous timestamp to its own,
// so the barrier before it is included; the GPU events of a run are laid end to end from its start.
#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "meganeura/graph.hpp"
#include "schedule/schedule.hpp"

namespace mn::compiler {

// What a dispatch computes, for traces and debug labels: "fc1.weight: matmul" style names.
struct DispatchName {
    std::string name;                // the layer (the parameter the nodes read, or inherit) and the ops
    std::vector<std::string> nodes;  // each node it writes: "%12 matmul (64,256) f32"
    std::string kernel;              // the kernel's label (family and variant)
};

// The layer each node belongs to (trace.cpp says how it is found); "" for inputs and what only they feed.
std::vector<std::string> node_layers(const Graph& graph);

// One DispatchName per step of the schedule, in dispatch order.
std::vector<DispatchName> dispatch_names(const Graph& graph, const sched::Schedule& schedule);

class Trace {
public:
    // The process's trace when MEGANEURA_TRACE names a file, else null.
    static Trace* active();

    using Clock = std::chrono::steady_clock;
    // A new session's tracks; returns its id for the calls below.
    int session(const std::string& device);
    // The compile passes, each with its wall time, ending at `end`.
    void compiled(int session, const std::vector<std::pair<std::string, double>>& pass_ms, Clock::time_point end);
    // One run (or step) from `start` to `end`, and its dispatches' GPU times in milliseconds. names[0] is the
    // dispatch at `first` in the session's full program (a run that skips the hoisted steps starts past
    // them), so that a dispatch has one index in every run.
    void ran(int session, Clock::time_point start, Clock::time_point end, const std::vector<DispatchName>& names,
             size_t first, const std::vector<std::pair<std::string, double>>& gpu_ms);

    ~Trace();  // writes the file

private:
    explicit Trace(std::string path);
    struct Events;
    std::string path_;
    Clock::time_point origin_;
    std::unique_ptr<Events> events_;
};

}  // namespace mn::compiler
