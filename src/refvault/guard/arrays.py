"""The numpy array types the guard's kernels take and return."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["I64", "U8", "U32", "U64"]

U8 = npt.NDArray[np.uint8]
U32 = npt.NDArray[np.uint32]
U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]
