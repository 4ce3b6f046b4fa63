// The C API's devices, compiling and sessions: thin calls into mn::Device, mn::compile and
// mn::Session, with the element counts a C caller passes checked against the tensor's.
#include "capi/handles.hpp"

#include <map>
#include <span>

namespace mn::capi {

namespace {

thread_local std::string last_error;

void check_count(const Session& s, const char* name, size_t count) {
    const int64_t want = numel(s.shape(name));
    if (static_cast<int64_t>(count) != want)
        throw Error("'" + std::string(name) + "' has " + std::to_string(want) + " elements " +
                    shape_str(s.shape(name)) + ", the buffer " + std::to_string(count));
}

Optimizer optimizer_of(const mn_compile_options& o) {
    switch (o.optimizer) {
        case MN_ADAMW: return AdamW{.lr = o.lr, .beta1 = o.beta1, .beta2 = o.beta2, .eps = o.eps, .weight_decay = o.weight_decay};
        case MN_ADAM: return Adam{.lr = o.lr, .beta1 = o.beta1, .beta2 = o.beta2, .eps = o.eps, .weight_decay = o.weight_decay};
        case MN_SGD: return SGD{.lr = o.lr, .momentum = o.momentum, .weight_decay = o.weight_decay};
    }
    throw Error("unknown optimizer " + std::to_string(static_cast<int>(o.optimizer)) + "; expected MN_ADAMW, MN_ADAM or MN_SGD");
}

Precision precision_of(mn_precision p) {
    switch (p) {
        case MN_STRICT: return Precision::Strict;
        case MN_FAST: return Precision::Fast;
    }
    throw Error("unknown precision " + std::to_string(static_cast<int>(p)) + "; expected MN_STRICT or MN_FAST");
}

}  // namespace

void set_last_error(const std::string& message) { last_error = message; }

void write_shape(const Shape& shape, int64_t* dims, int capacity, int* ndim) {
    required(ndim, "ndim") = static_cast<int>(shape.size());
    if (!dims) return;
    if (capacity < static_cast<int>(shape.size()))
        throw Error("the shape " + shape_str(shape) + " has " + std::to_string(shape.size()) + " dims, capacity is " +
                    std::to_string(capacity));
    for (size_t i = 0; i < shape.size(); ++i) dims[i] = shape[i];
}

}  // namespace mn::capi

using mn::capi::guard;
using mn::capi::required;
using mn::capi::text;

