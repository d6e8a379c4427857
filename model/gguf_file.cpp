#include "model/gguf_file.hpp"

#include "model/mapped_file.hpp"

#include <cstring>
#include <limits>
#include <map>
#include <variant>

namespace actorlm {
namespace {

enum ValueType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};

const char* value_type_name(uint32_t t) {
  static const char* names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool",
                                "string", "array", "u64", "i64", "f64"};
  return t < 13 ? names[t] : "unknown";
}

bool is_int(uint32_t t) { return t <= kI32 ? t != kF32 : (t == kU64 || t == kI64); }
bool is_float(uint32_t t) { return t == kF32 || t == kF64; }

// A metadata value. Arrays keep their element type and one of the vectors.
struct Value {
  uint32_t type = 0;
  int64_t i = 0;
  double f = 0;
  bool b = false;
  std::string s;
  uint32_t elem_type = 0;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;
  uint64_t array_len = 0;
  // A u64 (or an array holding one) beyond int64 range: the file still opens,
  // reading the key as an integer is the error.
  bool beyond_int64 = false;
};

// Bounds-checked cursor over the mapped file.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size, const std::string& path) : p_(data), size_(size), path_(path) {}
  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }
  void need(size_t n, const char* what) const {
    if (n > remaining()) {
      throw ModelError(path_ + ": truncated GGUF file: needed " + std::to_string(n) + " bytes for " +
                       what + " at offset " + std::to_string(pos_) + ", " +
                       std::to_string(remaining()) + " left");
    }
  }
  template <class T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string read_string(const char* what) {
    auto len = read<uint64_t>(what);
    need(len, what);
    std::string s(reinterpret_cast<const char*>(p_ + pos_), len);
    pos_ += len;
    return s;
  }
  void skip(size_t n, const char* what) {
    need(n, what);
    pos_ += n;
  }

 private:
  const uint8_t* p_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& path_;
};

size_t scalar_size(uint32_t t) {
  switch (t) {
    case kU8: case kI8: case kBool: return 1;
    case kU16: case kI16: return 2;
    case kU32: case kI32: case kF32: return 4;
    case kU64: case kI64: case kF64: return 8;
    default: return 0;
  }
}

void read_scalar(Cursor& c, uint32_t t, Value& v, const std::string& path, const std::string& key) {
  switch (t) {
    case kU8: v.i = c.read<uint8_t>("u8"); break;
    case kI8: v.i = c.read<int8_t>("i8"); break;
    case kU16: v.i = c.read<uint16_t>("u16"); break;
    case kI16: v.i = c.read<int16_t>("i16"); break;
    case kU32: v.i = c.read<uint32_t>("u32"); break;
    case kI32: v.i = c.read<int32_t>("i32"); break;
    case kU64: {
      auto u = c.read<uint64_t>("u64");
      v.beyond_int64 = u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
      v.i = v.beyond_int64 ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(u);
      break;
    }
    case kI64: v.i = c.read<int64_t>("i64"); break;
    case kF32: v.f = c.read<float>("f32"); break;
    case kF64: v.f = c.read<double>("f64"); break;
    case kBool: v.b = c.read<uint8_t>("bool") != 0; break;
    default: throw ModelError(path + ": metadata " + key + " has unknown value type " + std::to_string(t));
  }
}

Value read_value(Cursor& c, uint32_t type, const std::string& path, const std::string& key, int depth) {
  Value v;
  v.type = type;
  if (type == kString) {
    v.s = c.read_string("a metadata string");
  } else if (type == kArray) {
    if (depth > 2) throw ModelError(path + ": metadata " + key + " nests arrays too deeply");
    v.elem_type = c.read<uint32_t>("an array type");
    v.array_len = c.read<uint64_t>("an array length");
    size_t min_elem = v.elem_type == kString ? 8 : v.elem_type == kArray ? 12 : scalar_size(v.elem_type);
    if (min_elem == 0) {
      throw ModelError(path + ": metadata " + key + " is an array of unknown type " + std::to_string(v.elem_type));
    }
    if (v.array_len > c.remaining() / min_elem) {
      throw ModelError(path + ": truncated GGUF file: metadata array " + key + " claims " +
                       std::to_string(v.array_len) + " elements");
    }
    for (uint64_t k = 0; k < v.array_len; ++k) {
      if (v.elem_type == kString) {
        v.strings.push_back(c.read_string("an array string"));
      } else if (v.elem_type == kArray) {
        read_value(c, kArray, path, key, depth + 1);  // nested arrays are parsed, not kept
      } else {
        Value e;
        read_scalar(c, v.elem_type, e, path, key);
        v.beyond_int64 = v.beyond_int64 || e.beyond_int64;
        if (is_float(v.elem_type)) {
          v.floats.push_back(e.f);
        } else {
          v.ints.push_back(v.elem_type == kBool ? e.b : e.i);
        }
      }
    }
  } else {
    read_scalar(c, type, v, path, key);
  }
  return v;
}

}  // namespace

