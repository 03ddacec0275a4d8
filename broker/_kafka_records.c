/* kanal.broker._kafka_records: Kafka's records <-> kanal's RecordList, in C (the Kafka listener's hot path).
 *
 * Optional: kanal.broker.kafka.record_batch imports it when it is built (setup.py) and walks in Python
 * otherwise; the Python walks there are the reference, and tests/broker/test_kafka_record_batch.py holds
 * both to the same bytes and the same errors.
 *
 * kafka_to_record_list(records, count) -> bytes
 *   `count` Kafka records (magic 2, uncompressed; record_batch.py gives the layout) as kanal's serialized
 *   RecordList in its canonical encoding (records.proto, ENCODING). CORRUPT_MESSAGE when a record's
 *   varints or lengths do not hold together or bytes are left over; INVALID_RECORD for a negative offset
 *   delta. The leader then validates the result as it validates every batch.
 *
 * record_list_to_kafka(record_list) -> (bytes, count)
 *   A stored RecordList (only the fields records.proto defines, as the leader stores them) as Kafka
 *   records with attributes 0. CORRUPT_MESSAGE for anything else.
 *
 * Neither touches Python objects during the walk: the GIL is released for it, and output goes to a buffer
 * from PyMem_RawMalloc that grows by doubling.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

static PyObject *KanalError;
static PyObject *CORRUPT_MESSAGE;
static PyObject *INVALID_RECORD;

typedef struct {
    uint8_t *data;
    size_t len, cap;
    int oom;
} Out;

static int out_reserve(Out *o, size_t more) {
    if (more <= o->cap - o->len) return 0;
    if (more > SIZE_MAX / 4 - o->len) { /* no doubling below could reach it without overflowing */
        o->oom = 1;
        return -1;
    }
    size_t cap = o->cap ? o->cap : 256;
    while (cap < o->len + more) cap *= 2;
    uint8_t *grown = PyMem_RawRealloc(o->data, cap);
    if (grown == NULL) {
        o->oom = 1;
        return -1;
    }
    o->data = grown;
    o->cap = cap;
    return 0;
}

static inline int out_bytes(Out *o, const uint8_t *p, size_t n) {
    if (out_reserve(o, n) < 0) return -1;
    if (n) memcpy(o->data + o->len, p, n);
    o->len += n;
    return 0;
}

static inline int out_byte(Out *o, uint8_t b) { return out_bytes(o, &b, 1); }

