#!/usr/bin/env python3
"""An independent second opinion on the CUDA path envgen's CubeCL backend uses,
with ctypes only (no torch, no envgen): load libcuda, find and load NVRTC
(+ builtins) and the CUDA headers where envgen looks ($CUDA_PATH,
/usr/local/cuda*, the nvidia/cu13 and nvidia/cuda_* folders of Python
environments), compile a bf16 tensor-core (wmma) kernel with NVRTC for this
GPU, load the PTX in the driver (CUDA error 222 = PTX newer than the driver),
run it and check its result. Prints one JSON line; exit 0 when all holds.

Driver API numbers: CUDA Driver API reference, cuDeviceGetAttribute
(75/76 = compute capability major/minor),
https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__DEVICE.html
"""
import ctypes
import glob
import json
import math
import os
import sys

out = {"check": "cuda_path_ctypes"}


def done(ok, **kw):
    out.update(kw)
    out["ok"] = ok
    print(json.dumps(out))
    sys.exit(0 if ok else 1)


def roots():
    """CUDA roots in envgen's search order: lib + include folders."""
    found = []
    if os.environ.get("CUDA_PATH"):
        found.append(os.environ["CUDA_PATH"])
    found += ["/usr/local/cuda"] + sorted(glob.glob("/usr/local/cuda-*"), reverse=True)
    for site in sorted(glob.glob("/opt/*/.venv/lib/python3*/site-packages") +
                       glob.glob("/usr/lib/python3*/site-packages") +
                       glob.glob("/usr/local/lib/python3*/dist-packages") +
                       [p for p in sys.path if p.endswith("-packages")]):
        found += [os.path.join(site, "nvidia", "cu13")]
    return [r for r in dict.fromkeys(found) if os.path.isdir(r)]


def first(patterns):
    for pattern in patterns:
        hits = sorted(glob.glob(pattern), reverse=True)
        if hits:
            return hits[0]
    return None


try:
    cuda = ctypes.CDLL("libcuda.so.1")
except OSError as e:
    done(False, error=f"libcuda.so.1 not loadable: {e}")
if cuda.cuInit(0):
    done(False, error="cuInit failed")
version = ctypes.c_int()
cuda.cuDriverGetVersion(ctypes.byref(version))
out["driver_cuda_version"] = version.value
count = ctypes.c_int()
cuda.cuDeviceGetCount(ctypes.byref(count))
if count.value < 1:
    done(False, error="no CUDA device")
dev = ctypes.c_int()
cuda.cuDeviceGet(ctypes.byref(dev), 0)
name = ctypes.create_string_buffer(256)
cuda.cuDeviceGetName(name, 256, dev)
major, minor = ctypes.c_int(), ctypes.c_int()
cuda.cuDeviceGetAttribute(ctypes.byref(major), 75, dev)
cuda.cuDeviceGetAttribute(ctypes.byref(minor), 76, dev)
cc = major.value * 10 + minor.value
out.update(device0=name.value.decode(), compute_capability=cc, roots=roots())

nvrtc_path = None
for root in out["roots"]:
    nvrtc_path = first([f"{root}/lib64/libnvrtc.so*", f"{root}/lib/libnvrtc.so*",
                        f"{root}/targets/x86_64-linux/lib/libnvrtc.so*"])
    if nvrtc_path and "builtins" not in nvrtc_path:
        break
    nvrtc_path = None
if not nvrtc_path:
    done(False, error="no libnvrtc.so* under any CUDA root")
try:
    # NVRTC dlopens libnvrtc-builtins.so.13.x by name at compile time: load
    # it first (global), so the name resolves without LD_LIBRARY_PATH.
    builtins = first([os.path.join(os.path.dirname(nvrtc_path), "libnvrtc-builtins.so*")])
    if builtins:
        ctypes.CDLL(builtins, mode=ctypes.RTLD_GLOBAL)
    out["libnvrtc_builtins"] = builtins
    nvrtc = ctypes.CDLL(nvrtc_path)
