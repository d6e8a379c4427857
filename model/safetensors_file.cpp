#include "model/safetensors_file.hpp"

#include <cstring>
#include <optional>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/gguf_file.hpp"
#include "model/half.hpp"
#include "model/mapped_file.hpp"

namespace actorlm {
namespace {

size_t dtype_size(const std::string& d) {
  if (d == "F32") return 4;
  if (d == "F16" || d == "BF16") return 2;
  return 0;
}

}  // namespace

int64_t SafetensorsTensor::element_count() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

struct SafetensorsFile::Impl {
  std::string path;
  std::optional<MappedFile> file;
  std::vector<SafetensorsTensor> tensors;
};

SafetensorsFile::SafetensorsFile(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SafetensorsFile::SafetensorsFile(SafetensorsFile&&) noexcept = default;
SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&&) noexcept = default;
SafetensorsFile::~SafetensorsFile() = default;

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->file.emplace(path);
  const size_t size = impl->file->size();
  if (size < 8) throw ModelError(path + ": too small to be a safetensors file");
  const uint8_t* base = impl->file->data();
  uint64_t header_len = 0;
  std::memcpy(&header_len, base, 8);
  if (header_len > size - 8 || header_len > (100u << 20)) {
    throw ModelError(path + ": corrupt safetensors header length " + std::to_string(header_len));
  }
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(base + 8, base + 8 + header_len);
  } catch (const std::exception& e) {
    throw ModelError(path + ": corrupt safetensors header: " + e.what());
  }
  if (!header.is_object()) throw ModelError(path + ": safetensors header is not a JSON object");
  const uint8_t* data = base + 8 + header_len;
  uint64_t data_size = size - 8 - header_len;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    SafetensorsTensor t;
    t.name = name;
    try {
      t.dtype = entry.at("dtype").get<std::string>();
      t.shape = entry.at("shape").get<std::vector<int64_t>>();
      auto offsets = entry.at("data_offsets").get<std::vector<uint64_t>>();
      if (offsets.size() != 2 || offsets[0] > offsets[1] || offsets[1] > data_size) {
        throw ModelError("data_offsets out of range");
      }
      for (int64_t d : t.shape) {
        if (d < 0 || d > (int64_t{1} << 40)) throw ModelError("invalid shape");
      }
      t.data = data + offsets[0];
      t.byte_size = offsets[1] - offsets[0];
      size_t es = dtype_size(t.dtype);
      if (es != 0 && static_cast<uint64_t>(t.element_count()) * es != t.byte_size) {
        throw ModelError("byte size " + std::to_string(t.byte_size) + " does not match shape and dtype");
      }
    } catch (const ModelError& e) {
      throw ModelError(path + ": tensor " + name + ": " + e.what());
    } catch (const nlohmann::json::exception& e) {
      throw ModelError(path + ": tensor " + name + ": " + e.what());
    }
    impl->tensors.push_back(std::move(t));
  }
  return SafetensorsFile(std::move(impl));
}

const std::string& SafetensorsFile::path() const { return impl_->path; }
const std::vector<SafetensorsTensor>& SafetensorsFile::tensors() const { return impl_->tensors; }

const SafetensorsTensor* SafetensorsFile::find(std::string_view name) const {
  for (const auto& t : impl_->tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::vector<float> SafetensorsFile::read_f32(const SafetensorsTensor& t) const {
  auto n = static_cast<size_t>(t.element_count());
  std::vector<float> out(n);
  if (t.dtype == "F32") {
    std::memcpy(out.data(), t.data, n * 4);
  } else if (t.dtype == "F16" || t.dtype == "BF16") {
    bool bf = t.dtype == "BF16";
    for (size_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, t.data + 2 * i, 2);
      out[i] = bf ? bf16_to_f32(h) : f16_to_f32(h);
    }
  } else {
    throw ModelError(impl_->path + ": tensor " + t.name + " has unsupported dtype " + t.dtype);
  }
  return out;
}

void write_safetensors(const std::string& path, const std::vector<SafetensorsWriteEntry>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  std::vector<uint8_t> data;
  for (const auto& t : tensors) {
    size_t begin = data.size();
    for (float v : t.values) {
      if (t.dtype == "F32") {
        uint8_t b[4];
        std::memcpy(b, &v, 4);
        data.insert(data.end(), b, b + 4);
      } else {
        uint16_t h;
        if (t.dtype == "F16") {
          h = f32_to_f16(v);
        } else {
          uint32_t bits;
          std::memcpy(&bits, &v, 4);
          h = static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);  // round to nearest even
        }
        data.push_back(static_cast<uint8_t>(h));
        data.push_back(static_cast<uint8_t>(h >> 8));
      }
    }
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
  }
  std::string h = header.dump();
  uint64_t len = h.size();
  std::ofstream out(path, std::ios::binary);
  if (!out) throw ModelError(path + ": cannot write");
  out.write(reinterpret_cast<const char*>(&len), 8);
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
}

}  // namespace actorlm
