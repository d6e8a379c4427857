#pragma once
// Fixed-width integers in a byte buffer, least significant byte first, as
// the data plane's frames and handshake write them (whatever the host's
// own byte order).

#include <cstdint>
#include <type_traits>

namespace actorlm {

template <class T>
void put_le(uint8_t* p, T v) {
  static_assert(std::is_integral_v<T>);
  using U = std::make_unsigned_t<T>;
  const auto u = static_cast<U>(v);
  for (size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<uint8_t>(u >> (8 * i));
}

template <class T>
T get_le(const uint8_t* p) {
  static_assert(std::is_integral_v<T>);
  using U = std::make_unsigned_t<T>;
  U u = 0;
  for (size_t i = sizeof(T); i-- > 0;) u = static_cast<U>((u << 8) | p[i]);
  return static_cast<T>(u);
}

}  // namespace actorlm