static inline size_t varint_size(uint64_t v) {
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static inline int out_varint(Out *o, uint64_t v) {
    uint8_t tmp[10];
    size_t n = 0;
    while (v >= 0x80) {
        tmp[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    tmp[n++] = (uint8_t)v;
    return out_bytes(o, tmp, n);
}

static inline uint64_t zigzag(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }

/* Why a walk failed: a static reason and its error code (0 CORRUPT_MESSAGE, 1 INVALID_RECORD). */
typedef struct {
    const char *why;
    int invalid_record;
} Err;

static int fail(Err *e, const char *why) {
    e->why = why;
    return -1;
}

static inline int read_varint(Err *e, const uint8_t **pp, const uint8_t *end, uint64_t *out, const char *why) {
    const uint8_t *p = *pp;
    uint64_t v = 0;
    for (int i = 0; i < 10; i++) {
        if (p >= end) return fail(e, why);
        uint8_t b = *p++;
        if (i == 9 && b > 1) return fail(e, why); /* above 2^64 - 1 */
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (b < 0x80) {
            *out = v;
            *pp = p;
            return 0;
        }
    }
    return fail(e, why);
}

#define KAFKA_VARINT "record has a truncated or overlong varint"

static inline int read_zigzag(Err *e, const uint8_t **pp, const uint8_t *end, int64_t *out) {
    uint64_t v;
    if (read_varint(e, pp, end, &v, KAFKA_VARINT) < 0) return -1;
    *out = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
    return 0;
}

/* A Kafka length-prefixed field: -1 is null (when allowed), other negatives are refused. */
static inline int read_sized(Err *e, const uint8_t **pp, const uint8_t *end, const uint8_t **field,
                             int64_t *len, int nullable) {
    if (read_zigzag(e, pp, end, len) < 0) return -1;
    if (*len < 0) {
        if (*len != -1 || !nullable) return fail(e, "record has a field of negative length");
        *field = NULL;
        return 0;
    }
    if (*len > end - *pp) return fail(e, "record field runs past the record");
    *field = *pp;
    *pp += *len;
    return 0;
}

static int kafka_walk(const uint8_t *p, const uint8_t *end, long long count, Out *o, Err *e) {
    for (long long i = 0; i < count; i++) {
        int64_t length;
        if (read_zigzag(e, &p, end, &length) < 0) return -1;
        if (length < 0 || length > end - p) return fail(e, "record length runs past the batch");
        const uint8_t *stop = p + length;
        p++; /* record attributes: unused in magic 2 */
        int64_t ts_delta, offset_delta, key_len, value_len, header_count;
        const uint8_t *key, *value;
        if (read_zigzag(e, &p, stop, &ts_delta) < 0 || read_zigzag(e, &p, stop, &offset_delta) < 0 ||
            read_sized(e, &p, stop, &key, &key_len, 1) < 0 ||
            read_sized(e, &p, stop, &value, &value_len, 1) < 0 ||
            read_zigzag(e, &p, stop, &header_count) < 0)
            return -1;
        if (header_count < 0) return fail(e, "record has a negative number of headers");
        if (offset_delta < 0) {
            e->invalid_record = 1;
            return fail(e, "record has a negative offset delta");
        }
        /* The Record's size first (its length prefix comes before it): walk the headers once to size
         * them, then again to write them. */
        size_t size = 0;
        if (offset_delta) size += 1 + varint_size((uint64_t)offset_delta);
        if (ts_delta) size += 1 + varint_size(zigzag(ts_delta));
        if (key) size += 1 + varint_size((uint64_t)key_len) + (size_t)key_len;
        if (value) size += 1 + varint_size((uint64_t)value_len) + (size_t)value_len;
        const uint8_t *headers = p;
        for (int64_t h = 0; h < header_count; h++) {
            const uint8_t *hkey = NULL, *hvalue = NULL;
            int64_t hkey_len = 0, hvalue_len = 0;
            if (read_sized(e, &p, stop, &hkey, &hkey_len, 0) < 0 ||
                read_sized(e, &p, stop, &hvalue, &hvalue_len, 1) < 0)
                return -1;
            size_t hsize = (hkey_len ? 1 + varint_size((uint64_t)hkey_len) + (size_t)hkey_len : 0) +
                           (hvalue ? 1 + varint_size((uint64_t)hvalue_len) + (size_t)hvalue_len : 0);
            size += 1 + varint_size(hsize) + hsize;
        }
        if (p != stop) return fail(e, "record length does not match its fields");
        if (out_byte(o, 0x0a) < 0 || out_varint(o, size) < 0) return -1;
        if (offset_delta && (out_byte(o, 0x08) < 0 || out_varint(o, (uint64_t)offset_delta) < 0)) return -1;
        if (ts_delta && (out_byte(o, 0x10) < 0 || out_varint(o, zigzag(ts_delta)) < 0)) return -1;
        if (key && (out_byte(o, 0x1a) < 0 || out_varint(o, (uint64_t)key_len) < 0 ||
                    out_bytes(o, key, (size_t)key_len) < 0))
            return -1;
        if (value && (out_byte(o, 0x22) < 0 || out_varint(o, (uint64_t)value_len) < 0 ||
                      out_bytes(o, value, (size_t)value_len) < 0))
            return -1;
        const uint8_t *q = headers;
        for (int64_t h = 0; h < header_count; h++) {
            const uint8_t *hkey = NULL, *hvalue = NULL;
            int64_t hkey_len = 0, hvalue_len = 0;
            read_sized(e, &q, stop, &hkey, &hkey_len, 0); /* checked in the sizing walk */
            read_sized(e, &q, stop, &hvalue, &hvalue_len, 1);
            size_t hsize = (hkey_len ? 1 + varint_size((uint64_t)hkey_len) + (size_t)hkey_len : 0) +
                           (hvalue ? 1 + varint_size((uint64_t)hvalue_len) + (size_t)hvalue_len : 0);
            if (out_byte(o, 0x2a) < 0 || out_varint(o, hsize) < 0) return -1;
            if (hkey_len && (out_byte(o, 0x0a) < 0 || out_varint(o, (uint64_t)hkey_len) < 0 ||
                             out_bytes(o, hkey, (size_t)hkey_len) < 0))
                return -1;
            if (hvalue && (out_byte(o, 0x12) < 0 || out_varint(o, (uint64_t)hvalue_len) < 0 ||
                           out_bytes(o, hvalue, (size_t)hvalue_len) < 0))
                return -1;
        }
    }
    if (p != end) return fail(e, "batch holds more bytes than its records");
    return 0;
}

#define KANAL_FORM "record list is not in the form records.proto gives"

/* A protobuf length-delimited field's bounds; the tag was read. */
static inline int read_delimited(Err *e, const uint8_t **pp, const uint8_t *end, const uint8_t **field,
                                 size_t *len) {
    uint64_t n;
    if (read_varint(e, pp, end, &n, KANAL_FORM) < 0) return -1;
    if (n > (uint64_t)(end - *pp)) return fail(e, KANAL_FORM);
    *field = *pp;
    *len = (size_t)n;
    *pp += n;
    return 0;
}

typedef struct {
    const uint8_t *key, *value;
    size_t key_len, value_len;
} Header;

/* One RecordHeader's key and value (last occurrence wins; value NULL when absent). */
static int parse_header(Err *e, const uint8_t *p, const uint8_t *end, Header *h) {
    h->key = h->value = NULL;
    h->key_len = h->value_len = 0;
    while (p < end) {
        uint64_t tag;
        if (read_varint(e, &p, end, &tag, KANAL_FORM) < 0) return -1;
        if (tag == 0x0a) {
            if (read_delimited(e, &p, end, &h->key, &h->key_len) < 0) return -1;
        } else if (tag == 0x12) {
            if (read_delimited(e, &p, end, &h->value, &h->value_len) < 0) return -1;
        } else {
            return fail(e, KANAL_FORM);
        }
    }
    return 0;
}

static inline size_t sized_size(const uint8_t *field, size_t len) {
    return field ? varint_size(zigzag((int64_t)len)) + len : 1; /* -1 (null) is one byte */
}

static inline int out_sized(Out *o, const uint8_t *field, size_t len) {
    if (field == NULL) return out_varint(o, zigzag(-1));
    return out_varint(o, zigzag((int64_t)len)) < 0 ? -1 : out_bytes(o, field, len);
}

static int kanal_walk(const uint8_t *p, const uint8_t *end, Out *o, Err *e, long long *count) {
    while (p < end) {
        uint64_t tag;
        const uint8_t *record;
        size_t record_len;
        if (read_varint(e, &p, end, &tag, KANAL_FORM) < 0) return -1;
        if (tag != 0x0a || read_delimited(e, &p, end, &record, &record_len) < 0) return fail(e, KANAL_FORM);
        const uint8_t *r = record, *rend = record + record_len;
        uint64_t offset_delta = 0, ts_zigzag = 0;
        const uint8_t *key = NULL, *value = NULL, *field = NULL;
        size_t key_len = 0, value_len = 0, len = 0, headers_size = 0;
        int64_t header_count = 0;
        while (r < rend) { /* sizing walk: scalars and key / value, last occurrence wins */
            if (read_varint(e, &r, rend, &tag, KANAL_FORM) < 0) return -1;
            if (tag == 0x08) {
                if (read_varint(e, &r, rend, &offset_delta, KANAL_FORM) < 0) return -1;
            } else if (tag == 0x10) {
                if (read_varint(e, &r, rend, &ts_zigzag, KANAL_FORM) < 0) return -1;
            } else if (tag == 0x1a) {
                if (read_delimited(e, &r, rend, &key, &key_len) < 0) return -1;
            } else if (tag == 0x22) {
                if (read_delimited(e, &r, rend, &value, &value_len) < 0) return -1;
            } else if (tag == 0x2a) {
                Header h;
                if (read_delimited(e, &r, rend, &field, &len) < 0 || parse_header(e, field, field + len, &h) < 0)
                    return -1;
                headers_size += sized_size(h.key ? h.key : (const uint8_t *)"", h.key_len) +
                                sized_size(h.value, h.value_len);
                header_count++;
            } else {
                return fail(e, KANAL_FORM);
            }
        }
        if (offset_delta > INT32_MAX) return fail(e, "record offset delta is above 2^31 - 1");
        int64_t ts_delta = (int64_t)(ts_zigzag >> 1) ^ -(int64_t)(ts_zigzag & 1);
        size_t body = 1 + varint_size(zigzag(ts_delta)) + varint_size(zigzag((int64_t)offset_delta)) +
                      sized_size(key, key_len) + sized_size(value, value_len) +
                      varint_size(zigzag(header_count)) + headers_size;
        if (out_varint(o, zigzag((int64_t)body)) < 0 || out_byte(o, 0) < 0 ||
            out_varint(o, zigzag(ts_delta)) < 0 || out_varint(o, zigzag((int64_t)offset_delta)) < 0 ||
            out_sized(o, key, key_len) < 0 || out_sized(o, value, value_len) < 0 ||
            out_varint(o, zigzag(header_count)) < 0)
            return -1;
        for (r = record; r < rend;) { /* writing walk: the headers in order */
            read_varint(e, &r, rend, &tag, KANAL_FORM);
            if (tag == 0x08 || tag == 0x10) {
                uint64_t skip;
                read_varint(e, &r, rend, &skip, KANAL_FORM);
                continue;
            }
            read_delimited(e, &r, rend, &field, &len);
            if (tag == 0x2a) {
                Header h;
                parse_header(e, field, field + len, &h);
                if (out_sized(o, h.key ? h.key : (const uint8_t *)"", h.key_len) < 0 ||
                    out_sized(o, h.value, h.value_len) < 0)
                    return -1;
            }
        }
        (*count)++;
    }
    return 0;
}

static PyObject *raise_walk_error(Out *o, Err *e) {
    PyMem_RawFree(o->data);
    if (o->oom) return PyErr_NoMemory();
    PyObject *code = e->invalid_record ? INVALID_RECORD : CORRUPT_MESSAGE;
    PyObject *exc = PyObject_CallFunction(KanalError, "Os", code, e->why);
    if (exc != NULL) {
        PyErr_SetObject(KanalError, exc);
        Py_DECREF(exc);
    }
    return NULL;
}

static PyObject *py_kafka_to_record_list(PyObject *self, PyObject *args) {
    Py_buffer buf;
    long long count;
    if (!PyArg_ParseTuple(args, "y*L", &buf, &count)) return NULL;
    Out o = {0};
    Err e = {0};
    const uint8_t *p = buf.buf;
    int rc;
    /* A first guess of the output size; a Kafka record takes at least 7 bytes, so no more records than
     * that can be in the input whatever `count` claims (the walk refuses the rest). */
    long long possible = buf.len / 7 + 1;
    size_t guess = (size_t)(count < 0 ? 0 : count < possible ? count : possible);
    Py_BEGIN_ALLOW_THREADS rc = out_reserve(&o, (size_t)buf.len + 16 * guess + 16);
    if (rc == 0) rc = kafka_walk(p, p + buf.len, count, &o, &e);
    Py_END_ALLOW_THREADS PyBuffer_Release(&buf);
    if (rc < 0) return raise_walk_error(&o, &e);
    PyObject *result = PyBytes_FromStringAndSize((const char *)o.data, (Py_ssize_t)o.len);
    PyMem_RawFree(o.data);
    return result;
}

static PyObject *py_record_list_to_kafka(PyObject *self, PyObject *args) {
    Py_buffer buf;
    if (!PyArg_ParseTuple(args, "y*", &buf)) return NULL;
    Out o = {0};
    Err e = {0};
    long long count = 0;
    const uint8_t *p = buf.buf;
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = out_reserve(&o, (size_t)buf.len + 64);
    if (rc == 0) rc = kanal_walk(p, p + buf.len, &o, &e, &count);
    Py_END_ALLOW_THREADS PyBuffer_Release(&buf);
    if (rc < 0) return raise_walk_error(&o, &e);
    PyObject *bytes = PyBytes_FromStringAndSize((const char *)o.data, (Py_ssize_t)o.len);
    PyMem_RawFree(o.data);
    if (bytes == NULL) return NULL;
    return Py_BuildValue("(NL)", bytes, count);
}

static PyMethodDef module_methods[] = {
    {"kafka_to_record_list", py_kafka_to_record_list, METH_VARARGS,
     "kafka_to_record_list(records, count) -> bytes: Kafka records as kanal's serialized RecordList."},
    {"record_list_to_kafka", py_record_list_to_kafka, METH_VARARGS,
     "record_list_to_kafka(record_list) -> (bytes, count): a stored RecordList as Kafka records."},
    {NULL}};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "kanal.broker._kafka_records",
    "Kafka records <-> kanal RecordList in C (see broker/_kafka_records.c).", -1, module_methods,
};

PyMODINIT_FUNC PyInit__kafka_records(void) {
    PyObject *errors = PyImport_ImportModule("kanal.v1.error");
    if (errors == NULL) return NULL;
    KanalError = PyObject_GetAttrString(errors, "KanalError");
    PyObject *codes = KanalError ? PyObject_GetAttrString(errors, "ErrorCode") : NULL;
    Py_DECREF(errors);
    if (codes == NULL) return NULL;
    CORRUPT_MESSAGE = PyObject_GetAttrString(codes, "CORRUPT_MESSAGE");
    INVALID_RECORD = PyObject_GetAttrString(codes, "INVALID_RECORD");
    Py_DECREF(codes);
    if (CORRUPT_MESSAGE == NULL || INVALID_RECORD == NULL) return NULL;
    return PyModule_Create(&module_def);
}
