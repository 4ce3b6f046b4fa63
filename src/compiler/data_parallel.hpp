#pragma once
// Data-parallel training's side of the compiler (CompileOptions::data_parallel): which values cross
// between the two programs of a step, and the exchange between them.
#include <vector>

#include "compiler/session_impl.hpp"

namespace mn::compiler {

// The gradients the update reads back reduced, in the graph's order of the parameters (readback_at and
// upload_at not yet placed); empty for a session that is not data-parallel.
std::vector<Session::Impl::Exchanged> exchanged_gradients(const Graph& graph, const sched::Schedule& s);

// After sched::split_update: each gradient's Exchanged::finished, the gradients in that order (stable), and
// Impl::bucket_ends, the buckets of about GradientExchange::bucket_bytes whose segments the backward runs in.
void order_by_completion(Session::Impl& impl);

// Hands the gradients of bucket `bucket` (and with the last, the loss) of the run in flight, once its segment
// is done, to the options' all_reduce, which writes the sums into the update program's uploads (and
// Impl::loss_sum).
void exchange(Session::Impl& impl, size_t bucket);

}  // namespace mn::compiler
