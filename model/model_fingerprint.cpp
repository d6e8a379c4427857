#include "model/model_fingerprint.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <vector>

namespace actorlm {
namespace {

namespace fs = std::filesystem;

constexpr int samples = 16;
constexpr size_t sample_bytes = 64 * 1024;

// FNV-1a, 64-bit.
void hash_bytes(uint64_t& h, const void* p, size_t n) {
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const uint8_t*>(p)[i]) * 0x100000001b3ull;
}

void hash_file(uint64_t& h, const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  if (!in || ec) throw std::runtime_error("cannot read model file " + path.string());
  const std::string name = path.filename().string();
  hash_bytes(h, name.data(), name.size());
  hash_bytes(h, &size, sizeof size);
  std::vector<char> buf(sample_bytes);
  for (int i = 0; i < samples; ++i) {
    const uintmax_t at = size <= sample_bytes ? 0 : (size - sample_bytes) / (samples - 1) * static_cast<uintmax_t>(i);
    in.seekg(static_cast<std::streamoff>(at));
    in.read(buf.data(), static_cast<std::streamsize>(std::min<uintmax_t>(sample_bytes, size)));
    hash_bytes(h, buf.data(), static_cast<size_t>(in.gcount()));
    in.clear();
    if (size <= sample_bytes) break;
  }
}

}  // namespace

std::string model_fingerprint(const std::string& model_path) {
  uint64_t h = 0xcbf29ce484222325ull;
  if (fs::is_directory(model_path)) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(model_path)) {
      const std::string ext = e.path().extension().string();
      if (e.is_regular_file() && (ext == ".json" || ext == ".safetensors")) files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    if (files.empty()) throw std::runtime_error("no model files in " + model_path);
    for (const auto& f : files) hash_file(h, f);
  } else {
    hash_file(h, model_path);
  }
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(h));
  return out;
}

}  // namespace actorlm
