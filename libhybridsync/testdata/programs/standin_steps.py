"""A step function for experiments/apps/inproc.py on the stand-in CUDA
(libhybridsync/testdata/standin), through ctypes: per step four 50 µs kernels on a
stream and a stream synchronize, like inprocapp.c. The stand-in runs no
kernel code: a kernel is an address (two of libc's functions here) and
its first argument the time it takes, in ns."""
import ctypes


class Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


def build():
    rt = ctypes.CDLL("libcudart.so.13")
    stream = ctypes.c_void_p()
    if rt.cudaStreamCreate(ctypes.byref(stream)) != 0:
        raise RuntimeError("cudaStreamCreate failed")
    libc = ctypes.CDLL(None)
    kernels = [ctypes.cast(libc.getpid, ctypes.c_void_p), ctypes.cast(libc.getppid, ctypes.c_void_p)]
    ns = ctypes.c_int64(50000)
    args = (ctypes.c_void_p * 1)(ctypes.addressof(ns))
    launch, sync = rt.cudaLaunchKernel, rt.cudaStreamSynchronize
    launch.argtypes = [ctypes.c_void_p, Dim3, Dim3, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    sync.argtypes = [ctypes.c_void_p]
    grid, block = Dim3(1, 1, 1), Dim3(128, 1, 1)

    def step():
        assert ns.value == 50000  # and keeps ns, which args points to, alive
        for i in range(4):
            if launch(kernels[i % 2], grid, block, args, 0, stream) != 0:
                raise RuntimeError("cudaLaunchKernel failed")
        if sync(stream) != 0:
            raise RuntimeError("cudaStreamSynchronize failed")
    return step
