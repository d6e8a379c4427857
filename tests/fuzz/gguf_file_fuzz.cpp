// Fuzzes the GGUF reader on arbitrary file images, then everything a model
// file reaches before any weight is used: every metadata getter on every
// key, the tensor table (every byte of every tensor is read, and the first
// row of each supported type is dequantized), the model config, and the
// tokenizer built from the file's vocabulary.
// Contract under test: a bad file is a ModelError, nothing else escapes, and
// whatever opens keeps every tensor inside the image.

#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "kernels/ggml_type.hpp"
#include "model/gguf_file.hpp"
#include "model/model_config.hpp"
#include "tokenizer/tokenizer.hpp"

namespace {

using namespace actorlm;

template <class F>
void refused_or_fine(F&& f) {
  try {
    f();
  } catch (const ModelError&) {
  }
}

void read_metadata(const GgufFile& file) {
  for (const std::string& key : file.keys()) {
    if (!file.has_key(key)) std::abort();
    refused_or_fine([&] { (void)file.get_int(key); });
    refused_or_fine([&] { (void)file.get_float(key); });
    refused_or_fine([&] { (void)file.get_bool(key); });
    refused_or_fine([&] { (void)file.get_string(key); });
    refused_or_fine([&] { (void)file.get_string_array(key); });
    refused_or_fine([&] { (void)file.get_float_array(key); });
    refused_or_fine([&] { (void)file.get_int_array(key); });
  }
}

void read_tensors(const GgufFile& file, std::span<const uint8_t> image) {
  std::vector<float> row;
  for (const GgufTensorInfo& t : file.tensors()) {
    if (file.find_tensor(t.name) == nullptr) std::abort();
    if (t.data < image.data() || t.byte_size > static_cast<uint64_t>(image.data() + image.size() - t.data)) {
      std::abort();
    }
    unsigned sum = 0;
    for (uint64_t i = 0; i < t.byte_size; ++i) sum += t.data[i];
    if (sum == 0xdeadbeef) std::abort();  // keeps the loop from being optimised away
    const auto type = static_cast<uint32_t>(t.type);
    if (ggml_type_supported(type) && t.shape[0] <= (1u << 16)) {
      row.resize(t.shape[0]);
      refused_or_fine([&] { dequantize_row(t.type, t.data, row.data(), static_cast<int64_t>(t.shape[0])); });
    }
  }
}

void use_vocabulary(const GgufFile& file) {
  refused_or_fine([&] {
    Tokenizer tokenizer = Tokenizer::from_gguf(file);
    auto ids = tokenizer.encode("Hello <|im_start|> wörld 123\n", tokenizer.add_bos_by_default(), true);
    (void)tokenizer.decode(ids);
    for (int32_t id : {-1, 0, tokenizer.vocab_size() - 1, tokenizer.vocab_size()}) {
      (void)tokenizer.token_to_piece(id);
      (void)tokenizer.is_end_of_generation(id);
    }
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> image(data, size);
  try {
    GgufFile file = GgufFile::from_memory(image, "fuzz.gguf");
    read_metadata(file);
    read_tensors(file, image);
    refused_or_fine([&] { config_from_gguf(file).validate(); });
    use_vocabulary(file);
  } catch (const ModelError&) {
  }
  return 0;
}
