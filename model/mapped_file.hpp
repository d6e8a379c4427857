#pragma once
// A read-only memory map of a whole regular file, unmapped on destruction.
// Model files are read in place through it; nothing is copied at open.

#include <cstddef>
#include <cstdint>
#include <string>

namespace actorlm {

class MappedFile {
 public:
  // Throws ModelError naming the path when the file cannot be opened or
  // mapped, or is not a regular file. An empty file maps to size() == 0.
  explicit MappedFile(const std::string& path);
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return static_cast<const uint8_t*>(map_); }
  size_t size() const { return size_; }

  // Lets go of the pages of the map this process holds: once a backend has
  // copied the weights it reads into its own layout, the file's copy would
  // otherwise stay resident beside them (whatever the packing could not
  // release page by page, and the metadata). Nothing is lost: the map is
  // read-only and private, so a page read later (an embedding row) comes
  // back from the file.
  void drop_resident() const;

 private:
  void* map_ = nullptr;
  size_t size_ = 0;
};

}  // namespace actorlm
