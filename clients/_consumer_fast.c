/* kanal.clients._consumer_fast: the per-record part of Consumer._decode, in C.
 *
 * Optional: consumer.py imports it when it is built (pip install -e . builds it when a C compiler and the
 * Python headers are there) and decodes in pure Python otherwise. Both paths must give the same records
 * and fail on the same input; tests/clients/test_consumer_decode.py compares them on random and on
 * damaged RecordLists.
 *
 * What this file owns: turning one batch's serialized RecordList (already CRC-checked and decompressed)
 * into ConsumerRecord objects appended to a list, skipping records below the fetch position. In Python
 * that costs a upb parse plus ~1.7 us of attribute reads, HasField calls and an __init__ per record; here
 * it is one pass over the bytes.
 *
 * What stays in Python: walking the log entries and checking both CRCs and the header rules
 * (kanal.v1.batch.iter_entries), decompression (kanal.v1.codecs), the batch header fields (base offset,
 * first timestamp, leader epoch, next offset), buffering and positions. All of that is per batch.
 *
 * ConsumerRecord stays the Python __slots__ class (one class whichever path decoded, same repr, pickling
 * and isinstance). bind_record_class() reads where its slots live from their member descriptors, and
 * the decoder allocates the instance and fills those slots directly: ConsumerRecord.__init__ only stores
 * its arguments, so skipping the call gives the same object without the interpreter's frame.
 *
 * Wire format read (protobuf, records.proto; tags are varints: field number << 3 | wire type):
 *   RecordList   0x0a len Record                 -- field 1, repeated, length-delimited
 *   Record       0x08 varint  offset_delta        -- field 1, uint32: the low 32 bits of the varint
 *                0x10 varint  timestamp_delta_ms  -- field 2, sint64: zigzag, (n >> 1) ^ -(n & 1)
 *                0x1a len     key                 -- field 3, optional bytes: absent -> None, else bytes
 *                0x22 len     value               -- field 4, optional bytes: absent -> None, else bytes
 *                0x2a len     RecordHeader        -- field 5, repeated, in order
 *   RecordHeader 0x0a len     key                 -- field 1, string: UTF-8, checked; absent -> ""
 *                0x12 len     value               -- field 2, optional bytes: absent -> None
 * A scalar field that occurs more than once keeps its last value. Anything else -- another field number,
 * or a known number with another wire type -- is an unknown field and is skipped: varint (0), 64-bit
 * (1), length-delimited (2), 32-bit (5), and groups (3 ... matching 4), nested. These are the rules of
 * upb (python protobuf 4+), checked against it by the tests, including what it rejects:
 *   - a varint of more than 10 bytes (bits past the 64th are dropped); a tag or a length of more than
 *     5 bytes or above 2^32 - 1; a length past the end of its message (or above 2^31 - 1);
 *   - field number 0, wire types 6 and 7, an end-group tag outside its group or not matching it, a
 *     group left open at the end of its message;
 *   - nesting deeper than 100 (RecordList, Record, RecordHeader and each group count one level, as
 *     upb's default depth limit does);
 *   - a header key that is not valid UTF-8 -- each occurrence is checked, as upb does.
 * Any of these raises KanalError(CORRUPT_MESSAGE) and leaves the output list as it was. Every read is
 * checked against the end of the buffer first; nothing here reads past it.
 *
 * Threading: nothing here releases the GIL, but an allocation may start a GC pass whose finalizers run
 * Python code (and switch threads) midway; so the decoder keeps no borrowed reference across one, and
 * the record class is bound once per process. The input buffer is held (PyBuffer) for the whole call.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "_kanal_errors.h"

#include <limits.h>
#include <stdint.h>
#include <string.h>

#define DEPTH_MAX 100 /* upb's default decode depth limit (kUpb_WireFormat_DefaultDepthLimit) */

static PyObject *KanalError;      /* kanal.v1.error.KanalError */
static PyObject *CORRUPT_MESSAGE; /* ErrorCode.CORRUPT_MESSAGE */

