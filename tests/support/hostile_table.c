/* A foreign DLPack exchange table whose functions fail in each way a table
   can: the contract's failure (-1 with an exception set), -1 or another
   nonzero status with no exception set, and an exception set with status 0.
   tests/support/hostile_table.py builds it and puts it on a Python type. */
#include <Python.h>
#include <stdint.h>
#include "dlpack.h"

enum { WORKS = 0, SILENT_MINUS_ONE = 1, ERROR_WITH_ZERO = 2, ERROR_WITH_MINUS_ONE = 3, SILENT_SEVEN = 4,
       INTERRUPT_WITH_MINUS_ONE = 5 };

static DLManagedTensorVersioned* handed;   /* the tensor from_py hands out (once) */
static int from_py_mode, stream_mode, to_py_mode, view_mode;
static void* stream_answer;

void hostile_set(DLManagedTensorVersioned* tensor, int from_py, int stream, int to_py, int view) {
    handed = tensor;
    from_py_mode = from_py;
    stream_mode = stream;
    to_py_mode = to_py;
    view_mode = view;
    stream_answer = NULL;
}

static int status_of(int mode, const char* function) {
    switch (mode) {
    case SILENT_MINUS_ONE: return -1;
    case ERROR_WITH_ZERO: PyErr_Format(PyExc_RuntimeError, "hostile %s", function); return 0;
    case ERROR_WITH_MINUS_ONE: PyErr_Format(PyExc_RuntimeError, "hostile %s", function); return -1;
    case SILENT_SEVEN: return 7;
    case INTERRUPT_WITH_MINUS_ONE: PyErr_SetNone(PyExc_KeyboardInterrupt); return -1;
    default: return 0;
    }
}

/* Hands its tensor out whatever the status says: a consumer must free a
   tensor it was given with a failure, exactly once. */
int hostile_from_py(void* obj, DLManagedTensorVersioned** out) {
    (void)obj;
    *out = handed;
    handed = NULL;
    return status_of(from_py_mode, "managed_tensor_from_py_object_no_sync");
}

int hostile_stream(DLDeviceType device_type, int32_t device_id, void** out) {
    (void)device_type; (void)device_id;
    *out = stream_answer;
    return status_of(stream_mode, "current_work_stream");
}

/* Takes ownership of the tensor as the header says (also when it fails). */
int hostile_to_py(DLManagedTensorVersioned* tensor, void** out) {
    if (tensor != NULL && tensor->deleter != NULL) tensor->deleter(tensor);
    *out = NULL;
    return status_of(to_py_mode, "managed_tensor_to_py_object_no_sync");
}

int hostile_view(void* obj, DLTensor* out) {
    (void)obj;
    memset(out, 0, sizeof(*out));
    return status_of(view_mode, "dltensor_from_py_object_no_sync");
}

/* Refuses every prototype through SetError, as the header asks. */
int hostile_allocator(DLTensor* prototype, DLManagedTensorVersioned** out, void* error_ctx,
                      void (*SetError)(void* error_ctx, const char* kind, const char* message)) {
    (void)prototype;
    *out = NULL;
    if (SetError != NULL) SetError(error_ctx, "BufferError", "hostile allocator");
    return -1;
}
