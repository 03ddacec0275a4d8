/* kanal.broker._batch_walk: the leader's walk of a produced batch's RecordList, in C.
 *
 * Optional: kanal.broker.batch_validation imports it when it is built (setup.py builds it where a C compiler
 * and the Python headers are found) and walks in pure Python otherwise. The rules are those of
 * batch_validation's docstring; walk_record_list_python there is the reference, and both must accept the
 * same inputs and refuse the rest with the same ErrorCode (tests/broker/test_batch_validation_fuzz.py
 * holds them to it on random and mutated batches).
 *
 * walk(record_list, record_count, first_timestamp_ms) -> the largest record timestamp
 *
 * Wire format accepted (tags are varints: field number << 3 | wire type), nothing else:
 *   RecordList   0x0a len Record
 *   Record       0x08 varint offset_delta (must equal the record's index), 0x10 varint timestamp_delta_ms
 *                (zigzag), 0x1a len key, 0x22 len value, 0x2a len RecordHeader
 *   RecordHeader 0x0a len key (valid UTF-8), 0x12 len value
 * Varints: at most 10 bytes, below 2^64. Tags and lengths: at most 5 bytes, below 2^32; a length within
 * its message. Every read is checked against the end of the buffer first; nothing here reads past it,
 * allocates, or calls Python until an error is raised, so the GIL is released for the walk.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>
#include <stdint.h>
#include <string.h>

static PyObject *KanalError;
static PyObject *INVALID_RECORD;
static PyObject *INVALID_TIMESTAMP;

/* Why a walk failed: a static reason, the byte where, a code, and up to two numbers for the message. */
typedef struct {
    const uint8_t *start;
    const char *why; /* NULL while nothing is wrong */
    int timestamp;   /* 1: INVALID_TIMESTAMP, else INVALID_RECORD */
    Py_ssize_t at;
    long long a, b;
} Walk;

static int fail(Walk *w, const uint8_t *at, const char *why) {
    w->why = why;
    w->at = at - w->start;
    return -1;
}

static inline int read_varint(Walk *w, const uint8_t **pp, const uint8_t *end, uint64_t *out) {
    const uint8_t *p = *pp;
    if (p < end && *p < 0x80) {
        *out = *p;
        *pp = p + 1;
        return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < 10; i++) {
        if (p >= end) return fail(w, *pp, "truncated varint");
        uint8_t b = *p++;
        if (i == 9 && b > 1) break; /* a 10th byte adds bit 63 at most */
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (b < 0x80) {
            *out = v;
            *pp = p;
            return 0;
        }
    }
    return fail(w, *pp, "varint longer than 10 bytes or above 2^64 - 1");
}

static inline int read_varint32(Walk *w, const uint8_t **pp, const uint8_t *end, uint32_t *out, const char *what) {
    const uint8_t *p = *pp;
    uint64_t v;
    if (read_varint(w, pp, end, &v) < 0) return -1;
    if (*pp - p > 5 || v > UINT32_MAX) return fail(w, p, what);
    *out = (uint32_t)v;
    return 0;
}

#define TAG_TOO_LONG "tag longer than 5 bytes or above 2^32 - 1"

static inline int read_length(Walk *w, const uint8_t **pp, const uint8_t *end, Py_ssize_t *len) {
    const uint8_t *at = *pp;
    uint32_t n;
    if (read_varint32(w, pp, end, &n, "length longer than 5 bytes or above 2^32 - 1") < 0) return -1;
    if (n > INT32_MAX || (Py_ssize_t)n > end - *pp) return fail(w, at, "length past the end of its message");
    *len = (Py_ssize_t)n;
    return 0;
}

static int unknown(Walk *w, const uint8_t *at, uint32_t tag, const char *where) {
    w->a = tag >> 3;
    w->b = tag & 7;
    return fail(w, at, where);
}

/* Strict UTF-8 (RFC 3629), as Python's and upb's decoders check it: no overlong forms, no surrogates,
 * nothing above U+10FFFF. */
