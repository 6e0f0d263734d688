// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// `mpi_communicator`: the `communicator` concept over an existing MPI communicator (MPI-3,
/// tested with Open MPI). Link `commpress::mpi`.

#include <commpress/comm/communicator.hpp>

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <span>
#include <string>

namespace commpress {

namespace detail {

/// @brief Throws `commpress: mpi: <what> failed: <MPI error string>` unless `rc == MPI_SUCCESS`.
inline void mpi_check(int rc, const char* what) {
  if (rc == MPI_SUCCESS)
    return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS)
    len = 0;
  comm_fail("mpi", std::string(what) + " failed: " +
                       (len > 0 ? std::string(text, len) : "error " + std::to_string(rc)));
}

/// @brief Owns a datatype while in scope; frees it on exit (intermediate derived types).
struct mpi_type_guard {
  MPI_Datatype type = MPI_DATATYPE_NULL;
  mpi_type_guard() = default;
  mpi_type_guard(const mpi_type_guard&) = delete;
  mpi_type_guard& operator=(const mpi_type_guard&) = delete;
  ~mpi_type_guard() {
    if (type != MPI_DATATYPE_NULL)
      MPI_Type_free(&type);
  }
};

/// @brief `bytes` contiguous bytes as an MPI (count, datatype) pair whose count fits an `int`.
///
/// Up to `max_count` bytes: (`bytes`, MPI_BYTE). Above: one element of a committed derived
/// datatype, `contiguous(q, contiguous(unit, MPI_BYTE))` followed by `r` trailing bytes
/// (`MPI_Type_create_struct`), resized to an extent of exactly `bytes`, where
/// `unit = min(2^30, max_count)`, `bytes = q * unit + r`. Because the extent is `bytes`,
/// block `i` of a gather lands at offset `i * bytes`, as with plain MPI_BYTE.
class mpi_byte_block {
public:
  explicit mpi_byte_block(std::size_t bytes, std::size_t max_count = INT_MAX) {
    if (max_count == 0 || max_count > static_cast<std::size_t>(INT_MAX))
      max_count = INT_MAX;
    if (bytes <= max_count) {
      count_ = static_cast<int>(bytes);
      return;
    }
    const std::size_t unit = std::min<std::size_t>(std::size_t{1} << 30, max_count);
    const std::size_t q = bytes / unit;
    const std::size_t r = bytes % unit;
    if (q > static_cast<std::size_t>(INT_MAX))
      comm_fail("mpi", "message of " + std::to_string(bytes) + " bytes is too large");
    mpi_type_guard unit_type, body_type, whole_type, resized;
    mpi_check(MPI_Type_contiguous(static_cast<int>(unit), MPI_BYTE, &unit_type.type),
              "MPI_Type_contiguous");
    mpi_check(MPI_Type_contiguous(static_cast<int>(q), unit_type.type, &body_type.type),
              "MPI_Type_contiguous");
    MPI_Datatype whole = body_type.type;
    if (r != 0) {
      int lengths[2] = {1, static_cast<int>(r)};
      MPI_Aint displacements[2] = {0, static_cast<MPI_Aint>(q * unit)};
      MPI_Datatype types[2] = {body_type.type, MPI_BYTE};
      mpi_check(MPI_Type_create_struct(2, lengths, displacements, types, &whole_type.type),
                "MPI_Type_create_struct");
      whole = whole_type.type;
    }
    mpi_check(MPI_Type_create_resized(whole, 0, static_cast<MPI_Aint>(bytes), &resized.type),
              "MPI_Type_create_resized");
    mpi_check(MPI_Type_commit(&resized.type), "MPI_Type_commit");
    type_ = resized.type;
    resized.type = MPI_DATATYPE_NULL; // now owned by *this
    count_ = 1;
  }

  mpi_byte_block(const mpi_byte_block&) = delete;
  mpi_byte_block& operator=(const mpi_byte_block&) = delete;
  ~mpi_byte_block() {
    if (type_ != MPI_BYTE)
      MPI_Type_free(&type_);
  }

  /// @brief Element count to pass to MPI.
  [[nodiscard]] int count() const noexcept { return count_; }
  /// @brief Datatype to pass to MPI (MPI_BYTE or the derived block type).
  [[nodiscard]] MPI_Datatype type() const noexcept { return type_; }
  /// @brief Whether the derived datatype is used.
  [[nodiscard]] bool derived() const noexcept { return type_ != MPI_BYTE; }

private:
  MPI_Datatype type_ = MPI_BYTE;
  int count_ = 0;
};

template <class T> inline MPI_Datatype mpi_float_type();
template <> inline MPI_Datatype mpi_float_type<float>() {
  return MPI_FLOAT;
}
template <> inline MPI_Datatype mpi_float_type<double>() {
  return MPI_DOUBLE;
}

} // namespace detail

