#include "kvstore/kv_disk_store.hpp"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace actorlm {
namespace {

namespace fs = std::filesystem;

constexpr char magic[4] = {'A', 'K', 'V', 'B'};
constexpr uint32_t format_version = 1;
constexpr uint32_t max_header_bytes = 1u << 20;
constexpr const char* extension = ".kvb";

uint32_t crc_of(const uint8_t* p, size_t n) {
  uLong crc = crc32(0L, Z_NULL, 0);
  for (size_t at = 0; at < n; at += 1u << 30) {
    crc = crc32(crc, p + at, static_cast<uInt>(std::min<size_t>(n - at, 1u << 30)));
  }
  return static_cast<uint32_t>(crc);
}

class Writer {
 public:
  template <class T>
  void put(T v) {
    static_assert(std::is_integral_v<T>);
    for (size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i)));
  }
  void str(const std::string& s) {
    put(static_cast<uint32_t>(s.size()));
    out.insert(out.end(), s.begin(), s.end());
  }
  std::vector<uint8_t> out;
};

class Reader {
 public:
  Reader(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  template <class T>
  bool get(T& v) {
    if (n_ - at_ < sizeof(T)) return false;
    uint64_t x = 0;
    for (size_t i = 0; i < sizeof(T); ++i) x |= static_cast<uint64_t>(p_[at_ + i]) << (8 * i);
    v = static_cast<T>(x);
    at_ += sizeof(T);
    return true;
  }
  bool str(std::string& s) {
    uint32_t len = 0;
    if (!get(len) || n_ - at_ < len) return false;
    s.assign(reinterpret_cast<const char*>(p_ + at_), len);
    at_ += len;
    return true;
  }
  size_t at() const { return at_; }

 private:
  const uint8_t* p_;
  size_t n_, at_ = 0;
};

struct Header {
  uint64_t key = 0, parent = 0;
  KvBlockLayout layout;
  int32_t depth = 0;
  std::vector<int32_t> tokens;
  int64_t data_bytes = 0;
  uint32_t data_crc = 0;
};

// The header's bytes, its own CRC last.
std::vector<uint8_t> encode_header(const Header& h) {
  Writer w;
  w.put(h.key);
  w.put(h.parent);
  w.str(h.layout.model_digest);
  w.str(h.layout.dtype);
  w.put(h.layout.n_layers);
  w.put(h.layout.token_bytes);
  w.put(h.layout.block_tokens);
  w.put(h.depth);
  for (int32_t t : h.tokens) w.put(t);
  w.put(h.data_bytes);
  w.put(h.data_crc);
  w.put(crc_of(w.out.data(), w.out.size()));
  return std::move(w.out);
}

// Parses a header; empty string when sound, else why not.
std::string decode_header(const uint8_t* p, size_t n, Header& h) {
  Reader r(p, n);
  if (!r.get(h.key) || !r.get(h.parent) || !r.str(h.layout.model_digest) || !r.str(h.layout.dtype) ||
      !r.get(h.layout.n_layers) || !r.get(h.layout.token_bytes) || !r.get(h.layout.block_tokens) || !r.get(h.depth)) {
    return "truncated header";
  }
  if (h.layout.block_tokens <= 0 || h.layout.block_tokens > (1 << 16) || h.depth < 0) return "implausible header";
  h.tokens.resize(static_cast<size_t>(h.layout.block_tokens));
  for (int32_t& t : h.tokens) {
    if (!r.get(t)) return "truncated header";
  }
  uint32_t crc = 0;
  if (!r.get(h.data_bytes) || !r.get(h.data_crc)) return "truncated header";
  const size_t covered = r.at();
  if (!r.get(crc) || r.at() != n) return "header of the wrong size";
  if (crc != crc_of(p, covered)) return "header fails its CRC";
  return "";
}

}  // namespace

KvDiskStore::KvDiskStore(std::string dir, KvBlockLayout layout, int64_t capacity_bytes)
    : dir_(std::move(dir)), layout_(std::move(layout)) {
  if (layout_.n_layers <= 0 || layout_.token_bytes <= 0 || layout_.block_tokens <= 0 || layout_.block_tokens > (1 << 16)) {
    throw std::invalid_argument("KV disk store: bad layout");
  }
  if (capacity_bytes < layout_.block_bytes()) {
    throw std::invalid_argument("KV disk store: capacity " + std::to_string(capacity_bytes) + " bytes is below one block (" +
                                std::to_string(layout_.block_bytes()) + ")");
  }
  stats_.capacity_bytes = capacity_bytes;
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec || !fs::is_directory(dir_)) throw std::runtime_error("KV disk store: cannot use folder " + dir_ + ": " + ec.message());
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > 4 && name.ends_with(".tmp")) {
      fs::remove(entry.path(), ec);  // a write that never finished
    } else if (entry.is_regular_file() && name.ends_with(extension)) {
      index_file(entry.path().string());
    }
  }
  if (ec) throw std::runtime_error("KV disk store: cannot read folder " + dir_ + ": " + ec.message());
  make_room(0);  // a smaller capacity than last time
}