static int valid_utf8(const uint8_t *p, const uint8_t *end) {
    while (p < end) {
        uint8_t c = *p;
        if (c < 0x80) {
            p++;
            continue;
        }
        Py_ssize_t left = end - p;
        if (c >= 0xc2 && c <= 0xdf) {
            if (left < 2 || (p[1] & 0xc0) != 0x80) return 0;
            p += 2;
        } else if (c >= 0xe0 && c <= 0xef) {
            if (left < 3 || (p[1] & 0xc0) != 0x80 || (p[2] & 0xc0) != 0x80) return 0;
            if (c == 0xe0 && p[1] < 0xa0) return 0; /* overlong */
            if (c == 0xed && p[1] > 0x9f) return 0; /* surrogate */
            p += 3;
        } else if (c >= 0xf0 && c <= 0xf4) {
            if (left < 4 || (p[1] & 0xc0) != 0x80 || (p[2] & 0xc0) != 0x80 || (p[3] & 0xc0) != 0x80) return 0;
            if (c == 0xf0 && p[1] < 0x90) return 0; /* overlong */
            if (c == 0xf4 && p[1] > 0x8f) return 0; /* above U+10FFFF */
            p += 4;
        } else {
            return 0;
        }
    }
    return 1;
}

static int walk_header(Walk *w, const uint8_t *p, const uint8_t *end) {
    while (p < end) {
        const uint8_t *at = p;
        uint32_t tag;
        Py_ssize_t len;
        if (read_varint32(w, &p, end, &tag, TAG_TOO_LONG) < 0) return -1;
        if (tag == 0x0a) {
            if (read_length(w, &p, end, &len) < 0) return -1;
            if (!valid_utf8(p, p + len)) return fail(w, at, "header key is not valid UTF-8");
            p += len;
        } else if (tag == 0x12) {
            if (read_length(w, &p, end, &len) < 0) return -1;
            p += len;
        } else {
            return unknown(w, at, tag, "a RecordHeader");
        }
    }
    return 0;
}

/* Record `index` in [p, end); its timestamp into *ts. */
static int walk_record(Walk *w, const uint8_t *p, const uint8_t *end, long long index, long long first_ts,
                       long long *ts) {
    const uint8_t *start = p;
    uint64_t offset_delta = 0, zigzag = 0;
    while (p < end) {
        const uint8_t *at = p;
        uint32_t tag;
        Py_ssize_t len;
        if (p < end && *p < 0x80) { /* every accepted tag is one byte */
            tag = *p++;
        } else if (read_varint32(w, &p, end, &tag, TAG_TOO_LONG) < 0) {
            return -1;
        }
        switch (tag) {
        case 0x08:
            if (read_varint(w, &p, end, &offset_delta) < 0) return -1;
            break;
        case 0x10:
            if (read_varint(w, &p, end, &zigzag) < 0) return -1;
            break;
        case 0x1a:
        case 0x22:
            if (read_length(w, &p, end, &len) < 0) return -1;
            p += len;
            break;
        case 0x2a:
            if (read_length(w, &p, end, &len) < 0) return -1;
            if (walk_header(w, p, p + len) < 0) return -1;
            p += len;
            break;
        default:
            return unknown(w, at, tag, "a Record");
        }
    }
    if (offset_delta != (uint64_t)index) {
        w->a = index;
        w->b = (long long)offset_delta; /* the message prints it unsigned */
        return fail(w, start, "offset");
    }
    long long delta = (long long)((zigzag >> 1) ^ (~(zigzag & 1) + 1));
    long long sum;
    if (__builtin_add_overflow(first_ts, delta, &sum) || sum < 0) {
        w->timestamp = 1;
        w->a = index;
        return fail(w, start, "timestamp");
    }
    *ts = sum;
    return 0;
}

static int walk_list(Walk *w, const uint8_t *p, const uint8_t *end, long long record_count, long long first_ts,
                     long long *max_ts) {
    long long index = 0;
    *max_ts = -1;
    while (p < end) {
        const uint8_t *at = p;
        uint32_t tag;
        Py_ssize_t len;
        long long ts;
        if (p < end && *p < 0x80) {
            tag = *p++;
        } else if (read_varint32(w, &p, end, &tag, TAG_TOO_LONG) < 0) {
            return -1;
        }
        if (tag != 0x0a) return unknown(w, at, tag, "a RecordList");
        if (index >= record_count) {
            w->a = record_count;
            return fail(w, at, "too many");
        }
        if (read_length(w, &p, end, &len) < 0) return -1;
        if (walk_record(w, p, p + len, index, first_ts, &ts) < 0) return -1;
        if (ts > *max_ts) *max_ts = ts;
        p += len;
        index++;
    }
    if (index != record_count) {
        w->a = index;
        w->b = record_count;
        return fail(w, end, "too few");
    }
    return 0;
}

