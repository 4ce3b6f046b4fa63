#pragma once
// The arithmetic a session compiles to (DESIGN.md, arithmetic policy): Strict keeps every product
// and sum in f32; Fast lets the forward's matrix products use f16 tensor cores (f32 accumulation)
// where the device has them, and keeps gradient products in f32.
namespace mn {

enum class Precision { Strict, Fast };

}  // namespace mn
