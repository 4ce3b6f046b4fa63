// Session: set inputs and parameters, run the recorded program, read results back.
#include <chrono>
#include <cstring>
#include <future>
#include <limits>
#include <map>

#include "common/half.hpp"
#include "common/parallel.hpp"
#include "compiler/check.hpp"
#include "compiler/data_parallel.hpp"
#include "compiler/session_impl.hpp"
#include "compiler/training.hpp"

namespace mn {

Device Device::open(const std::string& selector) {
    Device d;
    d.ctx_ = rt::Context::open(selector);
    return d;
}

Device Device::adopt(const VulkanHandles& handles) {
    Device d;
    d.ctx_ = rt::Context::adopt(handles);
    return d;
}

std::string Device::name() const { return ctx_->caps().name; }

std::string Device::describe() const { return rt::describe(ctx_->caps()); }

rt::BufferRange Session::Impl::range(int32_t v) const {
    const auto r = static_cast<size_t>(schedule.root(v));
    const uint64_t bytes = schedule.values[static_cast<size_t>(schedule.storage(v))].bytes();
    return {home[r], offset[r] + schedule.offset_in_root(v), (std::max<uint64_t>(bytes, 4) + 3) / 4 * 4};
}

int32_t Session::Impl::live(std::string_view name) const {
    const int32_t v = lookup(name);
    if (v < 0) throw Error("'" + std::string(name) + "' is not used by any output, so the program does not hold it");
    return v;
}

int32_t Session::Impl::lookup(std::string_view name) const {
    auto it = names.find(name);
    if (it != names.end()) return it->second;
    std::string known;
    for (const auto& [n, v] : names) known += (known.empty() ? "" : ", ") + n;
    throw Error("unknown tensor '" + std::string(name) + "'; known names: " + known);
}

void Session::Impl::write_now(int32_t v, const void* bytes) {
    write_many({v}, [&](size_t, uint8_t* dst) { std::memcpy(dst, bytes, value(v).bytes()); });
}

void Session::Impl::write_many(const std::vector<int32_t>& values, const std::function<void(size_t, uint8_t*)>& fill) {
    write_pieces(values, std::numeric_limits<int64_t>::max(), [&](size_t i, int64_t, int64_t, uint8_t* dst) { fill(i, dst); });
}

void Session::Impl::write_pieces(const std::vector<int32_t>& values, int64_t piece,
                                 const std::function<void(size_t, int64_t, int64_t, uint8_t*)>& fill) {
    parameters_changed = true;  // whatever it writes: the hoisted steps run again before the next use
    // The pieces go in chunks of at most 64 MiB (a larger piece gets a chunk of its own) through two staging
    // buffers: the threads fill one chunk while the device copies the one before. Few new pages to map (a
    // new host allocation is costly on every driver) and the copies take no time of their own.
    constexpr uint64_t kChunk = 64ull << 20;
    struct Piece {
        size_t i;
        int64_t begin, end;
        rt::BufferRange dst;  // the piece's bytes in the value's range; the last piece's include its padding
        uint64_t at;          // in its chunk's staging
    };
    std::vector<Piece> pieces;
    std::vector<size_t> chunk_ends;  // into pieces
    uint64_t staging_bytes = 0, used = 0;
    for (size_t i = 0; i < values.size(); ++i) {
        const rt::BufferRange r = range(values[i]);
        const uint64_t size = dtype_size(value(values[i]).dtype);
        const int64_t count = numel(value(values[i]).shape);
        for (int64_t begin = 0; begin == 0 || begin < count; begin += piece) {
            const int64_t end = begin + std::min(piece, count - begin);
            const uint64_t from = static_cast<uint64_t>(begin) * size;
            const uint64_t bytes = end == count ? r.size - from : static_cast<uint64_t>(end - begin) * size;
            if (used && used + bytes > kChunk) {
                chunk_ends.push_back(pieces.size());
                used = 0;
            }
            pieces.push_back({i, begin, end, {r.buffer, r.offset + from, bytes}, used});
            used += (bytes + 15) / 16 * 16;
            staging_bytes = std::max(staging_bytes, used);
        }
    }
    if (pieces.empty()) return;
    chunk_ends.push_back(pieces.size());
    rt::Buffer staging[2] = {rt::Buffer(ctx, staging_bytes, rt::MemoryKind::Upload),
                             chunk_ends.size() > 1 ? rt::Buffer(ctx, staging_bytes, rt::MemoryKind::Upload) : rt::Buffer()};
    std::future<void> copied[2];  // declared after the buffers: waited for before they go
    size_t begin = 0;
    for (size_t c = 0; c < chunk_ends.size(); begin = chunk_ends[c++]) {
        rt::Buffer& buffer = staging[c % 2];
        if (copied[c % 2].valid()) copied[c % 2].get();  // the chunk before last has left this buffer
        auto* base = static_cast<uint8_t*>(buffer.mapped());
        parallel_for(chunk_ends[c] - begin, [&](size_t k) {
            const Piece& p = pieces[begin + k];
            const uint64_t data = static_cast<uint64_t>(p.end - p.begin) * dtype_size(value(values[p.i]).dtype);
            const uint64_t written = std::min(data, p.dst.size);
            std::memset(base + p.at + written, 0, p.dst.size - written);  // the padding, which no fill writes
            fill(p.i, p.begin, p.end, base + p.at);
        });
        auto copy = std::make_shared<rt::Program>(ctx);
        for (size_t k = begin; k < chunk_ends[c]; ++k) copy->copy({&buffer, pieces[k].at, pieces[k].dst.size}, pieces[k].dst);
        copy->finish();
        if (c + 1 == chunk_ends.size()) {
            copy->run();  // the last chunk, and a set()'s only one, has nothing to overlap: no thread
        } else {
            copied[c % 2] = std::async(std::launch::async, [copy] { copy->run(); });
        }
    }
    for (auto& c : copied)
        if (c.valid()) c.get();
}

std::vector<std::vector<uint8_t>> Session::Impl::read_now(const std::vector<int32_t>& values) const {
    // In submits of at most 64 MiB of staging (a larger value gets one of its own), as write_pieces uploads: a
    // checkpoint's every tensor at once would double the host memory it takes.
    constexpr uint64_t kChunk = 64ull << 20;
    std::vector<std::vector<uint8_t>> out;
    for (size_t begin = 0; begin < values.size();) {
        size_t end = begin;
        uint64_t bytes = 0;
        std::vector<uint64_t> at;
        while (end < values.size() && (end == begin || bytes + range(values[end]).size <= kChunk)) {
            at.push_back(bytes);
            bytes += range(values[end++]).size;
        }
        rt::Buffer staging(ctx, bytes, rt::MemoryKind::Readback);
        rt::Program p(ctx);
        for (size_t i = begin; i < end; ++i) p.copy(range(values[i]), {&staging, at[i - begin], range(values[i]).size});
        p.finish();
        p.run();
        for (size_t i = begin; i < end; ++i) {
            const auto* first = static_cast<const uint8_t*>(staging.mapped()) + at[i - begin];
            out.emplace_back(first, first + value(values[i]).bytes());
        }
        begin = end;
    }
    return out;
}

void Session::copy_to(Session& dst, const std::vector<std::string>& names) const {
    if (impl_->ctx != dst.impl_->ctx) throw Error("copy_to: the sessions are on different devices");
    rt::Program p(impl_->ctx);
    for (const std::string& name : names) {
        const int32_t from = impl_->live(name), to = dst.impl_->live(name);
        if (impl_->value(from).shape != dst.impl_->value(to).shape || impl_->value(from).dtype != dst.impl_->value(to).dtype)
            throw Error("copy_to: '" + name + "' is " + shape_str(impl_->value(from).shape) + " here and " +
                        shape_str(dst.impl_->value(to).shape) + " in the destination");
        p.copy(impl_->range(from), dst.impl_->range(to));
    }
    p.finish();
    p.run();
    dst.impl_->parameters_changed = true;
}

const uint8_t* Session::Impl::read_back(int32_t v) const {
    // An output comes back after each run, its whole root (v may be a part of it); a parameter or state that is an output
    // is read now: set, load and copy_to change it between runs.
    auto it = readback_at.find(schedule.root(v));
    const sched::Storage storage = value(v).storage;
    if (it == readback_at.end() || storage == sched::Storage::Parameter || storage == sched::Storage::State) return nullptr;
    return static_cast<const uint8_t*>(readback.mapped()) + it->second + schedule.offset_in_root(v);
}

const uint8_t* Session::Impl::bytes_of(int32_t v, std::vector<uint8_t>& read) const {
    if (const uint8_t* mapped = read_back(v)) return mapped;
    read = std::move(read_now({v}).front());
    return read.data();
}

Session::Session() = default;
Session::~Session() = default;
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;
Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

namespace {

void check_count(std::string_view name, const sched::Value& v, size_t count) {
    if (static_cast<int64_t>(count) != numel(v.shape)) {
        throw Error("set '" + std::string(name) + "': " + std::to_string(count) + " values for shape " +
                    shape_str(v.shape) + " (" + std::to_string(numel(v.shape)) + " elements)");
    }
}

}  // namespace

namespace {

// set()'s value for `name` (-1: no output depends on it) and the bytes it gets, checked.
std::pair<int32_t, std::vector<uint8_t>> set_bytes(const Session::Impl& impl, std::string_view name, const std::vector<float>& data) {
    const int32_t v = impl.lookup(name);
    if (v < 0) return {v, {}};
    const sched::Value& val = impl.value(v);
    if (val.storage != sched::Storage::Input && val.storage != sched::Storage::Parameter &&
        val.storage != sched::Storage::State) {
        throw Error("set '" + std::string(name) + "': only inputs, parameters and states can be set");
    }
    check_count(name, val, data.size());
    std::vector<uint8_t> bytes(val.bytes());
    if (val.dtype == DType::F32) {
        std::memcpy(bytes.data(), data.data(), bytes.size());
    } else if (val.dtype == DType::F16) {
        for (size_t i = 0; i < data.size(); ++i) {
            const uint16_t h = float_to_half(data[i]);
            std::memcpy(bytes.data() + 2 * i, &h, 2);
        }
    } else {
        throw Error("set '" + std::string(name) + "': the tensor is i32; pass int32 values");
    }
    return {v, std::move(bytes)};
}

// get()'s value of `name`, a float tensor.
int32_t float_value(const Session::Impl& impl, std::string_view name) {
    const int32_t v = impl.live(name);
    if (impl.value(v).dtype == DType::I32) throw Error("get '" + std::string(name) + "': the tensor is i32; use get_i32");
    return v;
}

// A value's bytes as floats (f16 widened).
void widen(const sched::Value& val, const uint8_t* bytes, std::span<float> out) {
    if (val.dtype == DType::F32) {
        std::memcpy(out.data(), bytes, out.size_bytes());
        return;
    }
    for (size_t i = 0; i < out.size(); ++i) {
        uint16_t h;
        std::memcpy(&h, bytes + 2 * i, 2);
        out[i] = half_to_float(h);
    }
}

// set()'s writes of what set_bytes checked: inputs into the upload memory, the rest in one transfer.
void write_checked(Session::Impl& impl, const std::vector<std::pair<int32_t, std::vector<uint8_t>>>& checked) {
    std::vector<int32_t> values;
    std::vector<const std::vector<uint8_t>*> bytes;
    for (const auto& [v, b] : checked) {
        if (v < 0) continue;  // no output depends on it
        if (auto up = impl.upload_at.find(v); up != impl.upload_at.end()) {
            std::memcpy(static_cast<uint8_t*>(impl.upload.mapped()) + up->second, b.data(), b.size());
        } else {
            values.push_back(v);
            bytes.push_back(&b);
        }
    }
    if (!values.empty()) impl.write_many(values, [&](size_t i, uint8_t* dst) { std::memcpy(dst, bytes[i]->data(), bytes[i]->size()); });
}

}  // namespace

void Session::set(std::string_view name, const std::vector<float>& data) {
    std::vector<std::pair<int32_t, std::vector<uint8_t>>> checked;
    checked.push_back(set_bytes(*impl_, name, data));
    write_checked(*impl_, checked);
}

void Session::set(const std::map<std::string, std::vector<float>>& tensors) {
    std::vector<std::pair<int32_t, std::vector<uint8_t>>> checked;
    for (const auto& [name, data] : tensors) checked.push_back(set_bytes(*impl_, name, data));
    write_checked(*impl_, checked);
}

void Session::set(std::string_view name, const std::vector<int32_t>& data) {
    const int32_t v = impl_->lookup(name);
    if (v < 0) return;  // no output depends on it
    const sched::Value& val = impl_->value(v);
    if (val.dtype != DType::I32) {
        throw Error("set '" + std::string(name) + "': the tensor is " + dtype_name(val.dtype) + "; pass float values");
    }
    if (val.storage != sched::Storage::Input) throw Error("set '" + std::string(name) + "': only inputs can be set");
    check_count(name, val, data.size());
    std::memcpy(static_cast<uint8_t*>(impl_->upload.mapped()) + impl_->upload_at.at(v), data.data(), val.bytes());
}

rt::Program& Session::Impl::next_program() {
    last_run = steady_program && !parameters_changed ? steady_program.get() : program.get();
    parameters_changed = false;
    return *last_run;
}

void Session::Impl::run_program(const std::function<void(size_t segment)>& segment_done) {
    const auto start = std::chrono::steady_clock::now();
    rt::Program& p = next_program();
    std::vector<rt::Program*> segments = {&p};
    for (const auto& later : later_segments) segments.push_back(later.get());
    if (check_graph) {
        const ref::Feeds feeds = compiler::feeds_for_check(*this, *check_graph);
        p.run();
        compiler::check_against_reference(*this, *check_graph, feeds, check_limit);
    } else {
        for (rt::Program* segment : segments) segment->submit();
        size_t k = 0;
        try {
            for (; k < segments.size(); ++k) {
                segments[k]->wait();
                if (segment_done) segment_done(k);
            }
        } catch (...) {
            for (size_t i = k + 1; i < segments.size(); ++i) segments[i]->wait();  // none left in flight
            throw;
        }
    }
    if (trace_session) {
        // The steady program's dispatches are the last ones of the full program's.
        const size_t first = &p == program.get() ? 0 : hoisted_steps;
        std::vector<compiler::DispatchName> names(dispatch_names.begin() + first, dispatch_names.end());
        std::vector<std::pair<std::string, double>> times;
        for (const rt::Program* segment : segments)
            if (profiled)
                for (auto& t : segment->dispatch_times_ms()) times.push_back(std::move(t));
        compiler::Trace::active()->ran(trace_session, start, std::chrono::steady_clock::now(), names, first, times);
    }
}

void Session::run() { impl_->run_program(); }

void Session::record(VkCommandBuffer_T* command_buffer, size_t segment, size_t of) const {
    if (!impl_->later_segments.empty())
        throw Error("record: a data-parallel session's backward runs as several programs; step() runs them");
    if (!command_buffer) throw Error("record: no command buffer");
    // Segments of one step all come from the program its first segment took (segment 0 comes first;
    // a later one without it records from the whole program).
    const rt::Program& p = segment == 0 || !impl_->last_run ? impl_->next_program() : *impl_->last_run;
    p.record_into(command_buffer, segment, of);
}

namespace {

void require_training(const Session::Impl& impl, const char* what) {
    if (!impl.training) throw Error(std::string(what) + ": this session was compiled without a loss (CompileOptions::loss)");
}

// The learning rate and bias corrections of the next step, step_count() + 1.
void set_step_scalars(Session& s, const Session::Impl& impl) {
    const auto sc = compiler::step_scalars(impl.options, impl.steps_taken + 1);
    s.set(compiler::kLearningRate, std::vector<float>{sc.lr});
    s.set(compiler::kBiasCorrection1, std::vector<float>{sc.bias_correction1});
    s.set(compiler::kBiasCorrection2, std::vector<float>{sc.bias_correction2});
}

}  // namespace

float Session::step() {
    require_training(*impl_, "step");
    set_step_scalars(*this, *impl_);
    if (impl_->update_program) {  // data parallel: the gradients summed over the processes, then the update
        impl_->run_program([&](size_t segment) { compiler::exchange(*impl_, segment); });
        impl_->update_program->run();
        ++impl_->steps_taken;
        return impl_->loss_sum / static_cast<float>(impl_->options.data_parallel->processes);
    }
    run();
    ++impl_->steps_taken;
    return get(compiler::kLossOutput)[0];
}

void Session::record_step(VkCommandBuffer_T* command_buffer, size_t segment, size_t of) {
    require_training(*impl_, "record_step");
    if (impl_->update_program)
        throw Error("record_step: a data-parallel session steps with step(), which reduces the gradients between its "
                    "backward and its update");
    if (segment == 0) set_step_scalars(*this, *impl_);
    record(command_buffer, segment, of);
    if (segment == 0) ++impl_->steps_taken;
}

int64_t Session::step_count() const { return impl_->steps_taken; }

std::vector<float> Session::get(std::string_view name) const {
    std::vector<float> out(static_cast<size_t>(numel(impl_->value(impl_->live(name)).shape)));
    get(name, out);
    return out;
}

void Session::get(std::string_view name, std::span<float> out) const {
    const int32_t v = float_value(*impl_, name);
    const sched::Value& val = impl_->value(v);
    if (static_cast<int64_t>(out.size()) != numel(val.shape)) {
        throw Error("get '" + std::string(name) + "': " + std::to_string(out.size()) + " values for shape " + shape_str(val.shape));
    }
    std::vector<uint8_t> read;
    widen(val, impl_->bytes_of(v, read), out);
}

std::map<std::string, std::vector<float>> Session::get(const std::vector<std::string>& names) const {
    std::vector<int32_t> values, unread;  // unread: those not in the readback memory, read in one transfer
    std::vector<const uint8_t*> mapped;    // where each is in the readback memory, or null
    for (const std::string& name : names) {
        values.push_back(float_value(*impl_, name));
        mapped.push_back(impl_->read_back(values.back()));
        if (!mapped.back()) unread.push_back(values.back());
    }
    const std::vector<std::vector<uint8_t>> read = impl_->read_now(unread);
    std::map<std::string, std::vector<float>> out;
    for (size_t i = 0, k = 0; i < names.size(); ++i) {
        const sched::Value& val = impl_->value(values[i]);
        std::vector<float>& floats = out[names[i]];
        floats.resize(static_cast<size_t>(numel(val.shape)));
        widen(val, mapped[i] ? mapped[i] : read[k++].data(), floats);
    }
    return out;
}

std::vector<int32_t> Session::get_i32(std::string_view name) const {
    const int32_t v = impl_->live(name);
    if (impl_->value(v).dtype != DType::I32) throw Error("get_i32 '" + std::string(name) + "': the tensor is not i32");
    std::vector<uint8_t> read;
    const uint8_t* bytes = impl_->bytes_of(v, read);
    std::vector<int32_t> out(static_cast<size_t>(numel(impl_->value(v).shape)));
    std::memcpy(out.data(), bytes, out.size() * sizeof(int32_t));
    return out;
}

Shape Session::shape(std::string_view name) const { return impl_->value(impl_->live(name)).shape; }

DType Session::dtype(std::string_view name) const { return impl_->value(impl_->live(name)).dtype; }

const SessionStats& Session::stats() const { return impl_->stats; }

std::vector<std::pair<std::string, double>> Session::profile() const {
    if (!impl_->profiled) throw Error("profile: compile with CompileOptions::profile = true");
    std::vector<std::pair<std::string, double>> times = (impl_->last_run ? impl_->last_run : impl_->program.get())->dispatch_times_ms();
    for (const auto& segment : impl_->later_segments)  // a data-parallel backward's later segments
        for (auto& t : segment->dispatch_times_ms()) times.push_back(std::move(t));
    return times;
}

}  // namespace mn