extern "C" {

const char* mn_version(void) { return MEGANEURA_VERSION; }

const char* mn_last_error(void) { return mn::capi::last_error.c_str(); }

mn_status mn_device_open(const char* selector, mn_device** device) {
    return guard([&] {
        required(device, "device") = nullptr;
        mn::Device d = mn::Device::open(selector ? selector : "");
        *device = new mn_device{d, d.name()};
    });
}

const char* mn_device_name(const mn_device* device) { return device ? device->name.c_str() : ""; }

void mn_device_free(mn_device* device) { delete device; }

mn_compile_options mn_compile_options_default(void) {
    const mn::AdamW adamw;
    return {.loss = MN_NO_TENSOR, .optimizer = MN_ADAMW, .lr = adamw.lr, .beta1 = adamw.beta1, .beta2 = adamw.beta2,
            .eps = adamw.eps, .weight_decay = adamw.weight_decay, .momentum = 0, .precision = MN_STRICT, .seed = 0};
}

mn_status mn_compile(const mn_graph* graph, const mn_device* device, const mn_compile_options* options,
                     mn_session** session) {
    return guard([&] {
        required(session, "session") = nullptr;
        const mn::Graph& g = required(graph, "graph").graph;
        const mn_compile_options o = options ? *options : mn_compile_options_default();
        mn::CompileOptions c{.optimizer = mn::capi::optimizer_of(o), .precision = mn::capi::precision_of(o.precision),
                             .seed = o.seed};
        if (o.loss != MN_NO_TENSOR) {
            if (o.loss < 0 || o.loss >= static_cast<mn_tensor>(g.nodes().size()))
                throw mn::Error("options.loss " + std::to_string(o.loss) + " is not a tensor of this graph");
            c.loss = mn::Tensor{const_cast<mn::Graph*>(&g), o.loss};
        }
        *session = new mn_session{mn::compile(g, required(device, "device").device, c)};
    });
}

void mn_session_free(mn_session* session) { delete session; }

mn_status mn_session_set_f32(mn_session* s, const char* name, const float* data, size_t count) {
    return guard([&] {
        mn::Session& session = required(s, "session").session;
        mn::capi::check_count(session, text(name, "name").c_str(), count);
        required(data, "data");
        session.set(name, std::vector<float>(data, data + count));
    });
}

mn_status mn_session_set_i32(mn_session* s, const char* name, const int32_t* data, size_t count) {
    return guard([&] {
        mn::Session& session = required(s, "session").session;
        mn::capi::check_count(session, text(name, "name").c_str(), count);
        required(data, "data");
        session.set(name, std::vector<int32_t>(data, data + count));
    });
}

mn_status mn_session_set_f32_many(mn_session* s, size_t n, const char* const* names, const float* const* data,
                                  const size_t* counts) {
    return guard([&] {
        mn::Session& session = required(s, "session").session;
        if (n) required(names, "names"), required(data, "data"), required(counts, "counts");
        std::map<std::string, std::vector<float>> tensors;
        for (size_t i = 0; i < n; ++i) {
            const std::string name = text(names[i], "names[i]");
            mn::capi::check_count(session, name.c_str(), counts[i]);
            const float* values = &required(data[i], "data[i]");
            tensors[name].assign(values, values + counts[i]);
        }
        session.set(tensors);
    });
}

mn_status mn_session_run(mn_session* s) {
    return guard([&] { required(s, "session").session.run(); });
}

mn_status mn_session_step(mn_session* s, float* loss) {
    return guard([&] {
        const float l = required(s, "session").session.step();
        if (loss) *loss = l;
    });
}

mn_status mn_session_step_count(const mn_session* s, int64_t* steps) {
    return guard([&] { required(steps, "steps") = required(s, "session").session.step_count(); });
}

mn_status mn_session_get_f32(const mn_session* s, const char* name, float* out, size_t count) {
    return guard([&] {
        const mn::Session& session = required(s, "session").session;
        mn::capi::check_count(session, text(name, "name").c_str(), count);
        session.get(name, std::span<float>(&required(out, "out"), count));
    });
}

mn_status mn_session_get_f32_many(const mn_session* s, size_t n, const char* const* names, float* const* out,
                                  const size_t* counts) {
    return guard([&] {
        const mn::Session& session = required(s, "session").session;
        if (n) required(names, "names"), required(out, "out"), required(counts, "counts");
        std::vector<std::string> wanted;
        for (size_t i = 0; i < n; ++i) {
            wanted.push_back(text(names[i], "names[i]"));
            mn::capi::check_count(session, wanted.back().c_str(), counts[i]);
            required(out[i], "out[i]");
        }
        const std::map<std::string, std::vector<float>> got = session.get(wanted);
        for (size_t i = 0; i < n; ++i) std::copy(got.at(wanted[i]).begin(), got.at(wanted[i]).end(), out[i]);
    });
}

mn_status mn_session_get_i32(const mn_session* s, const char* name, int32_t* out, size_t count) {
    return guard([&] {
        const mn::Session& session = required(s, "session").session;
        mn::capi::check_count(session, text(name, "name").c_str(), count);
        required(out, "out");
        const std::vector<int32_t> values = session.get_i32(name);
        std::copy(values.begin(), values.end(), out);
    });
}

mn_status mn_session_shape(const mn_session* s, const char* name, int64_t* dims, int capacity, int* ndim) {
    return guard([&] { mn::capi::write_shape(required(s, "session").session.shape(text(name, "name")), dims, capacity, ndim); });
}

mn_status mn_session_save(const mn_session* s, const char* path) {
    return guard([&] { required(s, "session").session.save(text(path, "path")); });
}

mn_status mn_session_load(mn_session* s, const char* path) {
    return guard([&] { required(s, "session").session.load(text(path, "path")); });
}

}  // extern "C"
