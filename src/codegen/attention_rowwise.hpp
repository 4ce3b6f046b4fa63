// The row-wise attention kernels' GLSL (see attention_rowwise.cpp); attention.cpp picks them for problems with
// few rows and supplies the interface and the shared definitions.
#pragma once

namespace mn::codegen {

extern const char* const kRowwiseForward;
extern const char* const kRowwiseGradQ;
extern const char* const kRowwiseGradKV;

}  // namespace mn::codegen