/// @brief The `communicator` concept over an MPI communicator it does not own (MPI-3).
///
/// - Buffers are host memory (or device memory with a CUDA-aware MPI; not required here).
/// - Counts above `INT_MAX`: byte operations (all_gather, all_to_all, send, recv) switch to a
///   contiguous derived datatype of exactly one block (`detail::mpi_byte_block`), so a single
///   MPI call moves any size; `all_reduce_sum` is chunked into calls of at most `INT_MAX`
///   elements (predefined reduction ops need predefined datatypes).
/// - Errors: every MPI return code is checked and a failure throws `std::runtime_error`
///   ("commpress: mpi: ..."). MPI only returns error codes when the communicator's error handler
///   is `MPI_ERRORS_RETURN`; under the default `MPI_ERRORS_ARE_FATAL` MPI aborts first. Set the
///   handler yourself (`MPI_Comm_set_errhandler`) if you want exceptions; this wrapper does not
///   change the communicator.
/// - Argument checks are local: if only some ranks pass bad sizes, they throw while the others
///   block in the collective, as with any mismatched MPI call.
/// - Thread safety: one thread at a time per object; calls from several threads need
///   `MPI_THREAD_SERIALIZED` or better.
/// @throws std::runtime_error ("commpress: mpi: ...") on argument errors and failed MPI calls.
class mpi_communicator {
public:
  /// @brief Wraps `comm`, which must stay valid (and MPI initialized) while this object is used.
  /// @param max_count the largest `int` count passed to one MPI call (default `INT_MAX`); tests
  ///        lower it to exercise the large-message paths with small buffers.
  explicit mpi_communicator(MPI_Comm comm, std::size_t max_count = INT_MAX) : comm_(comm) {
    int initialized = 0;
    int finalized = 0;
    detail::mpi_check(MPI_Initialized(&initialized), "MPI_Initialized");
    detail::mpi_check(MPI_Finalized(&finalized), "MPI_Finalized");
    if (!initialized || finalized)
      detail::comm_fail("mpi", "MPI is not initialized");
    if (comm == MPI_COMM_NULL)
      detail::comm_fail("mpi", "MPI_COMM_NULL");
    int inter = 0;
    detail::mpi_check(MPI_Comm_test_inter(comm, &inter), "MPI_Comm_test_inter");
    if (inter)
      detail::comm_fail("mpi", "intercommunicators are not supported");
    detail::mpi_check(MPI_Comm_rank(comm, &rank_), "MPI_Comm_rank");
    detail::mpi_check(MPI_Comm_size(comm, &size_), "MPI_Comm_size");
    int* tag_ub = nullptr;
    int flag = 0;
    detail::mpi_check(MPI_Comm_get_attr(comm, MPI_TAG_UB, &tag_ub, &flag), "MPI_Comm_get_attr");
    tag_ub_ = (flag && tag_ub != nullptr) ? *tag_ub : 32767; // 32767: minimum the standard allows
    max_count_ = (max_count == 0 || max_count > static_cast<std::size_t>(INT_MAX))
                     ? static_cast<std::size_t>(INT_MAX)
                     : max_count;
  }

  /// @brief Rank of this process in the communicator.
  [[nodiscard]] int rank() const noexcept { return rank_; }
  /// @brief Number of processes in the communicator.
  [[nodiscard]] int size() const noexcept { return size_; }
  /// @brief The wrapped communicator.
  [[nodiscard]] MPI_Comm native_handle() const noexcept { return comm_; }

  /// @brief MPI_Allgather of one `mine.size()`-byte block per rank into `all`
  /// (`all.size() == size() * mine.size()`; the buffers must not overlap).
  void all_gather(std::span<const std::byte> mine, std::span<std::byte> all) {
    if (all.size() != mine.size() * static_cast<std::size_t>(size_))
      detail::comm_fail("mpi", "all_gather: all.size() != size() * mine.size()");
    const detail::mpi_byte_block block(mine.size(), max_count_);
    detail::mpi_check(MPI_Allgather(mine.data(), block.count(), block.type(), all.data(),
                                    block.count(), block.type(), comm_),
                      "MPI_Allgather");
  }

  /// @brief MPI_Alltoall with `send.size() / size()` bytes per peer
  /// (`send.size() == recv.size()`, a multiple of `size()`; the buffers must not overlap).
  void all_to_all(std::span<const std::byte> send, std::span<std::byte> recv) {
    if (send.size() != recv.size())
      detail::comm_fail("mpi", "all_to_all: send.size() != recv.size()");
    if (send.size() % static_cast<std::size_t>(size_) != 0)
      detail::comm_fail("mpi", "all_to_all: send.size() is not a multiple of size()");
    const detail::mpi_byte_block block(send.size() / static_cast<std::size_t>(size_), max_count_);
    detail::mpi_check(MPI_Alltoall(send.data(), block.count(), block.type(), recv.data(),
                                   block.count(), block.type(), comm_),
                      "MPI_Alltoall");
  }

