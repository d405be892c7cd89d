/* dlpack-ref core: the extension's entry point. CPython calls
   PyInit__dlpack_ref in every interpreter that imports or loads the module
   (by name or by file path); this one refuses every interpreter but the
   main one before the Cython module's own init runs, so no state of the
   core exists in any other: Cython records the first interpreter that
   creates the module and refuses every other one for the life of the
   process, so a subinterpreter that got that far first would lock the main
   interpreter out.

   The Py_mod_multiple_interpreters slot cannot say this: Cython 3.3 emits
   it only for modules built with CYTHON_USE_MODULE_STATE, and CPython
   honours "not supported" only in interpreters that check their extensions
   (isolated ones), never in a legacy subinterpreter.

   This file is the translation unit CMake compiles: the Cython module
   (_dlpack_ref.c, generated from src/_dlpack_ref.pyx) is included with its
   init function renamed. */

#define PyInit__dlpack_ref dlref_cython_module_init
#include "_dlpack_ref.c"
#undef PyInit__dlpack_ref

#define DLREF_MAIN_INTERPRETER_ONLY \
    "dlpack_ref can be imported in the main interpreter only, not in a subinterpreter: its compiled core " \
    "keeps process-wide state"

PyMODINIT_FUNC PyInit__dlpack_ref(void);

PyMODINIT_FUNC PyInit__dlpack_ref(void) {
    if (PyInterpreterState_Get() != PyInterpreterState_Main()) {
        PyErr_SetString(PyExc_ImportError, DLREF_MAIN_INTERPRETER_ONLY);
        return NULL;
    }
    return dlref_cython_module_init();
}
