// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Strict command-line value parsing for the examples: a typo such as "--lr 0,05" must fail
/// rather than silently train with 0.

#include <cstdint>
#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>

namespace commpress_examples {

inline std::uint64_t parse_u64(std::string_view flag, const std::string& s) {
  std::size_t used = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != s.size() || s.empty() || s[0] == '-')
    throw std::invalid_argument(std::string(flag) + " expects a non-negative integer, got '" + s +
                                "'");
  return v;
}

inline float parse_float(std::string_view flag, const std::string& s) {
  std::size_t used = 0;
  float v = 0.0f;
  try {
    v = std::stof(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != s.size() || s.empty())
    throw std::invalid_argument(std::string(flag) + " expects a number, got '" + s + "'");
  return v;
}

} // namespace commpress_examples
