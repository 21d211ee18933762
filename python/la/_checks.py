"""Checks of user inputs shared by la's execution paths (not test helpers)."""

import numpy as np

_INT32_MAX = int(np.iinfo(np.int32).max)


def _show_offsets(cu):
    """cu_seqlens for an error message (the ends of a long array)."""
    values = cu.tolist()
    if len(values) <= 12:
        return str(values)
    return "[" + ", ".join(map(str, values[:5])) + ", ..., " + \
        ", ".join(map(str, values[-5:])) + f"] ({len(values)} offsets)"


def check_cu_seqlens(cu_seqlens, T, B=None):
    """``cu_seqlens`` checked against a packed input of ``T`` tokens (and
    ``B`` batch rows when given), returned as an int64 array.

    The offsets must be a 1-D array of N+1 >= 2 values of an integer dtype
    (bool is not one), start at 0, stay within ``[0, T]``, never decrease and
    end at ``T``; ``T`` must fit in int32 (the kernels take int32 offsets, so
    the values then convert exactly). The bounds are checked in the array's
    own dtype and the arithmetic is done in int64, so that unsigned or narrow
    dtypes cannot wrap around. Raises TypeError (dtype) or ValueError naming
    the offending index and value. Every path of la that hands cu_seqlens to
    a kernel or to the reference goes through here.
    """
    cu = np.asarray(cu_seqlens)
    if cu.ndim != 1 or cu.size < 2:
        raise ValueError(f"cu_seqlens must be a 1-D array of N+1 >= 2 offsets, "
                         f"got shape {cu.shape}")
    if cu.dtype == np.bool_ or not np.issubdtype(cu.dtype, np.integer):
        raise TypeError(f"cu_seqlens must have an integer dtype (int32 or int64; not bool), "
                        f"got {cu.dtype}")
    if B is not None and B != 1:
        raise ValueError(f"cu_seqlens requires B == 1 (packed sequences along T), "
                         f"got q with B={B}")
    T = int(T)
    if T > _INT32_MAX:
        raise ValueError(f"cu_seqlens offsets are int32: T={T} does not fit in int32")
    head = f"cu_seqlens must go non-decreasing from 0 to T={T}, got {_show_offsets(cu)}"
    if cu[0] != 0:
        raise ValueError(f"{head}: the first offset cu_seqlens[0] = {int(cu[0])} is not 0")
    # In the array's dtype (exact for every integer dtype): no wrap-around.
    if cu.dtype.kind == "u":
        outside = cu > np.uint64(T)
    else:
        outside = (cu < 0) | (cu > np.int64(T))
    if outside.any():
        i = int(np.argmax(outside))
        raise ValueError(f"{head}: cu_seqlens[{i}] = {int(cu[i])} is outside [0, T={T}]")
    cu = cu.astype(np.int64)  # exact: every value is in [0, T]
    steps = np.diff(cu)
    if (steps < 0).any():
        i = int(np.argmax(steps < 0)) + 1
        raise ValueError(f"{head}: cu_seqlens[{i}] = {int(cu[i])} is smaller than "
                         f"cu_seqlens[{i - 1}] = {int(cu[i - 1])}")
    if cu[-1] != T:
        raise ValueError(f"{head}: the last offset cu_seqlens[{cu.size - 1}] = {int(cu[-1])} "
                         f"is not T={T} (the number of tokens)")
    return cu
