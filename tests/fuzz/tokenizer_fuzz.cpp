// Fuzzes the tokenizer with the default model's vocabulary (loaded once;
// $ACTORLM_MODEL overrides the path) on arbitrary bytes.
// Contract under test:
//   - encode takes any bytes (valid UTF-8 or not) and gives ids inside the
//     vocabulary; decoding the ids of valid UTF-8 gives the bytes back
//     (byte-level BPE loses nothing; ill-formed bytes are read as U+FFFD);
//   - decode and the incremental detokenizer take any ids, in range or not,
//     and the detokenizer emits only valid UTF-8.
//
// Input: byte 0 holds flags (bit 0: add BOS, bit 1: parse special tokens,
// bit 2: treat the rest as little-endian int32 ids instead of text).

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "model/default_model.hpp"
#include "model/gguf_file.hpp"
#include "tests/fuzz/default_vocabulary.hpp"
#include "tokenizer/incremental_detokenizer.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tokenizer/unicode.hpp"

namespace {

using namespace actorlm;

const Tokenizer& tokenizer() { return fuzz::default_tokenizer("tokenizer_fuzz"); }

bool has_byte_token(uint8_t b) {
  static const std::vector<bool> present = [] {
    std::vector<bool> p(256);
    for (int i = 0; i < 256; ++i) {
      p[i] = tokenizer().token_id(unicode::encode_utf8(unicode::byte_to_char(static_cast<uint8_t>(i)))).has_value();
    }
    return p;
  }();
  return present[b];
}

void check_text(std::string_view text, bool add_bos, bool parse_special) {
  const Tokenizer& tok = tokenizer();
  std::vector<int32_t> ids = tok.encode(text, add_bos, parse_special);
  for (int32_t id : ids) {
    if (id < 0 || id >= tok.vocab_size()) std::abort();
  }
  size_t first = 0;
  if (add_bos && tok.bos_id()) {
    if (ids.empty() || ids.front() != *tok.bos_id()) std::abort();
    first = 1;
  }
  std::string back = tok.decode(std::span<const int32_t>(ids).subspan(first));
  // Ill-formed UTF-8 is read as U+FFFD, as llama.cpp does, and a byte with
  // no byte token in the vocabulary (SmolLM2 lacks most ASCII control
  // bytes) becomes the unknown token, so only valid text made of bytes the
  // vocabulary has comes back byte for byte.
  if (sanitize_utf8(text) != text) return;
  for (char c : text) {
    if (!has_byte_token(static_cast<uint8_t>(c))) return;
  }
  if (back != text) {
    std::fprintf(stderr, "tokenizer_fuzz: %zu bytes encode to %zu ids that decode to %zu other bytes\n",
                 text.size(), ids.size(), back.size());
    for (int32_t id : ids) std::fprintf(stderr, " %d", id);
    std::fprintf(stderr, "\n[%.*s]\n", static_cast<int>(back.size()), back.data());
    std::abort();
  }
}

void check_ids(const std::vector<int32_t>& ids) {
  const Tokenizer& tok = tokenizer();
  (void)tok.decode(ids, true);
  (void)tok.decode(ids, false);
  IncrementalDetokenizer detok(tok, {"\n\n", "<|im_end|>", "é"});
  std::string streamed;
  for (int32_t id : ids) {
    auto delta = detok.push(id);
    streamed += delta.text;
    if (delta.stopped) break;
  }
  streamed += detok.flush();
  if (streamed != detok.text() || sanitize_utf8(streamed) != streamed) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)tokenizer();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t flags = data[0];
  std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  if (flags & 4) {
    std::vector<int32_t> ids(rest.size() / 4);
    if (!ids.empty()) std::memcpy(ids.data(), rest.data(), ids.size() * 4);
    check_ids(ids);
  } else {
    check_text(rest, flags & 1, flags & 2);
  }
  return 0;
}
