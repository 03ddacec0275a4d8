/* kanal.clients._producer_fast, its per-batch half: the objects one batch of the producer is made of, and
 * the encoding of a record into it. The Appender that fills them is in _producer_fast.c (whose comment
 * gives the RecordList format, byte for byte); _producer_records.h says what the two files share. */
#include "_producer_records.h"

#include <structmember.h>

#include "_kanal_errors.h"

#include <string.h>

static PyObject *KanalError;            /* kanal.v1.error.KanalError */
static PyObject *UNKNOWN_SERVER_ERROR;  /* ErrorCode.UNKNOWN_SERVER_ERROR */
static PyObject *str_done, *str_is_set, *str_result_of;

/* ---- murmur3_x86_32 (Austin Appleby's MurmurHash3, public domain) ---- */

static inline uint32_t rotl32(uint32_t x, int r) { return (x << r) | (x >> (32 - r)); }

uint32_t murmur3_32(const unsigned char *data, Py_ssize_t len, uint32_t seed) {
    const uint32_t c1 = 0xcc9e2d51, c2 = 0x1b873593;
    uint32_t h = seed, k;
    Py_ssize_t nblocks = len / 4, i;
    for (i = 0; i < nblocks; i++) {
        const unsigned char *p = data + 4 * i;  /* little-endian blocks on every machine, as mmh3 reads */
        k = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        k *= c1; k = rotl32(k, 15); k *= c2;
        h ^= k; h = rotl32(h, 13); h = h * 5 + 0xe6546b64;
    }
    const unsigned char *tail = data + 4 * nblocks;
    k = 0;
    switch (len & 3) {
    case 3: k ^= (uint32_t)tail[2] << 16; /* fall through */
    case 2: k ^= (uint32_t)tail[1] << 8;  /* fall through */
    case 1: k ^= tail[0]; k *= c1; k = rotl32(k, 15); k *= c2; h ^= k;
    }
    h ^= (uint32_t)len;
    h ^= h >> 16; h *= 0x85ebca6b; h ^= h >> 13; h *= 0xc2b2ae35; h ^= h >> 16;
    return h;
}

/* ---- varints ---- */

static inline char *put_varint(char *p, uint64_t n) {
    while (n >= 0x80) { *p++ = (char)((n & 0x7f) | 0x80); n >>= 7; }
    *p++ = (char)n;
    return p;
}

/* Timestamp deltas are zigzagged as the Python encoder does, (d << 1) ^ (d >> 63) on unbounded ints:
 * two int64 timestamps differ by up to 2^64, so the arithmetic is 128-bit (the result is never negative). */
static inline char *put_varint128(char *p, unsigned __int128 n) {
    while (n >= 0x80) { *p++ = (char)((n & 0x7f) | 0x80); n >>= 7; }
    *p++ = (char)n;
    return p;
}

static inline int varint_len(uint64_t n) {
    int len = 1;
    while (n >= 0x80) { n >>= 7; len++; }
    return len;
}

/* ---- RecordList ---- */



