"""Two defects of Triton 3.6.0's CPU interpreter (TRITON_INTERPRET=1) that bfloat16 kernels meet,
mended in its builder, so that the interpreted kernels compute what the compiled ones do.

1. tl.dot of bfloat16 operands: the interpreter keeps bfloat16 as its raw 16 bits (numpy has no
   bfloat16) and create_dot converts only 8-bit floats, so np.matmul multiplies the bit patterns
   as integers. Here the operands become float32 first: a bfloat16 product is exact in float32,
   which is what the tensor cores accumulate.
2. float32 -> bfloat16 casts (x.to(tl.bfloat16)): compiled, they round to nearest even (LLVM's
   fptrunc, cvt.rn.bf16.f32); the interpreter's cast_impl truncates. Here they round to nearest
   even, as torch's .to(torch.bfloat16) does.

tests/kernels/test_decode_kernels.py checks both against torch (InterpreterFixesTest). apply() is
idempotent and does nothing to compiled kernels."""
import warnings

import numpy as np
import triton.language as tl
from triton.runtime import interpreter

_applied = False


def _to_float32(handle):
    if handle.dtype.scalar == tl.bfloat16:
        return (handle.data.astype(np.uint32) << 16).view(np.float32)
    return handle.data


def _round_to_bfloat16(data):
    """float32 -> bfloat16 bits, round to nearest even (NaN stays a quiet NaN)."""
    bits = np.ascontiguousarray(data, dtype=np.float32).view(np.uint32)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(data), np.uint16(0x7FC0), rounded)


def apply():
    global _applied
    if _applied:
        return
    builder = interpreter.InterpreterBuilder
    original_dot = builder.create_dot
    original_cast = builder.cast_impl

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        if tl.bfloat16 in (a.dtype.scalar, b.dtype.scalar):
            product = np.matmul(_to_float32(a), _to_float32(b), dtype=np.float32)
            return interpreter.TensorHandle(product + d.data, d.dtype.scalar)
        return original_dot(self, a, b, d, input_precision, max_num_imprecise_acc)

    def cast_impl(self, src, dst_type):
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            return interpreter.TensorHandle(_round_to_bfloat16(src.data), tl.bfloat16)
        return original_cast(self, src, dst_type)

    builder.create_dot = create_dot
    builder.cast_impl = cast_impl
    # Its loops over run-time bounds turn one-element arrays into ints: deprecated in numpy 1.25,
    # refused by 2.4 (hence scripts/setup_python.sh's numpy 2.3), said once per process.
    warnings.filterwarnings("ignore", message="Conversion of an array with ndim > 0",
                            category=DeprecationWarning)
    # The lambdas bound to cast_impl at class creation call it by attribute, so they follow.
    _applied = True