void KvDiskStore::index_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  uint8_t pre[12] = {};
  uint32_t version = 0, header_bytes = 0;
  auto reject = [&] {
    ++stats_.rejected;
    std::error_code ec;
    fs::remove(path, ec);
  };
  if (!in.read(reinterpret_cast<char*>(pre), sizeof pre) || std::memcmp(pre, magic, 4) != 0) return reject();
  Reader(pre + 4, 8).get(version);
  Reader(pre + 8, 4).get(header_bytes);
  if (version != format_version || header_bytes > max_header_bytes) return reject();
  std::vector<uint8_t> bytes(header_bytes);
  Header h;
  if (!in.read(reinterpret_cast<char*>(bytes.data()), header_bytes) ||
      !decode_header(bytes.data(), bytes.size(), h).empty()) {
    return reject();
  }
  if (h.layout != layout_) {
    ++stats_.foreign;  // another model's (or block size's): not ours to delete
    return;
  }
  std::error_code ec;
  const auto size = static_cast<int64_t>(fs::file_size(path, ec));
  // A first block's parent field is its lineage (any; 0 for the base
  // model), a later block's the key it chains from (never 0).
  const uint64_t parent = h.depth == 0 ? kv_block_root(layout_, h.parent) : h.parent;
  if (ec || h.data_bytes != layout_.block_bytes() || size != 12 + static_cast<int64_t>(header_bytes) + h.data_bytes ||
      h.key != kv_block_chain(parent, h.tokens) || path != path_of(h.key) || (h.depth > 0 && h.parent == 0)) {
    return reject();
  }
  index_[h.key] = Entry{h.parent, h.depth, std::move(h.tokens), size, 0};
  stats_.blocks = static_cast<int64_t>(index_.size());
  stats_.bytes += size;
}

std::string KvDiskStore::path_of(uint64_t key) const {
  char name[32];
  std::snprintf(name, sizeof name, "%016llx", static_cast<unsigned long long>(key));
  return (fs::path(dir_) / (std::string(name) + extension)).string();
}

int32_t KvDiskStore::match(std::span<const int32_t> prompt, uint64_t lineage) {
  const auto b = static_cast<size_t>(layout_.block_tokens);
  uint64_t k = kv_block_root(layout_, lineage), parent = lineage;
  const uint64_t now = ++clock_;
  int32_t blocks = 0;
  for (size_t at = 0; at + b <= prompt.size(); at += b) {
    auto block = prompt.subspan(at, b);
    k = kv_block_chain(k, block);
    auto it = index_.find(k);
    if (it == index_.end() || it->second.parent != parent || !std::equal(block.begin(), block.end(), it->second.tokens.begin())) {
      break;
    }
    it->second.last_use = now;
    parent = k;
    ++blocks;
  }
  return blocks * layout_.block_tokens;
}

std::optional<std::vector<uint8_t>> KvDiskStore::load(std::span<const int32_t> prompt, int32_t block, std::string* error,
                                                      uint64_t lineage) {
  const auto b = static_cast<size_t>(layout_.block_tokens);
  auto fail = [&](uint64_t k, const std::string& why) -> std::optional<std::vector<uint8_t>> {
    if (error) *error = why;
    if (index_.count(k)) {
      ++stats_.rejected;
      forget(k, true);
    }
    return std::nullopt;
  };
  if (block < 0 || (static_cast<size_t>(block) + 1) * b > prompt.size()) return fail(0, "block outside the prompt");
  const uint64_t k = key(prompt, block, lineage);
  if (!index_.count(k)) return fail(0, "block not stored");
  std::ifstream in(path_of(k), std::ios::binary);
  std::vector<uint8_t> file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (file.size() < 12 || std::memcmp(file.data(), magic, 4) != 0) return fail(k, "not a KV block file");
  uint32_t version = 0, header_bytes = 0;
  Reader(file.data() + 4, 4).get(version);
  Reader(file.data() + 8, 4).get(header_bytes);
  if (version != format_version) return fail(k, "another format version");
  if (header_bytes > file.size() - 12) return fail(k, "truncated header");
  Header h;
  if (std::string why = decode_header(file.data() + 12, header_bytes, h); !why.empty()) return fail(k, why);
  auto tokens = prompt.subspan(static_cast<size_t>(block) * b, b);
  if (h.layout != layout_ || h.key != k || (block == 0 && h.parent != lineage) ||
      !std::equal(tokens.begin(), tokens.end(), h.tokens.begin())) {
    return fail(k, "the block's header does not match its prompt");
  }
  const size_t at = 12 + header_bytes;
  if (h.data_bytes != layout_.block_bytes() || file.size() - at != static_cast<size_t>(h.data_bytes)) {
    return fail(k, "truncated data");
  }
  if (crc_of(file.data() + at, file.size() - at) != h.data_crc) return fail(k, "data fails its CRC");
  index_[k].last_use = ++clock_;
  ++stats_.loaded;
  return std::vector<uint8_t>(file.begin() + static_cast<std::ptrdiff_t>(at), file.end());
}

