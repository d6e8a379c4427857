#pragma once
// The wire form of every actor message: a 16-byte envelope, then the
// FlatBuffer.
//
//   offset  size  field
//   0       4     magic "ALM1"
//   4       2     envelope version (1)
//   6       2     message kind (msg::Kind)
//   8       4     payload length in bytes
//   12      4     CRC-32 (zlib) of bytes [0, 12) and of the payload
//   16      n     FlatBuffer, finished with the kind's file identifier
//
// Why a checksum: flatbuffers::Verifier catches structural damage (offsets,
// sizes, nesting) but a flipped bit inside a scalar or string still verifies.
// The CRC rejects every single-bit flip anywhere in a message, so a damaged
// buffer from another process is refused before any field is read.
//
// All integers little-endian. open<T>() is the only way to read a message.

#include <flatbuffers/flatbuffers.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "messages/message_kind.hpp"

namespace actorlm::msg {

inline constexpr size_t envelope_size = 16;
inline constexpr uint16_t envelope_version = 1;
// Largest message accepted from anyone (a 128k-token prefill is ~2 MiB).
inline constexpr size_t max_message_bytes = 64u << 20;

// Wraps a finished-or-not builder's root in an envelope. The builder is
// finished here with the kind's identifier.
template <class T>
std::vector<uint8_t> seal(flatbuffers::FlatBufferBuilder& fbb, flatbuffers::Offset<T> root);

// Object-API convenience: pack a native table (e.g. fb::ForwardBatchT) and seal it.
template <class NativeT>
std::vector<uint8_t> pack(const NativeT& object) {
  flatbuffers::FlatBufferBuilder fbb(1024);
  auto root = NativeT::TableType::Pack(fbb, &object);
  return seal(fbb, root);
}

template <class T>
struct Opened {
  const T* message = nullptr;  // points into the caller's bytes
  std::string error;           // why it was rejected; empty when message is set
  explicit operator bool() const { return message != nullptr; }
};

// Checks the envelope (magic, version, length, CRC) and returns the kind.
// error explains a rejection.
std::optional<Kind> peek_kind(std::span<const uint8_t> bytes, std::string* error);

// Full check — envelope, expected kind, identifier, flatbuffers::Verifier
// with depth and table limits — then a typed view into bytes.
template <class T>
Opened<T> open(std::span<const uint8_t> bytes) {
  Opened<T> out;
  auto kind = peek_kind(bytes, &out.error);
  if (!kind) return out;
  if (*kind != KindOf<T>::kind) {
    out.error = std::string("expected a ") + kind_name(static_cast<uint16_t>(KindOf<T>::kind)) +
                " message, got " + kind_name(static_cast<uint16_t>(*kind));
    return out;
  }
  const uint8_t* payload = bytes.data() + envelope_size;
  size_t len = bytes.size() - envelope_size;
  flatbuffers::Verifier verifier(payload, len, /*max_depth=*/32, /*max_tables=*/1u << 20);
  if (!verifier.VerifyBuffer<T>(KindOf<T>::identifier)) {
    out.error = std::string("flatbuffers verification failed for ") +
                kind_name(static_cast<uint16_t>(KindOf<T>::kind));
    return out;
  }
  out.message = flatbuffers::GetRoot<T>(payload);
  return out;
}

// Verify and unpack into the object-API type (T::NativeTableType).
template <class T>
std::optional<typename T::NativeTableType> unpack(std::span<const uint8_t> bytes, std::string* error) {
  auto opened = open<T>(bytes);
  if (!opened) {
    if (error) *error = opened.error;
    return std::nullopt;
  }
  typename T::NativeTableType object;
  opened.message->UnPackTo(&object);
  return object;
}

namespace detail {
std::vector<uint8_t> seal_bytes(Kind kind, std::span<const uint8_t> payload);
}

template <class T>
std::vector<uint8_t> seal(flatbuffers::FlatBufferBuilder& fbb, flatbuffers::Offset<T> root) {
  fbb.Finish(root, KindOf<T>::identifier);
  return detail::seal_bytes(KindOf<T>::kind,
                            std::span<const uint8_t>(fbb.GetBufferPointer(), fbb.GetSize()));
}

}  // namespace actorlm::msg
