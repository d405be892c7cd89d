/* dlpack-ref core: the extension's entry point. The Cython module's create
   step records the first interpreter that creates the module and refuses
   every other one for the life of the process, so a subinterpreter that got
   that far first would lock the main interpreter out. This file puts a
   guard in front of that step: the module's Py_mod_create refuses every
   interpreter but the main one before the Cython module's create runs, so
   no state of the core exists in any other, however the module is loaded
   (by name or by its file path). The guard is in Py_mod_create, not in
   PyInit__dlpack_ref: CPython 3.13+ runs an extension's PyInit function in
   the main interpreter even for an import in a subinterpreter.

   The def also declares Py_mod_multiple_interpreters "not supported"
   (CPython 3.12+): Cython 3.3 emits that slot only for modules built with
   CYTHON_USE_MODULE_STATE, and CPython honours it itself only in
   interpreters that check their extensions (isolated ones, which it then
   refuses with its own message), never in a legacy subinterpreter.

   This file is the translation unit CMake compiles: the Cython module
   (_dlpack_ref.c, generated from src/_dlpack_ref.pyx) is included with its
   init function renamed. */

#define PyInit__dlpack_ref dlref_cython_module_init
#include "_dlpack_ref.c"
#undef PyInit__dlpack_ref

#define DLREF_MAIN_INTERPRETER_ONLY \
    "dlpack_ref can be imported in the main interpreter only, not in a subinterpreter: its compiled core " \
    "keeps process-wide state"

/* The Cython module's create function, and the slots of the def with the
   guard in its place (room for the Cython module's slots and one more). */
static PyObject* (*dlref_cython_create)(PyObject* spec, PyModuleDef* def) = NULL;
#define DLREF_MAX_SLOTS 16
static PyModuleDef_Slot dlref_slots[DLREF_MAX_SLOTS];
static int dlref_slots_ready = 0;   /* 0, 1 while being written, 2 once in place */

static PyObject* dlref_create(PyObject* spec, PyModuleDef* def) {
#ifndef PYPY_VERSION /* PyPy has one interpreter per process, no subinterpreters */
    if (PyInterpreterState_Get() != PyInterpreterState_Main()) {
        PyErr_SetString(PyExc_ImportError, DLREF_MAIN_INTERPRETER_ONLY);
        return NULL;
    }
#endif
    return dlref_cython_create(spec, def);
}

/* The def's slots with Py_mod_create replaced by the guard and, on 3.12+,
   multiple interpreters declared not supported; -1 with an error when the
   Cython module's def is not as expected. */
static int dlref_guard_slots(PyModuleDef* def) {
    int n = 0, i, has_multiple = 0;
    const PyModuleDef_Slot* s;
    for (s = def->m_slots; s != NULL && s->slot != 0; ++s) {
        if (n >= DLREF_MAX_SLOTS - 2) goto unexpected;
        dlref_slots[n] = *s;
        if (s->slot == Py_mod_create) {
            dlref_cython_create = (PyObject* (*)(PyObject*, PyModuleDef*))s->value;
            dlref_slots[n].value = (void*)dlref_create;
        }
#ifdef Py_mod_multiple_interpreters
        if (s->slot == Py_mod_multiple_interpreters) {
            has_multiple = 1;
            dlref_slots[n].value = Py_MOD_MULTIPLE_INTERPRETERS_NOT_SUPPORTED;
        }
#endif
        ++n;
    }
    if (dlref_cython_create == NULL) goto unexpected;
#ifdef Py_mod_multiple_interpreters
    if (!has_multiple) {
        dlref_slots[n].slot = Py_mod_multiple_interpreters;
        dlref_slots[n].value = Py_MOD_MULTIPLE_INTERPRETERS_NOT_SUPPORTED;
        ++n;
    }
#endif
    (void)has_multiple;
    for (i = n; i < DLREF_MAX_SLOTS; ++i) { dlref_slots[i].slot = 0; dlref_slots[i].value = NULL; }
    def->m_slots = dlref_slots;
    return 0;
unexpected:
    PyErr_SetString(PyExc_ImportError, "dlpack_ref: the compiled core's module definition has no create slot to "
                                       "guard (was it built by another Cython?)");
    return -1;
}

PyMODINIT_FUNC PyInit__dlpack_ref(void);

PyMODINIT_FUNC PyInit__dlpack_ref(void) {
    PyObject* made = dlref_cython_module_init();
    if (made == NULL) return NULL;
    /* The slots are put in place once per process, by whichever interpreter
       (or thread of a free-threaded one) gets here first; the others wait. */
    for (;;) {
        int state = __atomic_load_n(&dlref_slots_ready, __ATOMIC_ACQUIRE), idle = 0;
        if (state == 2) return made;
        if (state == 0 && __atomic_compare_exchange_n(&dlref_slots_ready, &idle, 1, 0, __ATOMIC_ACQ_REL,
                                                      __ATOMIC_ACQUIRE)) {
            int failed = dlref_guard_slots((PyModuleDef*)made) < 0;
            __atomic_store_n(&dlref_slots_ready, failed ? 0 : 2, __ATOMIC_RELEASE);
            return failed ? NULL : made;
        }
    }
}
