// mpi_collectives' checks of MPI_Allgather, MPI_Reduce_scatter_block and
// MPI_Reduce_scatter (and their nonblocking forms): every result against a
// reference computed from the known inputs of all ranks, and against what
// PMPI_ computes.
#include <mpi.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tests/mpi/mpi_checks.h"

namespace mpi_test {
namespace {

enum class Form { kBlock, kVariable, kInPlace, kNonblocking };

const char* FormName(Form f) {
  switch (f) {
    case Form::kBlock: return "block";
    case Form::kVariable: return "variable";
    case Form::kInPlace: return "in place";
    default: return "nonblocking";
  }
}

// One reduce-scatter of `block` elements per rank (kVariable: rank r gets
// block + r, rank 1 none).
template <typename T>
void CheckReduceScatter(MPI_Comm comm, MPI_Datatype type, const char* tname, MPI_Op op,
                        const char* oname, int block, uint64_t seed, Form form) {
  int rank, size;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  std::vector<int> counts(static_cast<size_t>(size), block);
  if (form == Form::kVariable) {
    for (int r = 0; r < size; ++r) counts[r] = r == 1 ? 0 : block + r;
  }
  size_t total = 0, first = 0;
  for (int r = 0; r < size; ++r) {
    if (r == rank) first = total;
    total += static_cast<size_t>(counts[r]);
  }
  const size_t mine = static_cast<size_t>(counts[rank]);
  std::vector<T> in(total), ref(mine), out(form == Form::kInPlace ? total : mine);
  for (size_t i = 0; i < total; ++i) in[i] = Input<T>(rank, i, seed, op);
  for (size_t i = 0; i < mine; ++i) {
    ref[i] = Input<T>(0, first + i, seed, op);
    for (int r = 1; r < size; ++r) ref[i] = Apply(op, ref[i], Input<T>(r, first + i, seed, op));
  }
  int rc = MPI_SUCCESS;
  switch (form) {
    case Form::kBlock:
      rc = MPI_Reduce_scatter_block(in.data(), out.data(), block, type, op, comm);
      break;
    case Form::kVariable:
      rc = MPI_Reduce_scatter(in.data(), out.data(), counts.data(), type, op, comm);
      break;
    case Form::kInPlace:
      out = in;
      rc = MPI_Reduce_scatter_block(MPI_IN_PLACE, out.data(), block, type, op, comm);
      break;
    case Form::kNonblocking: {
      MPI_Request r;
      rc = MPI_Ireduce_scatter_block(in.data(), out.data(), block, type, op, comm, &r);
      if (rc == MPI_SUCCESS) rc = MPI_Wait(&r, MPI_STATUS_IGNORE);
      break;
    }
  }
  std::vector<T> pmpi(mine);
  PMPI_Reduce_scatter(in.data(), pmpi.data(), counts.data(), type, op, comm);
  ++g_checks;
  bool ok = rc == MPI_SUCCESS, mpi_ok = true;
  for (size_t i = 0; i < mine; ++i) {
    if (!Same(out[i], ref[i])) ok = false;
    if (!Same(pmpi[i], ref[i])) mpi_ok = false;
  }
  if (!ok) {
    Fail(std::string("reduce_scatter ") + FormName(form) + " " + tname + " " + oname +
         " block " + std::to_string(block));
  }
  if (!mpi_ok) ++g_mpi_wrong;
}

template <typename T>
void ReduceScatterAllOps(MPI_Comm comm, MPI_Datatype type, const char* tname, int block,
                         uint64_t& seed) {
  for (const NamedOp& o : OpsFor<T>()) {
    // Each op in one of the four forms, in turn.
    const Form form = static_cast<Form>(seed % 4);
    CheckReduceScatter<T>(comm, type, tname, o.op, o.name, block, ++seed, form);
  }
}

// An allgather of `count` elements of T per rank (in place, or not,
// blocking or not).
template <typename T>
void CheckAllgather(MPI_Comm comm, MPI_Datatype type, const char* tname, int count,
                    uint64_t seed, Form form) {
  int rank, size;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const size_t n = static_cast<size_t>(count);
  std::vector<T> mine(n), all(n * size), ref(n * size);
  for (size_t i = 0; i < n; ++i) mine[i] = Input<T>(rank, i, seed, MPI_SUM);
  for (int r = 0; r < size; ++r) {
    for (size_t i = 0; i < n; ++i) ref[r * n + i] = Input<T>(r, i, seed, MPI_SUM);
  }
  int rc = MPI_SUCCESS;
  switch (form) {
    case Form::kInPlace:
      for (size_t i = 0; i < n; ++i) all[rank * n + i] = mine[i];
      rc = MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all.data(), count, type, comm);
      break;
    case Form::kNonblocking: {
      MPI_Request r;
      rc = MPI_Iallgather(mine.data(), count, type, all.data(), count, type, comm, &r);
      if (rc == MPI_SUCCESS) rc = MPI_Wait(&r, MPI_STATUS_IGNORE);
      break;
    }
    default:
      rc = MPI_Allgather(mine.data(), count, type, all.data(), count, type, comm);
      break;
  }
  ++g_checks;
  bool ok = rc == MPI_SUCCESS;
  for (size_t i = 0; i < all.size() && ok; ++i) ok = Same(all[i], ref[i]);
  if (!ok) {
    Fail(std::string("allgather ") + FormName(form) + " " + tname + " count " +
         std::to_string(count));
  }
}

// Allgatherv of blocks of different sizes (one empty): packed in rank
// order they go to the fabric; in reverse rank order, to MPI.
void CheckAllgatherv(MPI_Comm comm, bool reversed) {
  int rank0 = 0, size = 0;
  MPI_Comm_rank(comm, &rank0);
  MPI_Comm_size(comm, &size);
  std::vector<int> counts(static_cast<size_t>(size)), displs(static_cast<size_t>(size));
  int total = 0;
  for (int r = 0; r < size; ++r) {
    counts[r] = r == 1 ? 0 : 100 + 37 * r;
    total += counts[r];
  }
  for (int r = 0, at = 0; r < size; ++r) {
    const int q = reversed ? size - 1 - r : r;
    displs[q] = at;
    at += counts[q];
  }
  std::vector<int> mine(static_cast<size_t>(counts[rank0])), all(total, -1);
  for (int k = 0; k < counts[rank0]; ++k) mine[k] = rank0 * 1000 + k;
  const int rc = MPI_Allgatherv(mine.data(), counts[rank0], MPI_INT, all.data(), counts.data(),
                                displs.data(), MPI_INT, comm);
  ++g_checks;
  bool ok = rc == MPI_SUCCESS;
  for (int r = 0; r < size && ok; ++r) {
    for (int k = 0; k < counts[r] && ok; ++k) ok = all[displs[r] + k] == r * 1000 + k;
  }
  if (!ok) Fail(std::string("allgatherv") + (reversed ? " (reversed blocks)" : ""));
}

}  // namespace

