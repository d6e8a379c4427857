#include "tokenizer/symbol_merger.hpp"

#include <cstring>

namespace actorlm {

std::vector<MergeSymbol> utf8_symbols(const char* s, size_t n) {
  // Sequence length by the lead byte's high nibble; continuation bytes (8..B)
  // stand alone, as llama.cpp splits them.
  static constexpr uint8_t length_by_nibble[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  std::vector<MergeSymbol> out;
  out.reserve(n);
  size_t at = 0;
  while (at < n) {
    size_t len = std::min<size_t>(length_by_nibble[static_cast<uint8_t>(s[at]) >> 4], n - at);
    MergeSymbol sym;
    sym.start = static_cast<uint32_t>(at);
    sym.len = static_cast<uint32_t>(len);
    sym.prev = static_cast<int32_t>(out.size()) - 1;
    at += len;
    sym.next = at < n ? static_cast<int32_t>(out.size()) + 1 : -1;
    out.push_back(sym);
  }
  return out;
}

}  // namespace actorlm
