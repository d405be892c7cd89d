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

/* --- a table made afresh in its own capsule on every access ---------------
   What a descriptor on a type may hand out for __dlpack_c_exchange_api__: a
   new capsule owning a new table, freed by the capsule's destructor. The
   destructor poisons the table (0xFF bytes) instead of freeing it, so that a
   consumer still using a table whose capsule it let go follows a poisoned
   prev_api or function pointer into a crash, every time. */
static long fresh_made, fresh_released, fresh_exports;

/* obj.__dlpack__(max_version=(1, 3)), claimed: the tensor of a versioned capsule. */
static int fresh_from_py(void* obj, DLManagedTensorVersioned** out) {
    PyObject *capsule, *method = PyObject_GetAttrString((PyObject*)obj, "__dlpack__");
    PyObject *args = PyTuple_New(0), *kwargs = Py_BuildValue("{s(ii)}", "max_version", 1, 3);
    void* tensor = NULL;
    *out = NULL;
    capsule = method && args && kwargs ? PyObject_Call(method, args, kwargs) : NULL;
    Py_XDECREF(method);
    Py_XDECREF(args);
    Py_XDECREF(kwargs);
    if (capsule == NULL) return -1;
    tensor = PyCapsule_GetPointer(capsule, "dltensor_versioned");
    if (tensor != NULL) PyCapsule_SetName(capsule, "used_dltensor_versioned");
    Py_DECREF(capsule);
    if (tensor == NULL) return -1;
    *out = (DLManagedTensorVersioned*)tensor;
    ++fresh_exports;
    return 0;
}

static int fresh_stream(DLDeviceType device_type, int32_t device_id, void** out) {
    (void)device_type; (void)device_id;
    *out = NULL;
    return 0;
}

static void fresh_destroy(PyObject* capsule) {
    void* table = PyCapsule_GetPointer(capsule, "dlpack_exchange_api");
    if (table != NULL) memset(table, 0xFF, sizeof(DLPackExchangeAPI));
    ++fresh_released;
}

PyObject* hostile_fresh_table(void) {
    DLPackExchangeAPI* api = (DLPackExchangeAPI*)calloc(1, sizeof(DLPackExchangeAPI));
    PyObject* capsule;
    if (api == NULL) return PyErr_NoMemory();
    api->header.version.major = 1;
    api->header.version.minor = 3;
    api->managed_tensor_allocator = hostile_allocator;
    api->managed_tensor_from_py_object_no_sync = fresh_from_py;
    api->managed_tensor_to_py_object_no_sync = hostile_to_py;
    api->dltensor_from_py_object_no_sync = hostile_view;
    api->current_work_stream = fresh_stream;
    capsule = PyCapsule_New(api, "dlpack_exchange_api", fresh_destroy);
    if (capsule == NULL) { free(api); return NULL; }
    ++fresh_made;
    return capsule;
}

/* (capsules made, capsules released, tensors exported through a fresh table) */
PyObject* hostile_fresh_counts(void) {
    return Py_BuildValue("(lll)", fresh_made, fresh_released, fresh_exports);
}