/* The bound ConsumerRecord class and the byte offsets of its slots, in this order. */
enum { S_TOPIC, S_PARTITION, S_OFFSET, S_TIMESTAMP, S_KEY, S_VALUE, S_HEADERS, S_EPOCH, S_COUNT };
static const char *slot_names[S_COUNT] = {"topic", "partition", "offset", "timestamp_ms", "key", "value",
                                          "headers", "leader_epoch"};
static PyTypeObject *record_type;
static Py_ssize_t slot_offsets[S_COUNT];

/* The reason a RecordList was rejected, with where; raised once, at the top (no Python calls inside
 * the parser). NULL while nothing is wrong. */
typedef struct {
    const uint8_t *start; /* the RecordList's first byte, to report positions */
    const char *error;
    Py_ssize_t error_at;
} Parser;

static int fail(Parser *ps, const uint8_t *at, const char *why) {
    if (ps->error == NULL) {
        ps->error = why;
        ps->error_at = at - ps->start;
    }
    return -1;
}

static PyObject *raise_corrupt(const char *message) {
    PyObject *err = PyObject_CallFunction(KanalError, "Os", CORRUPT_MESSAGE, message);
    if (err != NULL) {
        PyErr_SetObject(KanalError, err);
        Py_DECREF(err);
    }
    return NULL;
}

/* ---- wire primitives ---- */

/* A varint of at most 10 bytes; bits past the 64th are dropped (upb keeps the low 64 bits). */
static inline int read_varint(Parser *ps, const uint8_t **pp, const uint8_t *end, uint64_t *out) {
    const uint8_t *p = *pp;
    if (p < end && *p < 0x80) { /* one byte: nearly every tag, delta and short length */
        *out = *p;
        *pp = p + 1;
        return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < 10; i++) {
        if (p >= end) return fail(ps, *pp, "truncated varint");
        uint8_t b = *p++;
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (b < 0x80) {
            *out = v;
            *pp = p;
            return 0;
        }
    }
    return fail(ps, *pp, "varint longer than 10 bytes");
}

/* Tags and lengths are 32-bit varints for upb: at most 5 bytes and below 2^32. */
static inline int read_varint32(Parser *ps, const uint8_t **pp, const uint8_t *end, uint32_t *out,
                                const char *what) {
    const uint8_t *p = *pp;
    uint64_t v;
    if (read_varint(ps, pp, end, &v) < 0) return -1;
    if (*pp - p > 5 || v > UINT32_MAX) return fail(ps, p, what);
    *out = (uint32_t)v;
    return 0;
}

static inline int read_tag(Parser *ps, const uint8_t **pp, const uint8_t *end, uint32_t *tag) {
    const uint8_t *at = *pp;
    if (read_varint32(ps, pp, end, tag, "tag longer than 5 bytes or above 2^32 - 1") < 0) return -1;
    if ((*tag >> 3) == 0) return fail(ps, at, "field number 0");
    return 0;
}

/* A length-delimited field's payload: [*data, *data + *len) lies inside [*pp, end). */
static inline int read_bytes(Parser *ps, const uint8_t **pp, const uint8_t *end, const uint8_t **data,
                             Py_ssize_t *len) {
    const uint8_t *at = *pp;
    uint32_t n;
    if (read_varint32(ps, pp, end, &n, "length longer than 5 bytes or above 2^32 - 1") < 0) return -1;
    if (n > INT32_MAX || (Py_ssize_t)n > end - *pp) return fail(ps, at, "length past the end of its message");
    *data = *pp;
    *len = (Py_ssize_t)n;
    *pp += n;
    return 0;
}

/* Skips an unknown field whose tag was just read. `depth` is what is left of the nesting budget at the
 * level of the message holding the field; a group spends one. */