static PyObject *raise_walk(Walk *w, Py_ssize_t size) {
    PyObject *message;
    const char *why = w->why;
    if (!strcmp(why, "offset")) {
        message = PyUnicode_FromFormat("records: record %lld has offset_delta %llu: offsets must be 0, 1, 2, ... "
                                       "in order at byte %zd of %zd", w->a, (unsigned long long)w->b, w->at, size);
    } else if (!strcmp(why, "timestamp")) {
        message = PyUnicode_FromFormat("records: record %lld has a timestamp outside [0, 2^63 - 1] at byte %zd "
                                       "of %zd", w->a, w->at, size);
    } else if (!strcmp(why, "too many")) {
        message = PyUnicode_FromFormat("records: more records than record_count %lld at byte %zd of %zd", w->a,
                                       w->at, size);
    } else if (!strcmp(why, "too few")) {
        message = PyUnicode_FromFormat("records: %lld records where record_count says %lld at byte %zd of %zd",
                                       w->a, w->b, w->at, size);
    } else if (!strncmp(why, "a Record", 8)) {
        message = PyUnicode_FromFormat("records: field %lld with wire type %lld is not part of %s at byte %zd of "
                                       "%zd", w->a, w->b, why, w->at, size);
    } else {
        message = PyUnicode_FromFormat("records: %s at byte %zd of %zd", why, w->at, size);
    }
    if (message == NULL) return NULL;
    PyObject *err = PyObject_CallFunction(KanalError, "OO", w->timestamp ? INVALID_TIMESTAMP : INVALID_RECORD,
                                          message);
    Py_DECREF(message);
    if (err != NULL) {
        PyErr_SetObject(KanalError, err);
        Py_DECREF(err);
    }
    return NULL;
}

static PyObject *py_walk(PyObject *mod, PyObject *args) {
    Py_buffer data;
    long long record_count, first_ts, max_ts;
    if (!PyArg_ParseTuple(args, "y*LL:walk", &data, &record_count, &first_ts)) return NULL;
    Walk w = {.start = data.buf};
    int rc;
    /* The buffer is held (PyBuffer) and the walk touches no Python object: other threads may run. */
    Py_BEGIN_ALLOW_THREADS
    rc = walk_list(&w, data.buf, (const uint8_t *)data.buf + data.len, record_count, first_ts, &max_ts);
    Py_END_ALLOW_THREADS
    Py_ssize_t size = data.len;
    PyBuffer_Release(&data);
    if (rc < 0) return raise_walk(&w, size);
    return PyLong_FromLongLong(max_ts);
}

/* schema_ids(record_list, field_tag) -> (index, ids): broker/schema_validation.py's scan, whose Python
 * reference is scan_schema_ids_python there. Over a RecordList the walk above accepted: for each record the
 * last occurrence of the length-delimited field `field_tag` (0x1a key, 0x22 value); absent (null) passes; one
 * of fewer than 5 bytes or not starting with byte 0 ends the scan with its record's index; otherwise the
 * big-endian uint32 after the 0 is a schema id, and `ids` maps each to the index of the first record naming
 * it. `index` is -1 when no record ended the scan. The GIL is held (the dict is built as it goes), but a run
 * of records naming one id costs a comparison each, not a dict operation. Every read is bounds-checked as in
 * the walk; input the walk refuses is refused here too (INVALID_RECORD), though the broker never passes any. */
