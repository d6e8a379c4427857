#include "model/safetensors_file.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "model/gguf_file.hpp"
#include "kernels/half.hpp"
#include "model/mapped_file.hpp"

namespace actorlm {
namespace fs = std::filesystem;
namespace {

// Element sizes of the safetensors dtypes; 0 for names we do not know.
size_t dtype_size(const std::string& d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
  return 0;
}

// Dimensions beyond 2^40, or a product beyond 2^56, cannot be a real tensor
// and would overflow the size arithmetic.
int64_t checked_element_count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || d > (int64_t{1} << 40)) throw ModelError("invalid dimension " + std::to_string(d));
    if (d != 0 && n > (int64_t{1} << 56) / d) throw ModelError("shape has too many elements");
    n *= d;
  }
  return n;
}

}  // namespace

int64_t SafetensorsTensor::element_count() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // bounded at open()
  return n;
}

struct SafetensorsFile::Impl {
  std::string path;
  std::optional<MappedFile> file;
  std::vector<SafetensorsTensor> tensors;
  std::map<std::string, size_t, std::less<>> by_name;
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
  if (size < 8) throw ModelError(path + ": too small to be a safetensors file (" + std::to_string(size) + " bytes)");
  const uint8_t* base = impl->file->data();
  uint64_t header_len = 0;
  std::memcpy(&header_len, base, 8);  // little-endian u64, as the format says
  if (header_len > size - 8 || header_len > (uint64_t{100} << 20)) {
    throw ModelError(path + ": corrupt safetensors header length " + std::to_string(header_len) + " in a file of " +
                     std::to_string(size) + " bytes");
  }
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(base + 8, base + 8 + header_len);
  } catch (const std::exception& e) {
    throw ModelError(path + ": corrupt safetensors header: " + e.what());
  }
  if (!header.is_object()) throw ModelError(path + ": safetensors header is not a JSON object");
  const uint8_t* data = base + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    SafetensorsTensor t;
    t.name = name;
    try {
      if (!entry.is_object()) throw ModelError("entry is not an object");
      t.dtype = entry.at("dtype").get<std::string>();
      const auto& shape = entry.at("shape");
      const auto& offsets = entry.at("data_offsets");
      if (!shape.is_array()) throw ModelError("shape is not an array");
      for (const auto& d : shape) {
        if (!d.is_number_integer()) throw ModelError("shape holds a non-integer");
        t.shape.push_back(d.is_number_unsigned() && d.get<uint64_t>() > (uint64_t{1} << 62) ? -1 : d.get<int64_t>());
      }
      if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
          !offsets[1].is_number_unsigned()) {
        throw ModelError("data_offsets must be two non-negative integers");
      }
      uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
      if (begin > end || end > data_size) {
        throw ModelError("data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                         ") lie outside the " + std::to_string(data_size) + " data bytes");
      }
      int64_t count = checked_element_count(t.shape);
      size_t es = dtype_size(t.dtype);
      if (es == 0) throw ModelError("unknown dtype " + t.dtype);
      if (static_cast<uint64_t>(count) * es != end - begin) {
        throw ModelError("holds " + std::to_string(end - begin) + " bytes, but its shape and dtype " + t.dtype +
                         " need " + std::to_string(static_cast<uint64_t>(count) * es));
      }
      t.data = data + begin;
      t.byte_size = end - begin;
    } catch (const ModelError& e) {
      throw ModelError(path + ": tensor " + name + ": " + e.what());
    } catch (const nlohmann::json::exception& e) {
      throw ModelError(path + ": tensor " + name + ": " + e.what());
    }
    impl->by_name.emplace(t.name, impl->tensors.size());
    impl->tensors.push_back(std::move(t));
  }
  return SafetensorsFile(std::move(impl));
}

const std::string& SafetensorsFile::path() const { return impl_->path; }
const std::vector<SafetensorsTensor>& SafetensorsFile::tensors() const { return impl_->tensors; }

const SafetensorsTensor* SafetensorsFile::find(std::string_view name) const {
  auto it = impl_->by_name.find(name);
  return it == impl_->by_name.end() ? nullptr : &impl_->tensors[it->second];
}

std::vector<float> SafetensorsFile::read_f32(const SafetensorsTensor& t) const {
  auto n = static_cast<size_t>(t.element_count());
  if (t.dtype == "F32") {
    std::vector<float> out(n);
    std::memcpy(out.data(), t.data, n * 4);
    return out;
  }
  if (t.dtype == "F16" || t.dtype == "BF16") {
    std::vector<float> out(n);
    const bool bf = t.dtype == "BF16";
    for (size_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, t.data + 2 * i, 2);
      out[i] = bf ? bf16_to_f32(h) : f16_to_f32(h);
    }
    return out;
  }
  throw ModelError(impl_->path + ": tensor " + t.name + " has unsupported dtype " + t.dtype +
                   " (F32, F16 and BF16 are)");
}