void CheckGatherScatter(MPI_Comm comm, uint64_t& seed) {
  int size;
  MPI_Comm_size(comm, &size);
  // Blocks of one element and of several slots' worth.
  for (int block : {1, 1500}) {
    ReduceScatterAllOps<int8_t>(comm, MPI_INT8_T, "int8", block, seed);
    ReduceScatterAllOps<uint8_t>(comm, MPI_UINT8_T, "uint8", block, seed);
    ReduceScatterAllOps<int16_t>(comm, MPI_INT16_T, "int16", block, seed);
    ReduceScatterAllOps<uint16_t>(comm, MPI_UINT16_T, "uint16", block, seed);
    ReduceScatterAllOps<int>(comm, MPI_INT, "int", block, seed);
    ReduceScatterAllOps<uint32_t>(comm, MPI_UNSIGNED, "unsigned", block, seed);
    ReduceScatterAllOps<int64_t>(comm, MPI_INT64_T, "int64", block, seed);
    ReduceScatterAllOps<uint64_t>(comm, MPI_UINT64_T, "uint64", block, seed);
    ReduceScatterAllOps<float>(comm, MPI_FLOAT, "float", block, seed);
    ReduceScatterAllOps<double>(comm, MPI_DOUBLE, "double", block, seed);
    ReduceScatterAllOps<FloatInt>(comm, MPI_FLOAT_INT, "float_int", block, seed);
    ReduceScatterAllOps<DoubleInt>(comm, MPI_DOUBLE_INT, "double_int", block, seed);
    ReduceScatterAllOps<LongInt>(comm, MPI_LONG_INT, "long_int", block, seed);
    ReduceScatterAllOps<TwoInt>(comm, MPI_2INT, "2int", block, seed);
    ReduceScatterAllOps<ShortInt>(comm, MPI_SHORT_INT, "short_int", block, seed);
  }
  for (Form form : {Form::kBlock, Form::kInPlace, Form::kNonblocking}) {
    CheckAllgather<char>(comm, MPI_CHAR, "char", 1, ++seed, form);
    CheckAllgather<int>(comm, MPI_INT, "int", 3000, ++seed, form);
    CheckAllgather<double>(comm, MPI_DOUBLE, "double", 777, ++seed, form);
    CheckAllgather<TwoInt>(comm, MPI_2INT, "2int", 100, ++seed, form);
  }
  CheckAllgatherv(comm, /*reversed=*/false);
  // Random floats: a reduce-scatter rounds exactly as the allreduce of the
  // same vector does (the fabric reduces both in the tree's order).
  const int block = 2000;
  std::vector<float> v(static_cast<size_t>(block) * size), sum(v.size()), mine(block);
  std::mt19937_64 rng(seed + 977 * g_rank);
  for (float& x : v) x = std::uniform_real_distribution<float>(-1e3, 1e3)(rng);
  MPI_Allreduce(v.data(), sum.data(), static_cast<int>(v.size()), MPI_FLOAT, MPI_SUM, comm);
  MPI_Reduce_scatter_block(v.data(), mine.data(), block, MPI_FLOAT, MPI_SUM, comm);
  int rank;
  MPI_Comm_rank(comm, &rank);
  ++g_checks;
  if (std::memcmp(mine.data(), sum.data() + static_cast<size_t>(rank) * block, block * 4) != 0) {
    Fail("reduce_scatter of random floats rounds differently from allreduce");
  }
}