static void RecordList_dealloc(RecordList *self) {
    Py_XDECREF(self->bytes);
    PyMem_Free(self->timestamps);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

PyObject *kanal_error(const char *message) {
    PyObject *err = PyObject_CallFunction(KanalError, "Os", UNKNOWN_SERVER_ERROR, message);
    if (err != NULL) {
        PyErr_SetObject(KanalError, err);
        Py_DECREF(err);
    }
    return NULL;
}

/* Makes room for cap bytes. The records are written straight into a bytes object (resized as it grows),
 * so take() hands that object out without copying the batch. */
static int records_grow(RecordList *self, Py_ssize_t cap) {
    PyObject *bigger = PyBytes_FromStringAndSize(NULL, cap);  /* not _PyBytes_Resize: on failure that */
    if (bigger == NULL) return -1;                            /* frees the records written so far */
    if (self->len) memcpy(PyBytes_AS_STRING(bigger), self->buf, self->len);
    Py_XSETREF(self->bytes, bigger);
    self->buf = PyBytes_AS_STRING(bigger);
    self->cap = cap;
    return 0;
}

/* Appends one record; returns its index (offset delta), or -1 with an exception set and nothing
 * changed. vlen / klen are -1 for None. */
Py_ssize_t records_append(RecordList *self, const char *value, Py_ssize_t vlen, const char *key,
                          Py_ssize_t klen, long long ts, const char *tail, Py_ssize_t tlen) {
    if (self->taken) {
        kanal_error("the batch's records were already encoded; it takes no more records");
        return -1;
    }
    Py_ssize_t index = self->count;
    char head[48], *h = head;
    if (index) {
        *h++ = 0x08;
        h = put_varint(h, (uint64_t)index);
        __int128 delta = (__int128)ts - (__int128)self->first_ts;
        if (delta) {
            *h++ = 0x10;
            /* zigzag, shifted unsigned: a left shift of a negative signed value is undefined in C */
            h = put_varint128(h, ((unsigned __int128)delta << 1) ^ (unsigned __int128)(delta >> 63));
        }
    }
    Py_ssize_t hlen = h - head;
    Py_ssize_t body = hlen + tlen;
    if (klen >= 0) body += 1 + varint_len((uint64_t)klen) + klen;
    if (vlen >= 0) body += 1 + varint_len((uint64_t)vlen) + vlen;
    Py_ssize_t need = 1 + varint_len((uint64_t)body) + body;
    /* Grow both arrays before writing anything, so a failure leaves the list as it was. */
    if (self->len + need > self->cap) {
        Py_ssize_t cap = self->cap ? self->cap * 2 : 256;
        while (cap < self->len + need) cap *= 2;
        if (records_grow(self, cap) < 0) return -1;
    }
    if (index == self->ts_cap) {
        Py_ssize_t cap = self->ts_cap ? self->ts_cap * 2 : 16;
        int64_t *t = PyMem_Realloc(self->timestamps, cap * sizeof(int64_t));
        if (t == NULL) { PyErr_NoMemory(); return -1; }
        self->timestamps = t;
        self->ts_cap = cap;
    }
    char *p = self->buf + self->len;
    *p++ = 0x0a;
    p = put_varint(p, (uint64_t)body);
    memcpy(p, head, hlen); p += hlen;
    if (klen >= 0) { *p++ = 0x1a; p = put_varint(p, (uint64_t)klen); memcpy(p, key, klen); p += klen; }
    if (vlen >= 0) { *p++ = 0x22; p = put_varint(p, (uint64_t)vlen); memcpy(p, value, vlen); p += vlen; }
    if (tlen) { memcpy(p, tail, tlen); p += tlen; }
    self->len = p - self->buf;
    if (index == 0) {
        self->first_ts = self->max_ts = ts;
    } else if (ts > self->max_ts) {
        self->max_ts = ts;
    }
    self->timestamps[index] = ts;
    self->count = index + 1;
    return index;
}


static int bytes_or_none(PyObject *obj, const char *what, const char **data, Py_ssize_t *len) {
    if (obj == Py_None) { *data = NULL; *len = -1; return 0; }
    if (!PyBytes_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be bytes or None, not %.100s", what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    *data = PyBytes_AS_STRING(obj);
    *len = PyBytes_GET_SIZE(obj);
    return 0;
}

static PyObject *RecordList_append(RecordList *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "append(value, key, timestamp_ms, tail) takes 4 arguments");
        return NULL;
    }
    const char *value, *key;
    Py_ssize_t vlen, klen;
    if (bytes_or_none(args[0], "value", &value, &vlen) < 0) return NULL;
    if (bytes_or_none(args[1], "key", &key, &klen) < 0) return NULL;
    long long ts = PyLong_AsLongLong(args[2]);
    if (ts == -1 && PyErr_Occurred()) return NULL;
    if (!PyBytes_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "tail must be bytes (the encoded headers)");
        return NULL;
    }
    Py_ssize_t index = records_append(self, value, vlen, key, klen, ts, PyBytes_AS_STRING(args[3]),
                                      PyBytes_GET_SIZE(args[3]));
    return index < 0 ? NULL : PyLong_FromSsize_t(index);
}

