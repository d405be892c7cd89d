"""CUDA through cuda-python: placeholder until the CUDA layer lands."""


class CUDAUnavailableError(BufferError, RuntimeError):
    """CUDA was asked for but cannot be used; the message names what is missing."""


def require():
    try:
        from cuda.bindings import driver  # noqa: F401
    except ImportError as exc:
        raise CUDAUnavailableError(
            f"CUDA needs cuda-python (pip install 'dlpack-ref[cuda]'): {exc}") from None
    raise CUDAUnavailableError("dlpack-ref's CUDA layer is not available in this build")
