"""The capture runtime's libcudart in this process, whichever CUDA major it was built for."""

from __future__ import annotations

import ctypes
import os

# The runtime's libcudart carries the soname of the torch build it serves (CUDA 13 or 12 wheels).
CUDART_SONAMES = ("libcudart.so.13", "libcudart.so.12")


def runtime_cudart() -> ctypes.CDLL | None:
    """The loaded capture runtime's libcudart (it exports ``fakecuda_version``), or None.

    Never loads a library: a process that is not on the capture runtime gets None.
    """
    for name in CUDART_SONAMES:
        try:
            lib = ctypes.CDLL(name, mode=os.RTLD_NOLOAD)
        except OSError:
            continue
        if hasattr(lib, "fakecuda_version"):
            return lib
    return None
