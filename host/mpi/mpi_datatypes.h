// Which MPI datatypes and ops netfold can offload: the predefined ones that
// map onto netfold's data types and reduction ops. Everything else (derived
// datatypes, user-defined ops, types netfold lacks) is answered with nullopt
// and the interposer falls back to PMPI.
//
//   std::optional<netfold_dtype_t> t = NetfoldDatatype(MPI_DOUBLE);   // FP64
//   std::optional<netfold_op_t> o = NetfoldOp(MPI_MAXLOC);            // MAXLOC
//
// MPI-implementation neutral: handles are compared by value.
#ifndef NETFOLD_HOST_MPI_MPI_DATATYPES_H_
#define NETFOLD_HOST_MPI_MPI_DATATYPES_H_

#include <mpi.h>

#include <optional>

#include "netfold/netfold.h"

namespace netfold::mpi {

std::optional<netfold_dtype_t> NetfoldDatatype(MPI_Datatype type);
std::optional<netfold_op_t> NetfoldOp(MPI_Op op);

// MPI_BYTE and MPI_C_BOOL map to uint8 but MPI allows only some ops on them
// (bitwise on MPI_BYTE, logical on MPI_C_BOOL): true if `op` is one of them.
bool AllowedOnSpecialType(MPI_Datatype type, MPI_Op op);

// True if `count` elements of `type` are `count * size` bytes in a row
// from the buffer's start (every predefined type; contiguous derived ones).
bool Contiguous(MPI_Datatype type, int count);

}  // namespace netfold::mpi

#endif  // NETFOLD_HOST_MPI_MPI_DATATYPES_H_
