#pragma once
// What the C API's opaque handles hold, and the guard every C entry point runs its body in: an
// mn::Error becomes MN_ERROR, bad_alloc MN_OUT_OF_MEMORY, anything else MN_INTERNAL, each with its
// message kept for mn_last_error(), so no exception crosses into C.
#include <new>
#include <string>

#include "meganeura/meganeura.h"
#include "meganeura/session.hpp"

struct mn_graph {
    mn::Graph graph;
};

struct mn_device {
    mn::Device device;
    std::string name;
};

struct mn_session {
    mn::Session session;
};

namespace mn::capi {

void set_last_error(const std::string& message);

template <class Body>
mn_status guard(Body&& body) noexcept {
    try {
        set_last_error("");
        body();
        return MN_OK;
    } catch (const Error& e) {
        set_last_error(e.what());
        return MN_ERROR;
    } catch (const std::bad_alloc&) {
        set_last_error("out of host memory");
        return MN_OUT_OF_MEMORY;
    } catch (const std::exception& e) {
        set_last_error(std::string("internal error: ") + e.what());
        return MN_INTERNAL;
    } catch (...) {
        set_last_error("internal error: unknown exception");
        return MN_INTERNAL;
    }
}

// A pointer argument that must not be NULL, or an mn::Error naming it.
template <class T>
T& required(T* pointer, const char* what) {
    if (!pointer) throw Error(std::string(what) + " is NULL");
    return *pointer;
}

// A C string argument, or an mn::Error when it is NULL.
inline std::string text(const char* s, const char* what) { return &required(s, what); }

// dims[0..capacity) and *ndim from a shape (the C API's shape queries).
void write_shape(const Shape& shape, int64_t* dims, int capacity, int* ndim);

}  // namespace mn::capi
