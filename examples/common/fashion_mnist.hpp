// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Loader for Fashion-MNIST in its original IDX format, gzip-compressed or not.
/// The data comes from the Debian package `dataset-fashion-mnist`; the examples must not
/// download anything, so a missing file is a hard error that says what to install.

#include <zlib.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace commpress_examples {

/// Where `apt-get install dataset-fashion-mnist` puts the files.
inline constexpr std::string_view fashion_mnist_default_dir = "/usr/share/datasets/fashion-mnist";
/// Environment variable that overrides the default directory.
inline constexpr const char* fashion_mnist_dir_env = "COMMPRESS_FASHION_MNIST_DIR";

/// @brief One split: `count` images of 28x28 pixels, row-major, scaled to [0, 1].
struct image_set {
  static constexpr std::size_t rows = 28;
  static constexpr std::size_t cols = 28;
  static constexpr std::size_t pixels = rows * cols;
  static constexpr std::size_t classes = 10;

  std::size_t count = 0;
  std::vector<float> images;        ///< count * pixels values, image i at [i * pixels, ...)
  std::vector<std::uint8_t> labels; ///< count values in [0, classes)

  std::span<const float> image(std::size_t i) const {
    return std::span<const float>(images).subspan(i * pixels, pixels);
  }
};

struct fashion_mnist {
  image_set train; ///< 60000 samples
  image_set test;  ///< 10000 samples
};