static PyObject *RecordList_take(RecordList *self, PyObject *unused) {
    if (self->taken) return kanal_error("the batch's records were already taken");
    PyObject *data = self->bytes;
    if (data == NULL) {
        data = PyBytes_FromStringAndSize(NULL, 0);
        if (data == NULL) return NULL;
    } else if (_PyBytes_Resize(&data, self->len) < 0) {  /* a shrink, in place; failing, it frees the data */
        self->bytes = NULL;
        self->buf = NULL;
        self->len = self->cap = 0;
        return NULL;
    }
    self->bytes = NULL;  /* handed out: the list takes no more records */
    self->buf = NULL;
    self->len = self->cap = 0;
    self->taken = 1;
    return data;
}

static PyObject *RecordList_timestamp(RecordList *self, PyObject *arg) {
    Py_ssize_t i = PyLong_AsSsize_t(arg);
    if (i == -1 && PyErr_Occurred()) return NULL;
    if (i < 0 || i >= self->count) {
        PyErr_SetString(PyExc_IndexError, "record index out of range");
        return NULL;
    }
    return PyLong_FromLongLong(self->timestamps[i]);
}

static PyObject *RecordList_get_timestamps(RecordList *self, void *closure) {
    PyObject *list = PyList_New(self->count);
    if (list == NULL) return NULL;
    for (Py_ssize_t i = 0; i < self->count; i++) {
        PyObject *ts = PyLong_FromLongLong(self->timestamps[i]);
        if (ts == NULL) { Py_DECREF(list); return NULL; }
        PyList_SET_ITEM(list, i, ts);
    }
    return list;
}

static PyObject *RecordList_get_taken(RecordList *self, void *closure) { return PyBool_FromLong(self->taken); }

static PyObject *RecordList_repr(RecordList *self) {
    return PyUnicode_FromFormat("<RecordList native records=%zd bytes=%zd>", self->count, self->len);
}

static PyMethodDef RecordList_methods[] = {
    {"append", (PyCFunction)(void (*)(void))RecordList_append, METH_FASTCALL,
     "append(value, key, timestamp_ms, tail) -> index: encode one record at the end (tail: its encoded "
     "headers, b'' for none)."},
    {"take", (PyCFunction)RecordList_take, METH_NOARGS,
     "The serialized RecordList; the list takes no more records after."},
    {"timestamp", (PyCFunction)RecordList_timestamp, METH_O, "The timestamp of record i."},
    {NULL}};

static PyMemberDef RecordList_members[] = {
    {"record_count", T_PYSSIZET, offsetof(RecordList, count), READONLY, NULL},
    {"first_timestamp_ms", T_LONGLONG, offsetof(RecordList, first_ts), READONLY, NULL},
    {"max_timestamp_ms", T_LONGLONG, offsetof(RecordList, max_ts), READONLY, NULL},
    {"size_bytes", T_LONGLONG, offsetof(RecordList, size_bytes), 0,
     "bytes charged against buffer_memory_bytes"},
    {NULL}};

static PyGetSetDef RecordList_getset[] = {
    {"timestamps", (getter)RecordList_get_timestamps, NULL, "per record, absolute (a new list)", NULL},
    {"taken", (getter)RecordList_get_taken, NULL, "whether take() was called", NULL},
    {NULL}};

PyTypeObject RecordListType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kanal.clients._producer_fast.RecordList",
    .tp_doc = "One batch's records, encoded as they arrive (same bytes as producer_batch.RecordList).",
    .tp_basicsize = sizeof(RecordList),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)RecordList_dealloc,
    .tp_repr = (reprfunc)RecordList_repr,
    .tp_methods = RecordList_methods,
    .tp_members = RecordList_members,
    .tp_getset = RecordList_getset,
};

/* ---- BufferMemory ---- */



static PyMemberDef BufferMemory_members[] = {
    {"buffered_bytes", T_LONGLONG, offsetof(BufferMemory, buffered_bytes), 0,
     "bytes of records buffered and not yet completed"},
    {NULL}};

PyTypeObject BufferMemoryType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kanal.clients._producer_fast.BufferMemory",
    .tp_doc = "The accumulator's buffered bytes (changed only under its lock).",
    .tp_basicsize = sizeof(BufferMemory),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_members = BufferMemory_members,
};

