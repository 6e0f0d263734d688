// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0

// Fuzzes checkpoint loading for every state object of state_table.hpp.
//
// Input: byte 0 picks the state, byte 1 the mode, the rest is the blob. Mode bit 0 ("reseal")
// rewrites the envelope to be valid for that state (magic, versions, kind, tensor id, reserved
// field, lengths) and recomputes the CRC, so the loader sees arbitrary size fields and payloads.
//
// Properties (any violation aborts):
// - load either succeeds or throws commpress::error, never crashes;
// - a refused blob leaves the state byte-identical (its save() is unchanged);
// - an accepted blob is restored exactly: save() afterwards returns the blob itself.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "state_table.hpp"

namespace cp = commpress;
namespace rel = cp::reliability;

namespace {

void require(bool ok) {
  if (!ok)
    std::abort();
}

/// Makes `blob` a valid envelope of the state's kind around whatever size fields and payload it
/// holds (the envelope fields are copied from the state's own blob).
void reseal(const std::vector<std::byte>& own, std::vector<std::byte>& blob) {
  const std::size_t fixed = cp::blob_fixed_bytes + 4;
  if (blob.size() < fixed)
    blob.resize(fixed);
  std::memcpy(blob.data(), own.data(), 16); // magic, envelope version, kind, kind version, id
  auto* p = reinterpret_cast<unsigned char*>(blob.data());
  auto store = [](unsigned char* at, std::uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i)
      at[i] = static_cast<unsigned char>(v >> (8 * i));
  };
  const std::uint64_t room = blob.size() - fixed;
  std::uint64_t nsizes = cp::detail::blob_load<std::uint32_t>(blob.data() + 16);
  if (nsizes > room / 8)
    nsizes = room / 8;
  store(p + 16, nsizes, 4);
  store(p + 20, 0, 4);
  store(p + 24, room - 8 * nsizes, 8);
  store(p + blob.size() - 4, cp::detail::crc32c(blob.data(), blob.size() - 4), 4);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2)
    return 0;
  std::vector<std::byte> blob(size - 2);
  if (!blob.empty())
    std::memcpy(blob.data(), data + 2, blob.size());
  rel::with_state(data[0], [&](auto& state) {
    const std::vector<std::byte> before = rel::save_state(state);
    if ((data[1] & 1) != 0)
      reseal(before, blob);
    try {
      rel::load_state(state, std::span<const std::byte>(blob));
    } catch (const cp::error&) {
      require(rel::save_state(state) == before);
      return;
    }
    require(rel::save_state(state) == blob);
  });
  return 0;
}
