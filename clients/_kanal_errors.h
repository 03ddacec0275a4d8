/* kanal's error type for the clients' C extensions (_producer_fast.c, _consumer_fast.c): both raise the
 * Python KanalError with an ErrorCode, so callers see one error type whichever path ran. Included by
 * each extension; each keeps its own copies of the objects (extensions are separate modules). */
#ifndef KANAL_ERRORS_H
#define KANAL_ERRORS_H

#include <Python.h>

/* Imports kanal.v1.error: sets *kanal_error to KanalError and *code to ErrorCode.<code_name> (new
 * references). Returns 0, or -1 with an exception set. For a module's init function. */
static int import_kanal_error(const char *code_name, PyObject **kanal_error, PyObject **code) {
    PyObject *errors = PyImport_ImportModule("kanal.v1.error");
    if (errors == NULL) return -1;
    *kanal_error = PyObject_GetAttrString(errors, "KanalError");
    PyObject *codes = *kanal_error ? PyObject_GetAttrString(errors, "ErrorCode") : NULL;
    Py_DECREF(errors);
    if (codes == NULL) return -1;
    *code = PyObject_GetAttrString(codes, code_name);
    Py_DECREF(codes);
    return *code == NULL ? -1 : 0;
}

#endif