static PyObject *py_schema_ids(PyObject *mod, PyObject *args) {
    Py_buffer data;
    unsigned int field_tag;
    if (!PyArg_ParseTuple(args, "y*I:schema_ids", &data, &field_tag)) return NULL;
    const uint8_t *p = data.buf, *end = (const uint8_t *)data.buf + data.len;
    Walk w = {.start = data.buf};
    Py_ssize_t size = data.len;
    long long index = 0, unframed = -1;
    int64_t last_id = -1; /* the id of the last framed record seen: runs of one id skip the dict */
    PyObject *ids = PyDict_New();
    if (ids == NULL) goto error;
    while (p < end) {
        uint32_t tag;
        Py_ssize_t len;
        const uint8_t *at = p;
        if (read_varint32(&w, &p, end, &tag, TAG_TOO_LONG) < 0) goto invalid;
        if (tag != 0x0a) {
            unknown(&w, at, tag, "a RecordList");
            goto invalid;
        }
        if (read_length(&w, &p, end, &len) < 0) goto invalid;
        const uint8_t *record_end = p + len, *field = NULL;
        Py_ssize_t field_len = 0;
        while (p < record_end) {
            at = p;
            if (read_varint32(&w, &p, record_end, &tag, TAG_TOO_LONG) < 0) goto invalid;
            if ((tag & 7) == 0) {
                uint64_t ignored;
                if (read_varint(&w, &p, record_end, &ignored) < 0) goto invalid;
            } else if ((tag & 7) == 2) {
                if (read_length(&w, &p, record_end, &len) < 0) goto invalid;
                if (tag == field_tag) {
                    field = p;
                    field_len = len;
                }
                p += len;
            } else {
                unknown(&w, at, tag, "a Record");
                goto invalid;
            }
        }
        if (field != NULL) {
            if (field_len < 5 || field[0] != 0) {
                unframed = index;
                break;
            }
            uint32_t id = (uint32_t)field[1] << 24 | (uint32_t)field[2] << 16 | (uint32_t)field[3] << 8 | field[4];
            if ((int64_t)id != last_id) {
                PyObject *key = PyLong_FromUnsignedLong(id), *first = PyLong_FromLongLong(index);
                PyObject *kept = key != NULL && first != NULL ? PyDict_SetDefault(ids, key, first) : NULL;
                Py_XDECREF(key);
                Py_XDECREF(first);
                if (kept == NULL) goto error; /* a borrowed reference otherwise */
                last_id = id;
            }
        }
        index++;
    }
    PyBuffer_Release(&data);
    return Py_BuildValue("(LN)", unframed, ids);
invalid:
    Py_XDECREF(ids);
    PyBuffer_Release(&data);
    return raise_walk(&w, size);
error:
    Py_XDECREF(ids);
    PyBuffer_Release(&data);
    return NULL;
}

static PyMethodDef module_methods[] = {
    {"schema_ids", py_schema_ids, METH_VARARGS,
     "schema_ids(record_list, field_tag) -> (index, {schema id: first index}): the registry-framed ids of one "
     "field of a walked RecordList, up to the first record (index; -1: none) whose field is not framed."},
    {"walk", py_walk, METH_VARARGS,
     "walk(record_list, record_count, first_timestamp_ms) -> int: the largest record timestamp of a "
     "decompressed RecordList that keeps the rules of kanal.broker.batch_validation; KanalError (INVALID_RECORD or "
     "INVALID_TIMESTAMP) otherwise."},
    {NULL}};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "kanal.broker._batch_walk",
    "The leader's record walk in C (see broker/_batch_walk.c).", -1, module_methods,
};

static int import_error_code(PyObject *codes, const char *name, PyObject **out) {
    *out = PyObject_GetAttrString(codes, name);
    return *out == NULL ? -1 : 0;
}

PyMODINIT_FUNC PyInit__batch_walk(void) {
    PyObject *errors = PyImport_ImportModule("kanal.v1.error");
    if (errors == NULL) return NULL;
    KanalError = PyObject_GetAttrString(errors, "KanalError");
    PyObject *codes = KanalError ? PyObject_GetAttrString(errors, "ErrorCode") : NULL;
    Py_DECREF(errors);
    if (codes == NULL) return NULL;
    int rc = import_error_code(codes, "INVALID_RECORD", &INVALID_RECORD) |
             import_error_code(codes, "INVALID_TIMESTAMP", &INVALID_TIMESTAMP);
    Py_DECREF(codes);
    if (rc < 0) return NULL;
    return PyModule_Create(&module_def);
}