uint64_t GgufTensorInfo::element_count() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

struct GgufFile::Impl {
  std::string path;
  std::shared_ptr<const MappedFile> file;  // null for from_memory images
  uint32_t version = 0;
  std::map<std::string, Value, std::less<>> meta;
  std::vector<GgufTensorInfo> tensors;
  std::map<std::string, size_t, std::less<>> tensor_index;

  const Value* find(std::string_view key) const {
    auto it = meta.find(key);
    return it == meta.end() ? nullptr : &it->second;
  }
  [[noreturn]] void type_error(std::string_view key, const Value& v, const char* wanted) const {
    std::string got = value_type_name(v.type);
    if (v.type == kArray) got += std::string(" of ") + value_type_name(v.elem_type);
    throw ModelError(path + ": metadata " + std::string(key) + " is " + got + ", expected " + wanted);
  }
  void range_check(std::string_view key, const Value& v) const {
    if (v.beyond_int64) throw ModelError(path + ": metadata " + std::string(key) + " holds a u64 beyond int64 range");
  }
};

GgufFile::GgufFile(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GgufFile::GgufFile(GgufFile&&) noexcept = default;
GgufFile& GgufFile::operator=(GgufFile&&) noexcept = default;
GgufFile::~GgufFile() = default;

GgufFile GgufFile::open(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->file = std::make_shared<const MappedFile>(path);
  const uint8_t* base = impl->file->data();
  const size_t size = impl->file->size();
  return parse(std::move(impl), base, size);
}

std::shared_ptr<const MappedFile> GgufFile::mapping() const { return impl_->file; }

GgufFile GgufFile::from_memory(std::span<const uint8_t> bytes, const std::string& name) {
  auto impl = std::make_unique<Impl>();
  impl->path = name;
  return parse(std::move(impl), bytes.data(), bytes.size());
}

GgufFile GgufFile::parse(std::unique_ptr<Impl> impl, const uint8_t* base, size_t size) {
  const std::string& path = impl->path;
  if (size < 24) throw ModelError(path + ": too small to be a GGUF file (" + std::to_string(size) + " bytes)");
  Cursor c(base, size, impl->path);

  if (std::memcmp(base, "GGUF", 4) != 0) throw ModelError(path + ": not a GGUF file (bad magic)");
  c.skip(4, "magic");
  impl->version = c.read<uint32_t>("the version");
  if (impl->version == 0x02000000u || impl->version == 0x03000000u) {
    throw ModelError(path + ": big-endian GGUF files are not supported");
  }
  if (impl->version != 2 && impl->version != 3) {
    throw ModelError(path + ": unsupported GGUF version " + std::to_string(impl->version) + " (2 and 3 are)");
  }
  auto n_tensors = c.read<uint64_t>("the tensor count");
  auto n_kv = c.read<uint64_t>("the metadata count");
  // Each entry takes at least 12 (metadata) or 28 (tensor info) bytes.
  if (n_kv > c.remaining() / 12 || n_tensors > c.remaining() / 28) {
    throw ModelError(path + ": truncated or corrupt GGUF header: " + std::to_string(n_kv) + " metadata entries and " +
                     std::to_string(n_tensors) + " tensors cannot fit in the file");
  }
  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key = c.read_string("a metadata key");
    auto type = c.read<uint32_t>("a metadata type");
    Value v = read_value(c, type, impl->path, key, 0);
    impl->meta[key] = std::move(v);
  }

  uint64_t alignment = 32;
  if (const Value* a = impl->find("general.alignment")) {
    if (!is_int(a->type) || a->i <= 0 || (a->i & (a->i - 1)) != 0) {
      throw ModelError(path + ": general.alignment must be a positive power of two");
    }
    alignment = static_cast<uint64_t>(a->i);
  }

  for (uint64_t t = 0; t < n_tensors; ++t) {
    GgufTensorInfo info;
    info.name = c.read_string("a tensor name");
    auto n_dims = c.read<uint32_t>("tensor dimensions");
    if (n_dims == 0 || n_dims > 4) {
      throw ModelError(path + ": tensor " + info.name + " has " + std::to_string(n_dims) + " dimensions");
    }
    uint64_t elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      auto dim = c.read<uint64_t>("a tensor dimension");
      // 2^56 elements bounds byte_size well below 2^64 for every type.
      if (dim == 0 || dim > (uint64_t{1} << 40) || elements > (uint64_t{1} << 56) / dim) {
        throw ModelError(path + ": tensor " + info.name + " has an invalid shape");
      }
      elements *= dim;
      info.shape.push_back(dim);
    }
    auto type = c.read<uint32_t>("a tensor type");
    if (!ggml_type_known(type)) {
      throw ModelError(path + ": tensor " + info.name + " has unsupported type " + ggml_type_name(type));
    }
    info.type = static_cast<GgmlType>(type);
    info.offset = c.read<uint64_t>("a tensor offset");
    if (info.offset % alignment != 0) {
      throw ModelError(path + ": tensor " + info.name + " offset is not aligned to " + std::to_string(alignment));
    }
    try {
      info.byte_size = ggml_row_bytes(info.type, static_cast<int64_t>(info.shape[0])) * (elements / info.shape[0]);
    } catch (const WeightFormatError& e) {
      throw ModelError(path + ": tensor " + info.name + ": " + e.what());
    }
    impl->tensors.push_back(std::move(info));
  }

  uint64_t data_start = (c.pos() + alignment - 1) / alignment * alignment;
  // A file with no tensors (llama.cpp's vocabulary-only GGUFs) may end
  // right after its metadata, without padding up to a data section.
  if (impl->tensors.empty()) data_start = std::min<uint64_t>(data_start, size);
  if (data_start > size) throw ModelError(path + ": truncated GGUF file: no tensor data");
  uint64_t data_size = size - data_start;
  for (size_t i = 0; i < impl->tensors.size(); ++i) {
    auto& info = impl->tensors[i];
    if (info.offset > data_size || info.byte_size > data_size - info.offset) {
      throw ModelError(path + ": truncated GGUF file: tensor " + info.name + " data [" +
                       std::to_string(info.offset) + ", +" + std::to_string(info.byte_size) +
                       ") lies past the end of the file");
    }
    info.data = base + data_start + info.offset;
    if (!impl->tensor_index.emplace(info.name, i).second) {
      throw ModelError(path + ": tensor " + info.name + " appears twice");
    }
  }
  return GgufFile(std::move(impl));
}