namespace detail {

inline std::uint32_t read_be32(const std::uint8_t* p) noexcept {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

/// Reads a whole file through zlib; gzread passes non-gzip files through unchanged, so an
/// already decompressed copy works too.
inline std::vector<std::uint8_t> read_gz_file(const std::filesystem::path& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr)
    throw std::runtime_error("fashion_mnist: cannot open " + path.string());
  gzbuffer(f, 1u << 17);
  std::vector<std::uint8_t> out;
  std::array<std::uint8_t, 1u << 16> chunk{};
  for (;;) {
    const int n = gzread(f, chunk.data(), static_cast<unsigned>(chunk.size()));
    if (n < 0) {
      int code = 0;
      const std::string msg = gzerror(f, &code);
      gzclose(f);
      throw std::runtime_error("fashion_mnist: error reading " + path.string() + ": " + msg);
    }
    if (n == 0)
      break;
    out.insert(out.end(), chunk.begin(), chunk.begin() + n);
  }
  gzclose(f);
  return out;
}

/// Finds `<dir>/<stem>.gz`, falling back to `<dir>/<stem>`.
inline std::filesystem::path find_idx_file(const std::filesystem::path& dir,
                                           std::string_view stem) {
  const std::filesystem::path gz = dir / (std::string(stem) + ".gz");
  if (std::filesystem::is_regular_file(gz))
    return gz;
  const std::filesystem::path raw = dir / std::string(stem);
  if (std::filesystem::is_regular_file(raw))
    return raw;
  throw std::runtime_error("fashion_mnist: " + gz.string() +
                           " not found; install the Debian package `dataset-fashion-mnist` "
                           "(apt-get install dataset-fashion-mnist), or point " +
                           fashion_mnist_dir_env +
                           " / --data-dir at a directory holding the "
                           "Fashion-MNIST IDX files");
}

inline std::string hex32(std::uint32_t v) {
  char buf[11];
  std::snprintf(buf, sizeof buf, "0x%08x", static_cast<unsigned>(v));
  return buf;
}

inline void check_header(const std::vector<std::uint8_t>& bytes, std::size_t header_bytes,
                         std::uint32_t magic, const std::filesystem::path& path) {
  if (bytes.size() < header_bytes)
    throw std::runtime_error("fashion_mnist: " + path.string() + " is truncated (no IDX header)");
  const std::uint32_t got = read_be32(bytes.data());
  if (got != magic)
    throw std::runtime_error("fashion_mnist: " + path.string() + " has IDX magic " + hex32(got) +
                             ", expected " + hex32(magic));
}

/// IDX3 unsigned-byte images: magic 0x00000803, count, rows, cols, then the pixels.
inline std::vector<std::uint8_t> load_idx_images(const std::filesystem::path& path,
                                                 std::size_t& count) {
  std::vector<std::uint8_t> bytes = read_gz_file(path);
  check_header(bytes, 16, 0x00000803u, path);
  count = read_be32(bytes.data() + 4);
  const std::uint32_t rows = read_be32(bytes.data() + 8);
  const std::uint32_t cols = read_be32(bytes.data() + 12);
  if (rows != image_set::rows || cols != image_set::cols)
    throw std::runtime_error("fashion_mnist: " + path.string() + " holds " + std::to_string(rows) +
                             "x" + std::to_string(cols) + " images, expected 28x28");
  // Exact size: a short file is truncated, a long one is not the file we think it is.
  if (bytes.size() != 16 + count * image_set::pixels)
    throw std::runtime_error("fashion_mnist: " + path.string() + " is " +
                             std::to_string(bytes.size()) + " bytes, header implies " +
                             std::to_string(16 + count * image_set::pixels));
  return bytes;
}

/// IDX1 unsigned-byte labels: magic 0x00000801, count, then the labels.
inline std::vector<std::uint8_t> load_idx_labels(const std::filesystem::path& path,
                                                 std::size_t& count) {
  std::vector<std::uint8_t> bytes = read_gz_file(path);
  check_header(bytes, 8, 0x00000801u, path);
  count = read_be32(bytes.data() + 4);
  if (bytes.size() != 8 + count)
    throw std::runtime_error("fashion_mnist: " + path.string() + " is " +
                             std::to_string(bytes.size()) + " bytes, header implies " +
                             std::to_string(8 + count));
  return bytes;
}

inline image_set load_split(const std::filesystem::path& dir, std::string_view prefix,
                            std::size_t expected_count) {
  std::size_t n_images = 0;
  std::size_t n_labels = 0;
  const std::filesystem::path image_path =
      find_idx_file(dir, std::string(prefix) + "-images-idx3-ubyte");
  const std::filesystem::path label_path =
      find_idx_file(dir, std::string(prefix) + "-labels-idx1-ubyte");
  const std::vector<std::uint8_t> image_bytes = load_idx_images(image_path, n_images);
  const std::vector<std::uint8_t> label_bytes = load_idx_labels(label_path, n_labels);
  if (n_images != n_labels)
    throw std::runtime_error("fashion_mnist: " + image_path.string() + " has " +
                             std::to_string(n_images) + " images but " + label_path.string() +
                             " has " + std::to_string(n_labels) + " labels");
  // The published split sizes; anything else means a different or damaged data set.
  if (n_images != expected_count)
    throw std::runtime_error("fashion_mnist: " + image_path.string() + " has " +
                             std::to_string(n_images) + " samples, expected " +
                             std::to_string(expected_count));

  image_set set;
  set.count = n_images;
  set.images.resize(n_images * image_set::pixels);
  constexpr float scale = 1.0f / 255.0f;
  for (std::size_t i = 0; i < set.images.size(); ++i)
    set.images[i] = static_cast<float>(image_bytes[16 + i]) * scale;
  set.labels.assign(label_bytes.begin() + 8, label_bytes.end());
  for (std::size_t i = 0; i < set.labels.size(); ++i)
    if (set.labels[i] >= image_set::classes)
      throw std::runtime_error("fashion_mnist: " + label_path.string() + " label " +
                               std::to_string(i) + " is " + std::to_string(set.labels[i]) +
                               ", expected 0..9");
  return set;
}

} // namespace detail

/// @brief The data directory: `override_dir` if non-empty, else $COMMPRESS_FASHION_MNIST_DIR
/// if set and non-empty, else the Debian package's directory.
inline std::filesystem::path fashion_mnist_dir(std::string_view override_dir = {}) {
  if (!override_dir.empty())
    return std::filesystem::path(override_dir);
  if (const char* env = std::getenv(fashion_mnist_dir_env); env != nullptr && *env != '\0')
    return std::filesystem::path(env);
  return std::filesystem::path(fashion_mnist_default_dir);
}

/// @brief Loads both splits. Throws std::runtime_error naming `dataset-fashion-mnist` when a
/// file is missing, and on any malformed file (bad magic, wrong dimensions, wrong size).
inline fashion_mnist load_fashion_mnist(std::string_view override_dir = {}) {
  const std::filesystem::path dir = fashion_mnist_dir(override_dir);
  fashion_mnist data;
  data.train = detail::load_split(dir, "train", 60000);
  data.test = detail::load_split(dir, "t10k", 10000);
  return data;
}

} // namespace commpress_examples
