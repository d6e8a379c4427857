#include "model/model_executor.hpp"

#include <stdexcept>
#include <string>

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

void ModelExecutor::add_adapter(int32_t, const LoraAdapter&) {
  throw std::invalid_argument("LoRA adapters run on the CPU backend only for now (--device cpu)");
}

void ModelExecutor::drop_adapter(int32_t id) {
  throw std::invalid_argument("no LoRA adapter " + std::to_string(id) + " on this executor");
}

}  // namespace actorlm