static int skip_field(Parser *ps, const uint8_t **pp, const uint8_t *end, uint32_t tag, int depth) {
    const uint8_t *at = *pp;
    uint64_t ignored;
    const uint8_t *data;
    Py_ssize_t len;
    switch (tag & 7) {
    case 0:
        return read_varint(ps, pp, end, &ignored);
    case 1:
        if (end - *pp < 8) return fail(ps, at, "truncated 64-bit field");
        *pp += 8;
        return 0;
    case 2:
        return read_bytes(ps, pp, end, &data, &len);
    case 5:
        if (end - *pp < 4) return fail(ps, at, "truncated 32-bit field");
        *pp += 4;
        return 0;
    case 3:
        if (--depth < 0) return fail(ps, at, "nested deeper than 100");
        for (;;) {
            uint32_t inner;
            if (*pp >= end) return fail(ps, at, "group without its end");
            if (read_tag(ps, pp, end, &inner) < 0) return -1;
            if ((inner & 7) == 4) {
                if ((inner >> 3) != (tag >> 3)) return fail(ps, *pp, "end-group tag does not match its group");
                return 0;
            }
            if (skip_field(ps, pp, end, inner, depth) < 0) return -1;
        }
    case 4:
        return fail(ps, at, "end-group tag outside a group");
    default:
        return fail(ps, at, "wire type 6 or 7");
    }
}

/* ---- RecordHeader ---- */

/* A new (str key, bytes-or-None value) tuple, or NULL: with ps->error set when the bytes are malformed,
 * else with a Python exception set (no memory). */
static PyObject *parse_header(Parser *ps, const uint8_t *p, const uint8_t *end, int depth) {
    PyObject *key = NULL;
    const uint8_t *value = NULL;
    Py_ssize_t value_len = -1;
    if (--depth < 0) {
        fail(ps, p, "nested deeper than 100");
        return NULL;
    }
    while (p < end) {
        const uint8_t *at = p;
        uint32_t tag;
        const uint8_t *data;
        Py_ssize_t len;
        if (read_tag(ps, &p, end, &tag) < 0) goto error;
        if (tag == 0x0a) {
            if (read_bytes(ps, &p, end, &data, &len) < 0) goto error;
            Py_XDECREF(key); /* the last occurrence wins, but each must be valid UTF-8 */
            key = PyUnicode_DecodeUTF8((const char *)data, len, NULL);
            if (key == NULL) {
                if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) goto error;
                PyErr_Clear();
                fail(ps, at, "header key is not valid UTF-8");
                goto error;
            }
        } else if (tag == 0x12) {
            if (read_bytes(ps, &p, end, &value, &value_len) < 0) goto error;
        } else if (skip_field(ps, &p, end, tag, depth) < 0) {
            goto error;
        }
    }
    if (key == NULL && (key = PyUnicode_FromStringAndSize("", 0)) == NULL) return NULL;
    PyObject *v;
    if (value_len < 0) {
        v = Py_NewRef(Py_None);
    } else if ((v = PyBytes_FromStringAndSize((const char *)value, value_len)) == NULL) {
        goto error;
    }
    PyObject *pair = PyTuple_New(2);
    if (pair == NULL) {
        Py_DECREF(v);
        goto error;
    }
    PyTuple_SET_ITEM(pair, 0, key);
    PyTuple_SET_ITEM(pair, 1, v);
    return pair;
error:
    Py_XDECREF(key);
    return NULL;
}

/* ---- Record ---- */

/* What the caller passes per batch. */
typedef struct {
    PyObject *topic, *partition, *leader_epoch;
    unsigned long long base_offset;
    long long first_timestamp_ms, min_offset;
    PyObject *out;
    Py_ssize_t payload_bytes; /* key + value bytes of the records appended, for the prefetch bound */
} Batch;