bool KvDiskStore::store(std::span<const int32_t> prompt, int32_t block, std::span<const uint8_t> data, uint64_t lineage) {
  const auto b = static_cast<size_t>(layout_.block_tokens);
  if (block < 0 || (static_cast<size_t>(block) + 1) * b > prompt.size() ||
      static_cast<int64_t>(data.size()) != layout_.block_bytes()) {
    return false;
  }
  auto tokens = prompt.subspan(static_cast<size_t>(block) * b, b);
  // A first block records its lineage where later ones record their parent.
  const uint64_t parent = block == 0 ? lineage : key(prompt, block - 1, lineage);
  const uint64_t k = kv_block_chain(block == 0 ? kv_block_root(layout_, lineage) : parent, tokens);
  if (index_.count(k) || (block > 0 && !index_.count(parent))) return false;
  Header h;
  h.key = k;
  h.parent = parent;
  h.layout = layout_;
  h.depth = block;
  h.tokens.assign(tokens.begin(), tokens.end());
  h.data_bytes = static_cast<int64_t>(data.size());
  h.data_crc = crc_of(data.data(), data.size());
  std::vector<uint8_t> header = encode_header(h);
  Writer pre;
  pre.out.assign(magic, magic + 4);
  pre.put(format_version);
  pre.put(static_cast<uint32_t>(header.size()));
  const int64_t size = static_cast<int64_t>(pre.out.size() + header.size() + data.size());
  if (block > 0) index_[parent].last_use = ++clock_;  // not the one to make room with
  make_room(size);
  const std::string path = path_of(k), tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(pre.out.data()), static_cast<std::streamsize>(pre.out.size()));
    out.write(reinterpret_cast<const char*>(header.data()), static_cast<std::streamsize>(header.size()));
    out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
    out.flush();
    if (!out) {
      ++stats_.write_errors;
      std::error_code ec;
      fs::remove(tmp, ec);
      return false;
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    ++stats_.write_errors;
    fs::remove(tmp, ec);
    return false;
  }
  index_[k] = Entry{parent, block, std::move(h.tokens), size, ++clock_};
  stats_.blocks = static_cast<int64_t>(index_.size());
  stats_.bytes += size;
  ++stats_.stored;
  return true;
}

std::string KvDiskStore::check() const {
  int64_t bytes = 0;
  for (const auto& [key, e] : index_) bytes += e.bytes;
  if (stats_.blocks != static_cast<int64_t>(index_.size())) {
    return std::to_string(stats_.blocks) + " blocks counted, " + std::to_string(index_.size()) + " indexed";
  }
  if (stats_.bytes != bytes) return std::to_string(stats_.bytes) + " bytes counted, " + std::to_string(bytes) + " indexed";
  if (stats_.bytes > stats_.capacity_bytes) {
    return std::to_string(stats_.bytes) + " bytes over the capacity of " + std::to_string(stats_.capacity_bytes);
  }
  return "";
}

void KvDiskStore::forget(uint64_t key, bool remove_file) {
  auto it = index_.find(key);
  if (it == index_.end()) return;
  stats_.bytes -= it->second.bytes;
  index_.erase(it);
  stats_.blocks = static_cast<int64_t>(index_.size());
  if (remove_file) {
    std::error_code ec;
    fs::remove(path_of(key), ec);
  }
}

void KvDiskStore::make_room(int64_t bytes) {
  while (!index_.empty() && stats_.bytes + bytes > stats_.capacity_bytes) {
    // Least recently used; on a tie the deepest, which nothing needs.
    auto victim = std::min_element(index_.begin(), index_.end(), [](const auto& a, const auto& b) {
      if (a.second.last_use != b.second.last_use) return a.second.last_use < b.second.last_use;
      return a.second.depth > b.second.depth;
    });
    forget(victim->first, true);
    ++stats_.evicted;
  }
}

}  // namespace actorlm
