#include "model/model_executor.hpp"

#include <stdexcept>

namespace actorlm {

void ModelExecutor::read_kv(std::span<const int32_t>, int32_t, int32_t, std::span<uint8_t>) const {
  throw std::logic_error("this executor cannot copy KV rows out of its pool");
}

bool ModelExecutor::kv_spans(std::span<const int32_t>, int32_t, int32_t, std::vector<std::span<uint8_t>>&) {
  return false;
}

void ModelExecutor::write_kv(std::span<const int32_t>, int32_t, int32_t, std::span<const uint8_t>) {
  throw std::logic_error("this executor cannot copy KV rows into its pool");
}

}  // namespace actorlm