/* base + delta as a Python int; the sum of two 64-bit values may need 65 bits, which Python ints hold. */
static PyObject *offset_object(unsigned long long base, uint32_t delta) {
    unsigned long long sum;
    if (!__builtin_add_overflow(base, (unsigned long long)delta, &sum)) return PyLong_FromUnsignedLongLong(sum);
    PyObject *a = PyLong_FromUnsignedLongLong(base), *b = a ? PyLong_FromUnsignedLong(delta) : NULL;
    PyObject *r = b ? PyNumber_Add(a, b) : NULL;
    Py_XDECREF(a);
    Py_XDECREF(b);
    return r;
}

static PyObject *timestamp_object(long long first, long long delta) {
    long long sum;
    if (!__builtin_add_overflow(first, delta, &sum)) return PyLong_FromLongLong(sum);
    PyObject *a = PyLong_FromLongLong(first), *b = a ? PyLong_FromLongLong(delta) : NULL;
    PyObject *r = b ? PyNumber_Add(a, b) : NULL;
    Py_XDECREF(a);
    Py_XDECREF(b);
    return r;
}

#define SLOT(obj, i) (*(PyObject **)((char *)(obj) + slot_offsets[i]))

/* Parses one Record and appends its ConsumerRecord to b->out unless it lies below b->min_offset.
 * 0, or -1 with ps->error or a Python exception set. */
static int parse_record(Parser *ps, const uint8_t *p, const uint8_t *end, int depth, Batch *b) {
    uint32_t offset_delta = 0;
    uint64_t zigzag = 0;
    const uint8_t *key = NULL, *value = NULL;
    Py_ssize_t key_len = -1, value_len = -1;
    PyObject *headers = NULL;
    if (--depth < 0) return fail(ps, p, "nested deeper than 100");
    while (p < end) {
        uint32_t tag;
        const uint8_t *data;
        Py_ssize_t len;
        uint64_t v;
        if (read_tag(ps, &p, end, &tag) < 0) goto error;
        switch (tag) {
        case 0x08:
            if (read_varint(ps, &p, end, &v) < 0) goto error;
            offset_delta = (uint32_t)v;
            break;
        case 0x10:
            if (read_varint(ps, &p, end, &zigzag) < 0) goto error;
            break;
        case 0x1a:
            if (read_bytes(ps, &p, end, &key, &key_len) < 0) goto error;
            break;
        case 0x22:
            if (read_bytes(ps, &p, end, &value, &value_len) < 0) goto error;
            break;
        case 0x2a: {
            if (read_bytes(ps, &p, end, &data, &len) < 0) goto error;
            PyObject *header = parse_header(ps, data, data + len, depth);
            if (header == NULL) goto error;
            if (headers == NULL && (headers = PyList_New(0)) == NULL) {
                Py_DECREF(header);
                goto error;
            }
            int rc = PyList_Append(headers, header);
            Py_DECREF(header);
            if (rc < 0) goto error;
            break;
        }
        default:
            if (skip_field(ps, &p, end, tag, depth) < 0) goto error;
        }
    }
    /* Records below the fetch position come with the batch that holds it: parsed (so damage anywhere in
     * the batch is reported, as the Python path does) but not built. */
    unsigned long long offset;
    if (!__builtin_add_overflow(b->base_offset, (unsigned long long)offset_delta, &offset) &&
        offset <= (unsigned long long)LLONG_MAX && (long long)offset < b->min_offset) {
        Py_XDECREF(headers);
        return 0;
    }
    if (headers == NULL && (headers = PyList_New(0)) == NULL) return -1;
    PyObject *rec = record_type->tp_alloc(record_type, 0);
    if (rec == NULL) goto error;
    /* The slots start NULL; each is filled with a new reference, and the record's dealloc drops them
     * whatever happens below. */
    SLOT(rec, S_HEADERS) = headers;
    headers = NULL;
    SLOT(rec, S_TOPIC) = Py_NewRef(b->topic);
    SLOT(rec, S_PARTITION) = Py_NewRef(b->partition);
    SLOT(rec, S_EPOCH) = Py_NewRef(b->leader_epoch);
    long long ts_delta = (long long)((zigzag >> 1) ^ (~(zigzag & 1) + 1));
    if ((SLOT(rec, S_OFFSET) = offset_object(b->base_offset, offset_delta)) == NULL ||
        (SLOT(rec, S_TIMESTAMP) = timestamp_object(b->first_timestamp_ms, ts_delta)) == NULL)
        goto error_rec;
    if (key_len < 0) {
        SLOT(rec, S_KEY) = Py_NewRef(Py_None);
    } else if ((SLOT(rec, S_KEY) = PyBytes_FromStringAndSize((const char *)key, key_len)) == NULL) {
        goto error_rec;
    }
    if (value_len < 0) {
        SLOT(rec, S_VALUE) = Py_NewRef(Py_None);
    } else if ((SLOT(rec, S_VALUE) = PyBytes_FromStringAndSize((const char *)value, value_len)) == NULL) {
        goto error_rec;
    }
    /* Out of the cyclic GC, as CPython takes tuples of plain values out: a record holds only str, int,
     * bytes, None and its headers list of (str, bytes) tuples, so it is in no cycle unless a caller puts it
     * in one. Tracked, the records and lists a consumer buffers were walked by every collection: about a
     * third of a consuming process's CPU, 0.75 against 1.1 M records/s. Both are freed by their refcount
     * as before; only a cycle made through them would never be. */
    if (PyObject_IS_GC(rec)) PyObject_GC_UnTrack(rec);
    PyObject_GC_UnTrack(SLOT(rec, S_HEADERS));
    int rc = PyList_Append(b->out, rec);
    Py_DECREF(rec);
    if (rc < 0) return -1;
    b->payload_bytes += (key_len > 0 ? key_len : 0) + (value_len > 0 ? value_len : 0);
    return 0;
error_rec:
    Py_DECREF(rec);
    return -1;
error:
    Py_XDECREF(headers);
    return -1;
}

