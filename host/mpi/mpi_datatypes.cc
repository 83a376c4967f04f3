#include "host/mpi/mpi_datatypes.h"

#include <climits>
#include <cstdint>

namespace netfold::mpi {

std::optional<netfold_dtype_t> NetfoldDatatype(MPI_Datatype t) {
  static_assert(sizeof(long) == 8 && sizeof(int) == 4 && sizeof(short) == 2,
                "the C type sizes of an LP64 platform are assumed");
  if (t == MPI_SIGNED_CHAR || t == MPI_INT8_T) return NETFOLD_DTYPE_INT8;
  if (t == MPI_UNSIGNED_CHAR || t == MPI_UINT8_T || t == MPI_BYTE || t == MPI_C_BOOL) {
    return NETFOLD_DTYPE_UINT8;
  }
  if (t == MPI_SHORT || t == MPI_INT16_T) return NETFOLD_DTYPE_INT16;
  if (t == MPI_UNSIGNED_SHORT || t == MPI_UINT16_T) return NETFOLD_DTYPE_UINT16;
  if (t == MPI_INT || t == MPI_INT32_T) return NETFOLD_DTYPE_INT32;
  if (t == MPI_UNSIGNED || t == MPI_UINT32_T) return NETFOLD_DTYPE_UINT32;
  if (t == MPI_LONG || t == MPI_LONG_LONG_INT || t == MPI_LONG_LONG || t == MPI_INT64_T) {
    return NETFOLD_DTYPE_INT64;
  }
  if (t == MPI_UNSIGNED_LONG || t == MPI_UNSIGNED_LONG_LONG || t == MPI_UINT64_T) {
    return NETFOLD_DTYPE_UINT64;
  }
  if (t == MPI_FLOAT) return NETFOLD_DTYPE_FP32;
  if (t == MPI_DOUBLE) return NETFOLD_DTYPE_FP64;
  if (t == MPI_FLOAT_INT) return NETFOLD_DTYPE_FLOAT_INT;
  if (t == MPI_DOUBLE_INT) return NETFOLD_DTYPE_DOUBLE_INT;
  if (t == MPI_LONG_INT) return NETFOLD_DTYPE_LONG_INT;
  if (t == MPI_2INT) return NETFOLD_DTYPE_2INT;
  if (t == MPI_SHORT_INT) return NETFOLD_DTYPE_SHORT_INT;
  return std::nullopt;
}

std::optional<netfold_op_t> NetfoldOp(MPI_Op op) {
  if (op == MPI_SUM) return NETFOLD_OP_SUM;
  if (op == MPI_PROD) return NETFOLD_OP_PROD;
  if (op == MPI_MIN) return NETFOLD_OP_MIN;
  if (op == MPI_MAX) return NETFOLD_OP_MAX;
  if (op == MPI_BAND) return NETFOLD_OP_BAND;
  if (op == MPI_BOR) return NETFOLD_OP_BOR;
  if (op == MPI_BXOR) return NETFOLD_OP_BXOR;
  if (op == MPI_LAND) return NETFOLD_OP_LAND;
  if (op == MPI_LOR) return NETFOLD_OP_LOR;
  if (op == MPI_LXOR) return NETFOLD_OP_LXOR;
  if (op == MPI_MINLOC) return NETFOLD_OP_MINLOC;
  if (op == MPI_MAXLOC) return NETFOLD_OP_MAXLOC;
  return std::nullopt;
}

bool AllowedOnSpecialType(MPI_Datatype t, MPI_Op op) {
  if (t == MPI_BYTE) return op == MPI_BAND || op == MPI_BOR || op == MPI_BXOR;
  if (t == MPI_C_BOOL) return op == MPI_LAND || op == MPI_LOR || op == MPI_LXOR;
  return true;
}

bool Contiguous(MPI_Datatype type, int count) {
  int size = 0;
  PMPI_Type_size(type, &size);
  MPI_Aint lb = 0, extent = 0, true_lb = 0, true_extent = 0;
  PMPI_Type_get_extent(type, &lb, &extent);
  PMPI_Type_get_true_extent(type, &true_lb, &true_extent);
  return true_lb == 0 && (count <= 1 ? true_extent == size : extent == size && true_extent == size);
}

}  // namespace netfold::mpi