  /// @brief Blocking MPI_Send of `buf` to `peer` under `tag` (`0 <= tag <= MPI_TAG_UB`). May
  /// wait for the matching receive (rendezvous), so order sends and receives to avoid deadlock.
  void send(std::span<const std::byte> buf, int peer, int tag) {
    check_peer_tag(peer, tag, "send");
    const detail::mpi_byte_block block(buf.size(), max_count_);
    detail::mpi_check(MPI_Send(buf.data(), block.count(), block.type(), peer, tag, comm_),
                      "MPI_Send");
  }

  /// @brief Blocking MPI_Recv of exactly `buf.size()` bytes from `peer` under `tag`; a shorter
  /// message throws (a longer one is an MPI truncation error).
  void recv(std::span<std::byte> buf, int peer, int tag) {
    check_peer_tag(peer, tag, "recv");
    const detail::mpi_byte_block block(buf.size(), max_count_);
    MPI_Status status{};
    detail::mpi_check(MPI_Recv(buf.data(), block.count(), block.type(), peer, tag, comm_, &status),
                      "MPI_Recv");
    MPI_Count received = 0;
    detail::mpi_check(MPI_Get_elements_x(&status, block.type(), &received), "MPI_Get_elements_x");
    // Elements of the basic type MPI_BYTE, i.e. bytes, for both MPI_BYTE and the derived type.
    if (received != static_cast<MPI_Count>(buf.size()))
      detail::comm_fail("mpi", "recv: got " + std::to_string(received) + " bytes, expected " +
                                   std::to_string(buf.size()));
  }

  /// @brief In-place MPI_Allreduce(MPI_SUM) of floats, chunked at `INT_MAX` elements.
  ///
  /// MPI does not fix the order in which contributions are added, so results may differ in the
  /// last bits between process counts, placements, message sizes or MPI versions. The standard
  /// only advises that all ranks get the same result (Open MPI's algorithms do); it does not
  /// require it. Use `all_reduce_sum_ordered` when bitwise reproducibility matters.
  void all_reduce_sum(std::span<float> inout) { reduce(inout); }
  /// @brief In-place MPI_Allreduce(MPI_SUM) of doubles; same caveats as the float overload.
  void all_reduce_sum(std::span<double> inout) { reduce(inout); }

  /// @brief Bitwise-reproducible sum: all_gather (in chunks of `chunk_elems` per rank) and add
  /// `x_0 + x_1 + ... + x_{size-1}` left to right on every rank. Costs `size()` times the
  /// traffic of MPI_Allreduce and `size() * chunk_elems` elements of scratch.
  void all_reduce_sum_ordered(std::span<float> inout, std::size_t chunk_elems = 1u << 20) {
    commpress::all_reduce_sum_ordered(*this, inout, chunk_elems);
  }
  /// @brief Bitwise-reproducible sum of doubles; see the float overload.
  void all_reduce_sum_ordered(std::span<double> inout, std::size_t chunk_elems = 1u << 19) {
    commpress::all_reduce_sum_ordered(*this, inout, chunk_elems);
  }

  /// @brief MPI_Barrier.
  void barrier() { detail::mpi_check(MPI_Barrier(comm_), "MPI_Barrier"); }

private:
  template <class T> void reduce(std::span<T> inout) {
    for (std::size_t off = 0; off < inout.size(); off += max_count_) {
      const std::size_t n = std::min(max_count_, inout.size() - off);
      detail::mpi_check(MPI_Allreduce(MPI_IN_PLACE, inout.data() + off, static_cast<int>(n),
                                      detail::mpi_float_type<T>(), MPI_SUM, comm_),
                        "MPI_Allreduce");
    }
  }

  void check_peer_tag(int peer, int tag, const char* what) const {
    if (peer < 0 || peer >= size_)
      detail::comm_fail("mpi",
                        std::string(what) + ": peer " + std::to_string(peer) + " out of range");
    if (tag < 0 || tag > tag_ub_)
      detail::comm_fail("mpi", std::string(what) + ": tag " + std::to_string(tag) +
                                   " outside [0, MPI_TAG_UB]");
  }

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  int tag_ub_ = 32767;
  std::size_t max_count_ = INT_MAX;
};

static_assert(communicator<mpi_communicator>);
static_assert(communicator_f64<mpi_communicator>);

} // namespace commpress