const std::string& GgufFile::path() const { return impl_->path; }
uint32_t GgufFile::version() const { return impl_->version; }
bool GgufFile::has_key(std::string_view key) const { return impl_->find(key) != nullptr; }

std::vector<std::string> GgufFile::keys() const {
  std::vector<std::string> k;
  for (const auto& [name, v] : impl_->meta) k.push_back(name);
  return k;
}

std::optional<int64_t> GgufFile::get_int(std::string_view key) const {
  const Value* v = impl_->find(key);
  if (!v) return std::nullopt;
  if (!is_int(v->type)) impl_->type_error(key, *v, "an integer");
  impl_->range_check(key, *v);
  return v->i;
}

std::optional<double> GgufFile::get_float(std::string_view key) const {
  const Value* v = impl_->find(key);
  if (!v) return std::nullopt;
  if (is_float(v->type)) return v->f;
  if (is_int(v->type)) {
    impl_->range_check(key, *v);
    return static_cast<double>(v->i);
  }
  impl_->type_error(key, *v, "a number");
}

std::optional<bool> GgufFile::get_bool(std::string_view key) const {
  const Value* v = impl_->find(key);
  if (!v) return std::nullopt;
  if (v->type != kBool) impl_->type_error(key, *v, "a bool");
  return v->b;
}

std::optional<std::string> GgufFile::get_string(std::string_view key) const {
  const Value* v = impl_->find(key);
  if (!v) return std::nullopt;
  if (v->type != kString) impl_->type_error(key, *v, "a string");
  return v->s;
}

std::optional<std::vector<std::string>> GgufFile::get_string_array(std::string_view key) const {
  const Value* v = impl_->find(key);
  if (!v) return std::nullopt;
  if (v->type != kArray || v->elem_type != kString) impl_->type_error(key, *v, "an array of strings");
  return v->strings;
}

std::optional<std::vector<double>> GgufFile::get_float_array(std::string_view key) const {
  const Value* v = impl_->find(key);
  if (!v) return std::nullopt;
  if (v->type != kArray || !is_float(v->elem_type)) impl_->type_error(key, *v, "an array of floats");
  return v->floats;
}

bool GgufFile::is_array(std::string_view key) const {
  const Value* v = impl_->find(key);
  return v && v->type == kArray;
}

std::optional<std::vector<int64_t>> GgufFile::get_int_array(std::string_view key) const {
  const Value* v = impl_->find(key);
  if (!v) return std::nullopt;
  if (v->type != kArray || !(is_int(v->elem_type) || v->elem_type == kBool))
    impl_->type_error(key, *v, "an array of integers");
  impl_->range_check(key, *v);
  return v->ints;
}

const std::vector<GgufTensorInfo>& GgufFile::tensors() const { return impl_->tensors; }

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = impl_->tensor_index.find(name);
  return it == impl_->tensor_index.end() ? nullptr : &impl_->tensors[it->second];
}

const GgufTensorInfo& GgufFile::tensor(std::string_view name) const {
  const GgufTensorInfo* t = find_tensor(name);
  if (!t) throw ModelError(impl_->path + ": missing tensor " + std::string(name));
  return *t;
}

}  // namespace actorlm