void CheckGatherScatterOnce(MPI_Comm comm, uint64_t& seed) {
  CheckReduceScatter<int>(comm, MPI_INT, "int", MPI_SUM, "sum", 300, ++seed, Form::kVariable);
  CheckAllgather<double>(comm, MPI_DOUBLE, "double", 300, ++seed, Form::kBlock);
}

void CheckNonContiguousAllgather(MPI_Comm comm) {
  CheckAllgatherv(comm, /*reversed=*/true);
  int rank, size;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  // Every other int of 10 per rank: MPI gathers it itself.
  MPI_Datatype strided;
  MPI_Type_vector(5, 1, 2, MPI_INT, &strided);
  MPI_Type_commit(&strided);
  std::vector<int> mine(10), all(static_cast<size_t>(size) * 5, -1);
  for (int k = 0; k < 10; ++k) mine[k] = rank * 100 + k;
  MPI_Allgather(mine.data(), 1, strided, all.data(), 5, MPI_INT, comm);
  ++g_checks;
  for (int r = 0; r < size; ++r) {
    for (int k = 0; k < 5; ++k) {
      if (all[r * 5 + k] != r * 100 + 2 * k) {
        Fail("strided allgather");
        r = size;
        break;
      }
    }
  }
  MPI_Type_free(&strided);
}

}  // namespace mpi_test
