// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "commpress/format/body_checksum.hpp"

namespace cpf = commpress::format;

TEST_SUITE("format") {
  TEST_CASE("body_checksum: hashing while writing equals payload_checksum") {
    constexpr std::size_t chunk = cpf::checksum_chunk_bytes;
    std::vector<std::byte> header(64);
    for (std::size_t i = 0; i < header.size(); ++i)
      header[i] = static_cast<std::byte>(i * 7 + 1);
    for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, chunk - 1, chunk, 3 * chunk,
                              3 * chunk + 5, 7 * chunk + 123, 10 * chunk}) {
      std::vector<std::byte> body(bytes);
      for (std::size_t i = 0; i < bytes; ++i)
        body[i] = static_cast<std::byte>((i * 2654435761u) >> 11);
      const std::uint32_t expected = cpf::payload_checksum(header.data(), body.data(), bytes);
      // Unordered prefixes: none, inside the first chunk, on a boundary, past several chunks,
      // the whole body.
      for (std::size_t from :
           {std::size_t{0}, std::size_t{4}, chunk, 2 * chunk + 17, 5 * chunk, bytes}) {
        if (from > bytes)
          continue;
        CAPTURE(bytes);
        CAPTURE(from);
        cpf::body_checksum sum(body.data(), bytes, from);
        // Progress in uneven steps, as an encoder announces finished groups.
        for (std::size_t end = from; end < bytes; end += 40000)
          sum.written(end);
        sum.written(bytes);
        CHECK(sum.finish(header.data()) == expected);

        cpf::body_checksum silent(body.data(), bytes, from); // no progress: all in finish()
        CHECK(silent.finish(header.data()) == expected);
      }
    }
  }
}