/* ---- RecordList ---- */

static int parse_record_list(Parser *ps, const uint8_t *p, const uint8_t *end, Batch *b) {
    while (p < end) {
        uint32_t tag;
        if (read_tag(ps, &p, end, &tag) < 0) return -1;
        if (tag == 0x0a) {
            const uint8_t *data;
            Py_ssize_t len;
            if (read_bytes(ps, &p, end, &data, &len) < 0) return -1;
            if (parse_record(ps, data, data + len, DEPTH_MAX, b) < 0) return -1;
        } else if (skip_field(ps, &p, end, tag, DEPTH_MAX) < 0) {
            return -1;
        }
    }
    return 0;
}

static PyObject *py_decode_into(PyObject *mod, PyObject *args) {
    Batch b = {0};
    Py_buffer data;
    PyObject *base;
    if (record_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "bind_record_class() was not called");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "O!y*UOOOLL:decode_into", &PyList_Type, &b.out, &data, &b.topic, &b.partition,
                          &b.leader_epoch, &base, &b.first_timestamp_ms, &b.min_offset))
        return NULL;
    b.base_offset = PyLong_AsUnsignedLongLong(base); /* fixed64 on the wire: 0 .. 2^64 - 1 */
    if (b.base_offset == (unsigned long long)-1 && PyErr_Occurred()) {
        PyBuffer_Release(&data);
        return NULL;
    }
    Py_ssize_t before = PyList_GET_SIZE(b.out);
    Parser ps = {.start = data.buf};
    int rc = parse_record_list(&ps, data.buf, (const uint8_t *)data.buf + data.len, &b);
    PyBuffer_Release(&data);
    if (rc == 0) return PyLong_FromSsize_t(b.payload_bytes);
    /* Nothing of a damaged batch is delivered: the list goes back to what it held. */
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (PyList_SetSlice(b.out, before, PyList_GET_SIZE(b.out), NULL) < 0) {
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        return NULL;
    }
    PyErr_Restore(type, value, tb);
    if (ps.error == NULL) return NULL; /* a Python error (no memory): passed on as it is */
    char message[160];
    PyOS_snprintf(message, sizeof message, "records do not parse: %s at byte %zd of %zd", ps.error, ps.error_at,
                  data.len);
    return raise_corrupt(message);
}

