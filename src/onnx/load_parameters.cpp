// OnnxModel::load_parameters, the ONNX import's one use of a compiled session, kept apart from the parser
// (import.cpp, ops.cpp) so that the parser builds without the compiler and Vulkan (fuzz/onnx_fuzz.cpp).
#include "meganeura/onnx.hpp"

namespace mn {

// One transfer for all of them (Session::set of a map): one set() a tensor waited for the device each time.
void OnnxModel::load_parameters(Session& session) const { session.set(parameters); }

}  // namespace mn
