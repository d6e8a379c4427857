// Fuzzes the disk tier's file format (kvstore/kv_disk_store.hpp): block
// files damaged, truncated or replaced, read when a store opens its folder
// (a restart) or when a block is loaded. Contract: a load gives back exactly
// the bytes stored or nothing (a miss, counted); the tier's accounting check
// holds after every step; nothing crashes on any file.
//
// Input: byte 0 says what is done to the file of block (byte 0 & 1) of a
// two-block prompt: & 2: after the store has indexed it, else before a fresh
// store opens the folder; & 4: the rest of the input replaces the file whole;
// else the rest is edits, 3 bytes each (offset, little-endian 16 bits, modulo
// the file's size + 1; the byte to put there), and & 8 then cuts the file at
// the last edit's offset.

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "kvstore/kv_disk_store.hpp"

using namespace actorlm;
namespace fs = std::filesystem;

namespace {

const KvBlockLayout kLayout{"fuzz model", "f32", 2, 8, 4};
const std::vector<int32_t> kPrompt{11, 12, 13, 14, 21, 22, 23, 24};
constexpr int64_t kCapacity = 1 << 20;

std::vector<uint8_t> block_data(int32_t block) {
  std::vector<uint8_t> d(static_cast<size_t>(kLayout.block_bytes()));
  for (size_t i = 0; i < d.size(); ++i) d[i] = static_cast<uint8_t>(i * 7 + static_cast<size_t>(block) * 101);
  return d;
}

const std::string& folder() {
  static const std::string dir = [] {
    std::string base = fs::exists("/dev/shm") ? "/dev/shm" : fs::temp_directory_path().string();
    return base + "/actorlm-kv-disk-fuzz-" + std::to_string(getpid());
  }();
  return dir;
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(bytes.data()),
                                                                static_cast<std::streamsize>(bytes.size()));
}

void damage(const std::string& path, uint8_t how, const uint8_t* data, size_t size) {
  std::vector<uint8_t> file = read_file(path);
  if (how & 4) {
    file.assign(data, data + size);
  } else {
    size_t cut = file.size();
    for (; size >= 3; data += 3, size -= 3) {
      cut = (data[0] | size_t{data[1]} << 8) % (file.size() + 1);
      if (cut < file.size()) file[cut] = data[2];
    }
    if (how & 8) file.resize(cut);
  }
  write_file(path, file);
}

void check(const KvDiskStore& store) {
  if (!store.check().empty()) std::abort();
}

void load_both(KvDiskStore& store) {
  for (int32_t block : {0, 1}) {
    std::string error;
    auto got = store.load(kPrompt, block, &error);
    if (got ? *got != block_data(block) : error.empty()) std::abort();
    check(store);
  }
}

}  // namespace

// The file of block `block`, named as the store names it (16 hex digits of
// its key, ".kvb").
std::string file_of(const KvDiskStore& store, int32_t block) {
  char name[32];
  std::snprintf(name, sizeof name, "%016llx.kvb", static_cast<unsigned long long>(store.key(kPrompt, block)));
  return (fs::path(folder()) / name).string();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t how = data[0];
  const int32_t victim = how & 1;
  std::error_code ec;
  fs::remove_all(folder(), ec);
  KvDiskStore store(folder(), kLayout, kCapacity);
  for (int32_t block : {0, 1}) {
    if (!store.store(kPrompt, block, block_data(block))) std::abort();
  }
  check(store);
  const std::string path = file_of(store, victim);
  if (read_file(path).empty()) std::abort();  // the format's name for a block changed: fix file_of
  damage(path, how, data + 1, size - 1);
  if (how & 2) {
    (void)store.match(kPrompt);
    load_both(store);
  } else {
    KvDiskStore reopened(folder(), kLayout, kCapacity);  // a restart
    check(reopened);
    (void)reopened.match(kPrompt);
    load_both(reopened);
  }
  return 0;
}
