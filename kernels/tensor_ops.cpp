#include "kernels/tensor_ops.hpp"

#include <stdexcept>

namespace actorlm {

// A device without LoRA kernels refuses adapters when one is loaded, so no
// pass ever reaches lora() or drop_lora() there.
LoraId TensorOps::add_lora(std::span<const float>, std::span<const float>, int32_t, int64_t, int64_t, float) {
  throw std::invalid_argument("LoRA adapters run on the CPU backend only for now (--device cpu)");
}

void TensorOps::drop_lora(LoraId) { throw std::logic_error("tensor ops: drop_lora on a device without adapters"); }

void TensorOps::lora(Tensor, std::span<const LoraSlice>, Tensor) {
  throw std::logic_error("tensor ops: lora on a device without adapters");
}

}  // namespace actorlm
