"""The known libraries, one file each: its adapter (how its arrays are made
and read, what its ``from_dlpack`` is) as the code that runs and that a
reproduction prints. Each file says which library it is
(``KNOWN = Known(name, module=..., distribution=..., order=...)``) and
defines a function per side the library has: ``producer()`` returning its
:class:`~dlpack_ref.harness.subject.Producer`, ``consumer()`` returning its
:class:`~dlpack_ref.harness.subject.Consumer`, and, for a library that makes
CUDA arrays, ``cuda()`` returning its
:class:`~dlpack_ref.harness.subject.CudaProducer`; a side without its
function is one the library lacks. A reproduction carries the function of
its rule's side alone, so what both sides use is a private function of the
file. Adding a library is adding a file here; the registry finds it.
:mod:`.generic` serves any other module; the files whose names start with
``_`` are shared helpers."""