static PyObject *py_bind_record_class(PyObject *mod, PyObject *cls) {
    Py_ssize_t offsets[S_COUNT];
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "bind_record_class() takes the ConsumerRecord class");
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)cls;
    /* Instances are made by tp_alloc alone, so nothing else may be needed to build one: a plain Python
     * class (no C base with its own layout or constructor, no __new__). */
    if (!(type->tp_flags & Py_TPFLAGS_HEAPTYPE) || type->tp_itemsize != 0 || type->tp_alloc != PyType_GenericAlloc ||
        type->tp_new != PyBaseObject_Type.tp_new) {
        return PyErr_Format(PyExc_TypeError, "%s must be a plain Python __slots__ class without __new__",
                            type->tp_name);
    }
    /* Every field must be a writable object slot of the class itself, so the decoder may store into it
     * directly; anything else (a property, a __dict__ attribute) and the Python path must be used. */
    for (int i = 0; i < S_COUNT; i++) {
        PyObject *descr = PyDict_GetItemString(((PyTypeObject *)cls)->tp_dict, slot_names[i]);
        if (descr == NULL || !Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
            return PyErr_Format(PyExc_TypeError, "%s.%s is not a __slots__ member", ((PyTypeObject *)cls)->tp_name,
                                slot_names[i]);
        }
        PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
        if (!PyType_IsSubtype(type, PyDescr_TYPE(descr)) || member->type != T_OBJECT_EX ||
            (member->flags & READONLY) || member->offset <= 0 ||
            member->offset + (Py_ssize_t)sizeof(PyObject *) > type->tp_basicsize ||
            member->offset == type->tp_weaklistoffset || member->offset == type->tp_dictoffset) {
            return PyErr_Format(PyExc_TypeError, "%s.%s is not a writable object slot",
                                ((PyTypeObject *)cls)->tp_name, slot_names[i]);
        }
        offsets[i] = member->offset;
    }
    /* Bound once per process: decode_into reads the class and its offsets for every record, and a decode
     * can run Python code midway (a GC pass, a finalizer), which must not be able to swap them. */
    if (record_type != NULL) {
        if (record_type == type) Py_RETURN_NONE;
        return PyErr_Format(PyExc_TypeError, "the record class is already bound to %s", record_type->tp_name);
    }
    memcpy(slot_offsets, offsets, sizeof offsets);
    Py_XSETREF(record_type, (PyTypeObject *)Py_NewRef(cls));
    Py_RETURN_NONE;
}

/* ---- module ---- */

static PyMethodDef module_methods[] = {
    {"decode_into", py_decode_into, METH_VARARGS,
     "decode_into(out, record_list, topic, partition, leader_epoch, base_offset, first_timestamp_ms, "
     "min_offset) -> int: append a ConsumerRecord to `out` for each record of the serialized RecordList "
     "whose offset is at least min_offset; returns their key + value bytes. KanalError(CORRUPT_MESSAGE) "
     "when the bytes are not a RecordList, with `out` unchanged."},
    {"bind_record_class", py_bind_record_class, METH_O,
     "bind_record_class(cls): the __slots__ class decode_into builds (fields topic, partition, offset, "
     "timestamp_ms, key, value, headers, leader_epoch); TypeError when its fields are not plain slots."},
    {NULL}};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "kanal.clients._consumer_fast",
    "The consumer's per-record decoding in C (see clients/_consumer_fast.c).", -1, module_methods,
};

PyMODINIT_FUNC PyInit__consumer_fast(void) {
    if (import_kanal_error("CORRUPT_MESSAGE", &KanalError, &CORRUPT_MESSAGE) < 0) return NULL;
    return PyModule_Create(&module_def);
}