/* ---- RecordFuture ---- */

typedef struct {
    PyObject_HEAD
    PyObject *batch;
    Py_ssize_t index;
} RecordFuture;


PyObject *future_new(PyObject *batch, Py_ssize_t index) {  /* takes a new reference to batch */
    RecordFuture *f = PyObject_GC_New(RecordFuture, &RecordFutureType);
    if (f == NULL) return NULL;
    f->batch = Py_NewRef(batch);
    f->index = index;
    PyObject_GC_Track(f);
    return (PyObject *)f;
}

static PyObject *RecordFuture_tp_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *batch;
    Py_ssize_t index;
    static char *names[] = {"batch", "index", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "On:RecordFuture", names, &batch, &index)) return NULL;
    return future_new(batch, index);
}

static int RecordFuture_traverse(RecordFuture *self, visitproc visit, void *arg) {
    Py_VISIT(self->batch);
    return 0;
}

static int RecordFuture_clear(RecordFuture *self) {
    Py_CLEAR(self->batch);
    return 0;
}

static void RecordFuture_dealloc(RecordFuture *self) {
    PyObject_GC_UnTrack(self);
    Py_CLEAR(self->batch);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *RecordFuture_done(RecordFuture *self, PyObject *unused) {
    if (self->batch == NULL) return kanal_error("the future was cleared");
    PyObject *event = PyObject_GetAttr(self->batch, str_done);
    if (event == NULL) return NULL;
    PyObject *r = PyObject_CallMethodNoArgs(event, str_is_set);
    Py_DECREF(event);
    return r;
}

static PyObject *RecordFuture_result(RecordFuture *self, PyObject *args, PyObject *kwargs) {
    PyObject *timeout = Py_None;
    static char *names[] = {"timeout", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:result", names, &timeout)) return NULL;
    if (self->batch == NULL) return kanal_error("the future was cleared");
    PyObject *index = PyLong_FromSsize_t(self->index);
    if (index == NULL) return NULL;
    PyObject *r = PyObject_CallMethodObjArgs(self->batch, str_result_of, index, timeout, NULL);
    Py_DECREF(index);
    return r;
}

static PyObject *RecordFuture_repr(RecordFuture *self) {
    return PyUnicode_FromFormat("<RecordFuture %R index=%zd>", self->batch ? self->batch : Py_None, self->index);
}

static PyMethodDef RecordFuture_methods[] = {
    {"done", (PyCFunction)RecordFuture_done, METH_NOARGS, "Whether the record's batch is finished."},
    {"result", (PyCFunction)(void (*)(void))RecordFuture_result, METH_VARARGS | METH_KEYWORDS,
     "result(timeout=None) -> RecordMetadata: wait for the acknowledgement; raises the KanalError the "
     "batch failed with (ProducerBatch.result_of)."},
    {NULL}};

PyTypeObject RecordFutureType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kanal.clients._producer_fast.RecordFuture",
    .tp_doc = "The outcome of one produce() call (same methods as producer_batch.RecordFuture).",
    .tp_basicsize = sizeof(RecordFuture),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = RecordFuture_tp_new,
    .tp_dealloc = (destructor)RecordFuture_dealloc,
    .tp_traverse = (traverseproc)RecordFuture_traverse,
    .tp_clear = (inquiry)RecordFuture_clear,
    .tp_repr = (reprfunc)RecordFuture_repr,
    .tp_methods = RecordFuture_methods,
};

int producer_records_ready(void) {
    if ((str_done = PyUnicode_InternFromString("done")) == NULL ||
        (str_is_set = PyUnicode_InternFromString("is_set")) == NULL ||
        (str_result_of = PyUnicode_InternFromString("result_of")) == NULL)
        return -1;
    if (import_kanal_error("UNKNOWN_SERVER_ERROR", &KanalError, &UNKNOWN_SERVER_ERROR) < 0) return -1;
    if (PyType_Ready(&RecordListType) < 0 || PyType_Ready(&BufferMemoryType) < 0 ||
        PyType_Ready(&RecordFutureType) < 0)
        return -1;
    return 0;
}