// ---------------------------------------------------------------- folders
SafetensorsCheckpoint SafetensorsCheckpoint::open(const std::string& dir) {
  SafetensorsCheckpoint c;
  c.dir_ = dir;
  const fs::path root(dir);
  const fs::path index_path = root / "model.safetensors.index.json";
  std::error_code ec;
  // Shard file -> tensors the index assigns to it (empty without an index).
  std::map<std::string, std::vector<std::string>> planned;
  if (fs::exists(index_path, ec)) {
    std::ifstream in(index_path);
    nlohmann::json index;
    try {
      index = nlohmann::json::parse(in);
      for (const auto& [tensor, shard] : index.at("weight_map").items()) {
        std::string file = shard.get<std::string>();
        if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..") {
          throw ModelError("weight_map sends " + tensor + " to '" + file + "', not a file in the folder");
        }
        planned[file].push_back(tensor);
      }
    } catch (const ModelError& e) {
      throw ModelError(index_path.string() + ": " + e.what());
    } catch (const std::exception& e) {
      throw ModelError(index_path.string() + ": not a valid index: " + e.what());
    }
    if (planned.empty()) throw ModelError(index_path.string() + ": weight_map is empty");
  } else if (fs::exists(root / "model.safetensors", ec)) {
    planned["model.safetensors"];
  } else {
    for (const auto& e : fs::directory_iterator(root, ec)) {
      if (e.path().extension() == ".safetensors") planned[e.path().filename().string()];
    }
    if (ec) throw ModelError(dir + ": cannot list the folder: " + ec.message());
    if (planned.empty()) throw ModelError(dir + ": no *.safetensors files");
  }

  for (const auto& [file, names] : planned) {
    fs::path p = root / file;
    if (!fs::exists(p, ec)) throw ModelError(index_path.string() + ": shard " + file + " is missing from " + dir);
    c.shards_.push_back(SafetensorsFile::open(p.string()));
  }
  // Index only once the vector no longer moves.
  size_t i = 0;
  for (const auto& [file, names] : planned) {
    const SafetensorsFile& shard = c.shards_[i++];
    for (const auto& t : shard.tensors()) {
      if (!c.index_.emplace(t.name, Entry{&shard, &t}).second) {
        throw ModelError(shard.path() + ": tensor " + t.name + " is also in " + c.index_[t.name].file->path());
      }
    }
    for (const auto& name : names) {
      if (!shard.find(name)) {
        throw ModelError(index_path.string() + ": weight_map puts " + name + " in " + file + ", which lacks it");
      }
    }
  }
  return c;
}

SafetensorsCheckpoint::Entry SafetensorsCheckpoint::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? Entry{} : it->second;
}

std::vector<std::string> SafetensorsCheckpoint::tensor_names() const {
  std::vector<std::string> names;
  for (const auto& [name, e] : index_) names.push_back(name);
  return names;
}

// ---------------------------------------------------------------- writer
void write_safetensors(const std::string& path, const std::vector<SafetensorsWriteEntry>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  std::vector<uint8_t> data;
  for (const auto& t : tensors) {
    if (t.dtype != "F32" && t.dtype != "F16" && t.dtype != "BF16") {
      throw ModelError(path + ": cannot write tensor " + t.name + " as " + t.dtype);
    }
    if (checked_element_count(t.shape) != static_cast<int64_t>(t.values.size())) {
      throw ModelError(path + ": tensor " + t.name + " has " + std::to_string(t.values.size()) +
                       " values for its shape");
    }
    size_t begin = data.size();
    for (float v : t.values) {
      if (t.dtype == "F32") {
        uint8_t b[4];
        std::memcpy(b, &v, 4);
        data.insert(data.end(), b, b + 4);
        continue;
      }
      uint16_t h;
      if (t.dtype == "F16") {
        h = f32_to_f16(v);
      } else {
        uint32_t bits;
        std::memcpy(&bits, &v, 4);
        h = static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);  // nearest even
      }
      data.push_back(static_cast<uint8_t>(h));
      data.push_back(static_cast<uint8_t>(h >> 8));
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
  if (!out) throw ModelError(path + ": write failed");
}

}  // namespace actorlm
