#include "model/mapped_file.hpp"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

using namespace actorlm;
namespace fs = std::filesystem;

namespace {

// Resident kilobytes of this process's maps of `path` (/proc/self/smaps).
int64_t resident_kb(const std::string& path) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool in_map = false;
  int64_t kb = 0;
  while (std::getline(smaps, line)) {
    // A map's first line starts with its address range (hex digits and a
    // dash); the lines after it are "Field: value".
    const std::string first = line.substr(0, line.find(' '));
    const bool header = first.find('-') != std::string::npos &&
                        first.find_first_not_of("0123456789abcdef-") == std::string::npos;
    if (header) {
      in_map = line.size() >= path.size() && line.compare(line.size() - path.size(), path.size(), path) == 0;
    } else if (in_map && line.rfind("Rss:", 0) == 0) {
      std::istringstream(line.substr(4)) >> kb;
      return kb;
    }
  }
  return -1;  // no such map
}

uint64_t checksum(const MappedFile& m) {
  uint64_t sum = 0;
  for (size_t i = 0; i < m.size(); ++i) sum = sum * 31 + m.data()[i];
  return sum;
}

}  // namespace

TEST_CASE("drop_resident lets go of a map's pages and loses none of its bytes", "[model][mapped_file]") {
  const std::string path = (fs::temp_directory_path() / "actorlm_mapped_file_test.bin").string();
  const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<uint8_t> bytes(64 * page + 123);
  std::iota(bytes.begin(), bytes.end(), uint8_t{7});
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  {
    MappedFile m(path);
    REQUIRE(m.size() == bytes.size());
    uint64_t expected = 0;
    for (uint8_t b : bytes) expected = expected * 31 + b;
    REQUIRE(checksum(m) == expected);  // every page touched
    CHECK(resident_kb(path) >= static_cast<int64_t>(64 * page / 1024));

    m.drop_resident();
    CHECK(resident_kb(path) == 0);
    // Read again: the same bytes, from the file.
    CHECK(checksum(m) == expected);
    CHECK(resident_kb(path) > 0);
  }
  std::ofstream(path, std::ios::trunc).close();
  MappedFile empty(path);
  CHECK(empty.size() == 0);
  empty.drop_resident();  // nothing mapped: nothing to do
  fs::remove(path);
}