except OSError as e:
    done(False, error=f"{nvrtc_path}: {e}")
nmaj, nmin = ctypes.c_int(), ctypes.c_int()
nvrtc.nvrtcVersion(ctypes.byref(nmaj), ctypes.byref(nmin))
out.update(libnvrtc=nvrtc_path, nvrtc_version=f"{nmaj.value}.{nmin.value}")

include = next((os.path.join(r, "include") for r in out["roots"]
                if os.path.isfile(os.path.join(r, "include", "cuda_runtime.h"))), None)
if not include:
    done(False, error="no include/cuda_runtime.h under any CUDA root")
out["include"] = include

src = rb"""
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>
using namespace nvcuda;
extern "C" __global__ void k(const __nv_bfloat16* a, const __nv_bfloat16* b, float* c) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
  wmma::fill_fragment(fc, 0.0f);
  wmma::load_matrix_sync(fa, a, 16);
  wmma::load_matrix_sync(fb, b, 16);
  wmma::mma_sync(fc, fa, fb, fc);
  wmma::store_matrix_sync(c, fc, 16, wmma::mem_row_major);
}
"""
arch = f"sm_{cc}a" if cc >= 90 else f"sm_{cc}"
opts = [f"--gpu-architecture={arch}".encode(), f"--include-path={include}".encode()]
if os.path.isdir(os.path.join(include, "cccl")):
    opts.append(f"--include-path={include}/cccl".encode())
prog = ctypes.c_void_p()
nvrtc.nvrtcCreateProgram(ctypes.byref(prog), src, None, 0, None, None)
rc = nvrtc.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
size = ctypes.c_size_t()
nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
log = ctypes.create_string_buffer(size.value)
nvrtc.nvrtcGetProgramLog(prog, log)
if rc:
    done(False, error=f"NVRTC compile failed ({rc})", log=log.value.decode(errors="replace")[-2000:])
nvrtc.nvrtcGetPTXSize(prog, ctypes.byref(size))
ptx = ctypes.create_string_buffer(size.value)
nvrtc.nvrtcGetPTX(prog, ptx)

ctx = ctypes.c_void_p()
cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
cuda.cuCtxSetCurrent(ctx)
module, fn = ctypes.c_void_p(), ctypes.c_void_p()
rc = cuda.cuModuleLoadData(ctypes.byref(module), ptx)
if rc:
    done(False, error=f"the driver rejected NVRTC's PTX: CUresult {rc} (222: NVRTC newer than the driver)")
cuda.cuModuleGetFunction(ctypes.byref(fn), module, b"k")
ptrs = [ctypes.c_uint64() for _ in range(3)]
for p, nbytes in zip(ptrs, [512, 512, 1024]):
    cuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(nbytes))
ones = (ctypes.c_uint16 * 256)(*([0x3F80] * 256))  # bf16 1.0
cuda.cuMemcpyHtoD_v2(ptrs[0], ones, ctypes.c_size_t(512))
cuda.cuMemcpyHtoD_v2(ptrs[1], ones, ctypes.c_size_t(512))
args = (ctypes.c_void_p * 3)(*[ctypes.cast(ctypes.byref(p), ctypes.c_void_p) for p in ptrs])
rc = cuda.cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, None, args, None)
rc2 = cuda.cuCtxSynchronize()
if rc or rc2:
    done(False, error=f"launch/sync failed: {rc}/{rc2}")
res = (ctypes.c_float * 256)()
cuda.cuMemcpyDtoH_v2(res, ptrs[2], ctypes.c_size_t(1024))
# All-ones 16x16 times all-ones 16x16: every entry is 16.
good = all(math.isclose(res[i], 16.0) for i in (0, 31, 128, 255))
done(good, wmma_bf16=[res[0], res[255]], expected=16.0)
