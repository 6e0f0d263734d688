// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Error codes, the exception thrown by the host API, and the precondition macro.

#include <cstdint>
#include <stdexcept>
#include <string>

namespace commpress {

/// @brief Why an operation was refused. Every code has a stable numeric value.
enum class errc : std::uint8_t {
  ok = 0,
  invalid_argument = 1,  ///< a configuration or argument is out of its domain
  buffer_too_small = 2,  ///< an output or workspace span is smaller than required
  size_mismatch = 3,     ///< element counts of payload, state or output disagree
  truncated = 4,         ///< a payload or blob ends before its declared length
  bad_magic = 5,         ///< the bytes are not a commpress payload or blob
  bad_version = 6,       ///< a format version this build cannot read
  codec_mismatch = 7,    ///< the payload was written by another codec or configuration
  checksum_mismatch = 8, ///< the CRC32C does not match: the bytes were corrupted
  corrupt = 9,           ///< a field holds a value no valid encoder writes
  non_finite = 10,       ///< NaN or Inf input under nonfinite_policy::fail
  stream_mismatch = 11,  ///< payload seed, step or tensor id differ from the receiver's
};

/// @brief A short, stable name for an error code.
constexpr const char* to_string(errc c) noexcept {
  switch (c) {
  case errc::ok:
    return "ok";
  case errc::invalid_argument:
    return "invalid argument";
  case errc::buffer_too_small:
    return "buffer too small";
  case errc::size_mismatch:
    return "size mismatch";
  case errc::truncated:
    return "truncated";
  case errc::bad_magic:
    return "bad magic";
  case errc::bad_version:
    return "unsupported version";
  case errc::codec_mismatch:
    return "codec mismatch";
  case errc::checksum_mismatch:
    return "checksum mismatch";
  case errc::corrupt:
    return "corrupt";
  case errc::non_finite:
    return "non-finite input";
  case errc::stream_mismatch:
    return "stream mismatch";
  }
  return "unknown";
}

/// @brief Result of an up-front check (`can_implement`): a code and a static message.
struct [[nodiscard]] status {
  errc code = errc::ok;
  const char* message = "";
  constexpr explicit operator bool() const noexcept { return code == errc::ok; }
  static constexpr status success() noexcept { return {}; }
};

/// @brief The exception every host entry point throws on a refused call.
/// @note The message always starts with `commpress: <component>: `.
class error : public std::runtime_error {
public:
  error(errc code, const std::string& what) : std::runtime_error(what), code_(code) {}
  [[nodiscard]] errc code() const noexcept { return code_; }

private:
  errc code_;
};

namespace detail {
[[noreturn]] inline void throw_error(errc code, const char* component, const std::string& what) {
  throw error(code,
              std::string("commpress: ") + component + ": " + what + " (" + to_string(code) + ")");
}
inline void throw_if(const status& s, const char* component) {
  if (!s)
    throw_error(s.code, component, s.message);
}
} // namespace detail

} // namespace commpress

/// Throws `commpress::error{code}` with "commpress: component: msg" when `cond` is false.
#define COMMPRESS_EXPECTS(cond, code, component, msg)                                              \
  do {                                                                                             \
    if (!(cond))                                                                                   \
      ::commpress::detail::throw_error((code), (component), (msg));                                \
  } while (0)
