/* kanal.clients._producer_fast: the per-record hot path of Producer.produce(), in C.
 *
 * Optional: producer_batch.py imports it when it is built (pip install -e . builds it when a C compiler
 * and the Python headers are there) and falls back to the pure-Python path otherwise. Both paths must
 * behave the same and write the same bytes; tests/clients/test_producer_native.py checks that.
 *
 * What this file owns (per record, so it pays to do it without the interpreter):
 *   - Appender.produce(): argument checks, partition choice (explicit; murmur3_x86_32 of the key, seed 0,
 *     mod the partition count, as kanal.v1.partitioning does; else the topic's sticky partition),
 *     the record's size against record_bytes_max and buffer memory, appending the encoded record to the
 *     open batch of its partition under the accumulator's lock, sealing a batch that reached
 *     batch_size_bytes (through the accumulator's seal_full, which wakes the sender), moving the sticky
 *     partition on, and returning a RecordFuture.
 *   - Appender.produce_many(): the same for a list of records under one hold of the lock, every record
 *     checked before any is appended (a call that is not all common case is left to Python whole, so
 *     both paths raise the same errors), with no object made per record.
 *   - RecordList: one batch's serialized RecordList, grown record by record (format below), plus the
 *     per-record timestamps and the bytes charged against buffer memory.
 *   - BufferMemory: the accumulator's count of buffered bytes, as a C integer both paths update.
 *   - RecordFuture: two fields (batch, index); its methods call the batch's Python code.
 *
 * What stays in Python: everything per batch or rare. Appender.produce() hands the call, unchanged, to
 * the pure-Python produce() whenever it is not the common case: a closed producer, a value or key that is
 * not bytes/None, headers, an unknown topic, a partition out of range or not an int, a record over
 * record_bytes_max, a full buffer (blocking up to max_block_ms), a partition without an open batch (the
 * batch is created in Python). So every error is raised by the Python code, with its codes and messages.
 * Sending, retries, idempotence, callbacks and metadata refresh never come here.
 *
 * Threading: nothing here releases the GIL. Appender.produce() takes the accumulator's threading.Lock
 * (by calling its acquire/release) around everything that touches batches or buffer memory, like
 * RecordAccumulator.append; RecordList and BufferMemory are only changed under that lock.
 *
 * RecordList format (kanal.v1.batch.encode_record_list, byte for byte; proto3 rules): for each record,
 *   0x0a varint(len(body)) body                 -- RecordList field 1, length-delimited
 * where body is, in order:
 *   0x08 varint(offset_delta)                   -- field 1; left out for the first record (0)
 *   0x10 varint(zigzag(ts - first_ts))          -- field 2; left out when the delta is 0
 *   0x1a varint(len(key)) key                   -- field 3; whenever the key is not None, even empty
 *   0x22 varint(len(value)) value               -- field 4; whenever the value is not None, even empty
 *   headers                                     -- field 5 entries, encoded by Python (tail argument)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "_kanal_errors.h"

#include <stdint.h>
#include <string.h>
#include <time.h>

#define RECORD_OVERHEAD_BYTES 16 /* producer.py's _RECORD_OVERHEAD_BYTES: the charge per record */

static PyObject *KanalError;            /* kanal.v1.error.KanalError */
static PyObject *UNKNOWN_SERVER_ERROR;  /* ErrorCode.UNKNOWN_SERVER_ERROR */
static PyObject *str_records, *str_callbacks, *str_done, *str_is_set, *str_result_of;
static PyObject *kw_names[7];           /* produce()'s parameter names, interned */

/* ---- murmur3_x86_32 (Austin Appleby's MurmurHash3, public domain) ---- */

static inline uint32_t rotl32(uint32_t x, int r) { return (x << r) | (x >> (32 - r)); }

static uint32_t murmur3_32(const unsigned char *data, Py_ssize_t len, uint32_t seed) {
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

static PyObject *py_murmur3_32(PyObject *mod, PyObject *args) {
    Py_buffer data;
    unsigned long seed = 0;
    if (!PyArg_ParseTuple(args, "y*|k:murmur3_32", &data, &seed)) return NULL;
    uint32_t h = murmur3_32(data.buf, data.len, (uint32_t)seed);
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(h);
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

typedef struct {
    PyObject_HEAD
    PyObject *bytes;           /* owns buf: a bytes object of cap bytes, handed out by take(); NULL once taken */
    char *buf;                 /* the RecordList bytes so far */
    Py_ssize_t len, cap;
    int64_t *timestamps;       /* per record, absolute: for RecordMetadata */
    Py_ssize_t count, ts_cap;
    long long first_ts, max_ts;
    long long size_bytes;      /* what the accumulator charged against buffer_memory_bytes */
    int taken;
} RecordList;

static PyTypeObject RecordListType;

static void RecordList_dealloc(RecordList *self) {
    Py_XDECREF(self->bytes);
    PyMem_Free(self->timestamps);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *kanal_error(const char *message) {
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
static Py_ssize_t records_append(RecordList *self, const char *value, Py_ssize_t vlen, const char *key,
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

static PyTypeObject RecordListType = {
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

typedef struct {
    PyObject_HEAD
    long long buffered_bytes;
} BufferMemory;

static PyTypeObject BufferMemoryType;

static PyMemberDef BufferMemory_members[] = {
    {"buffered_bytes", T_LONGLONG, offsetof(BufferMemory, buffered_bytes), 0,
     "bytes of records buffered and not yet completed"},
    {NULL}};

static PyTypeObject BufferMemoryType = {
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

static PyTypeObject RecordFutureType;

static PyObject *future_new(PyObject *batch, Py_ssize_t index) {  /* takes a new reference to batch */
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

static PyTypeObject RecordFutureType = {
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

/* ---- Appender ---- */

typedef struct {
    PyObject_HEAD
    PyObject *acquire, *release;  /* the accumulator lock's bound methods */
    PyObject *open_batches;       /* RecordAccumulator._open: {(topic, partition): ProducerBatch} */
    PyObject *seal_full;          /* RecordAccumulator.seal_full(tp, batch), called under the lock */
    PyObject *open_batch;         /* RecordAccumulator.open_batch(tp) -> a new open batch, under the lock */
    PyObject *wait_for_space;     /* (size) -> None under the lock: back-pressure, or REQUEST_TIMED_OUT */
    BufferMemory *memory;
    PyObject *partition_counts;   /* Producer._partition_counts: {topic: count} */
    PyObject *sticky;             /* Producer._sticky: {topic: partition} */
    PyObject *randrange;          /* Producer._rng.randrange */
    PyObject *fallback;           /* the pure-Python produce(), called with the same arguments */
    long long batch_size_bytes, buffer_memory_bytes, record_bytes_max;
    int closed;
    unsigned long long fast_calls, fallback_calls;
} Appender;

static PyTypeObject AppenderType;

static int Appender_traverse(Appender *self, visitproc visit, void *arg) {
    Py_VISIT(self->acquire);
    Py_VISIT(self->release);
    Py_VISIT(self->open_batches);
    Py_VISIT(self->seal_full);
    Py_VISIT(self->open_batch);
    Py_VISIT(self->wait_for_space);
    Py_VISIT(self->memory);
    Py_VISIT(self->partition_counts);
    Py_VISIT(self->sticky);
    Py_VISIT(self->randrange);
    Py_VISIT(self->fallback);
    return 0;
}

static int Appender_clear(Appender *self) {
    Py_CLEAR(self->acquire);
    Py_CLEAR(self->release);
    Py_CLEAR(self->open_batches);
    Py_CLEAR(self->seal_full);
    Py_CLEAR(self->open_batch);
    Py_CLEAR(self->wait_for_space);
    Py_CLEAR(self->memory);
    Py_CLEAR(self->partition_counts);
    Py_CLEAR(self->sticky);
    Py_CLEAR(self->randrange);
    Py_CLEAR(self->fallback);
    self->closed = 1;  /* a cleared appender only falls back... and has nothing to fall back to */
    return 0;
}

static void Appender_dealloc(Appender *self) {
    PyObject_GC_UnTrack(self);
    Appender_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Appender_init(Appender *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"lock", "open_batches", "open_batch", "wait_for_space", "seal_full", "memory",
                            "batch_size_bytes",
                            "buffer_memory_bytes", "partition_counts", "sticky", "randrange", "fallback",
                            "record_bytes_max", NULL};
    PyObject *lock, *open_batches, *open_batch, *wait_for_space, *seal_full, *memory, *counts, *sticky;
    PyObject *randrange, *fallback;
    long long batch_size, buffer_max, record_max;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "$OO!OOOO!LLO!O!OOL:Appender", names, &lock, &PyDict_Type,
                                     &open_batches, &open_batch, &wait_for_space, &seal_full, &BufferMemoryType, &memory,
                                     &batch_size, &buffer_max, &PyDict_Type, &counts, &PyDict_Type, &sticky,
                                     &randrange, &fallback, &record_max))
        return -1;
    PyObject *acquire = PyObject_GetAttrString(lock, "acquire");
    PyObject *release = acquire ? PyObject_GetAttrString(lock, "release") : NULL;
    if (release == NULL) { Py_XDECREF(acquire); return -1; }
    Appender_clear(self);
    self->acquire = acquire;
    self->release = release;
    self->open_batches = Py_NewRef(open_batches);
    self->seal_full = Py_NewRef(seal_full);
    self->open_batch = Py_NewRef(open_batch);
    self->wait_for_space = Py_NewRef(wait_for_space);
    self->memory = (BufferMemory *)Py_NewRef(memory);
    self->partition_counts = Py_NewRef(counts);
    self->sticky = Py_NewRef(sticky);
    self->randrange = Py_NewRef(randrange);
    self->fallback = Py_NewRef(fallback);
    self->batch_size_bytes = batch_size;
    self->buffer_memory_bytes = buffer_max;
    self->record_bytes_max = record_max;
    self->closed = 0;
    return 0;
}

static int unlock(Appender *self) {
    PyObject *r = PyObject_CallNoArgs(self->release);
    if (r == NULL) return -1;
    Py_DECREF(r);
    return 0;
}

/* Releases the lock on an error path, keeping the error being raised. */
static void unlock_on_error(Appender *self) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (unlock(self) < 0) PyErr_Clear();
    PyErr_Restore(type, value, tb);
}

enum { A_TOPIC, A_VALUE, A_KEY, A_PARTITION, A_HEADERS, A_TIMESTAMP, A_ON_DELIVERY, A_COUNT };

static int parse_produce_args(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, PyObject **a) {
    if (nargs > A_COUNT) {
        PyErr_Format(PyExc_TypeError, "produce() takes at most %d arguments (%zd given)", A_COUNT, nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) a[i] = args[i];
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t j = 0; j < nkw; j++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, j);
        int found = -1;
        for (int i = 0; i < A_COUNT && found < 0; i++)
            if (name == kw_names[i]) found = i;  /* keyword names are interned: identity nearly always */
        for (int i = 0; i < A_COUNT && found < 0; i++) {
            int eq = PyUnicode_Compare(name, kw_names[i]);
            if (eq == -1 && PyErr_Occurred()) return -1;
            if (eq == 0) found = i;
        }
        if (found < 0) {
            PyErr_Format(PyExc_TypeError, "produce() got an unexpected keyword argument '%S'", name);
            return -1;
        }
        if (a[found] != NULL) {
            PyErr_Format(PyExc_TypeError, "produce() got multiple values for argument '%S'", name);
            return -1;
        }
        a[found] = args[nargs + j];
    }
    if (a[A_TOPIC] == NULL || a[A_VALUE] == NULL) {
        PyErr_SetString(PyExc_TypeError, "produce() missing required argument 'topic' or 'value'");
        return -1;
    }
    for (int i = 0; i < A_COUNT; i++)
        if (a[i] == NULL) a[i] = Py_None;
    return 0;
}

static long long now_ms(void) {  /* time.time_ns() // 1_000_000: the same clock (CLOCK_REALTIME) */
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    long long ns = (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
    return ns >= 0 ? ns / 1000000 : -((-ns + 999999) / 1000000);
}

/* Under the lock: appends one record to `batch` (whose records are `records`), registering `on_delivery`
 * (or None) first, so a failure leaves no record without its callback and no callback without its
 * record, and charges `size` against buffer memory. Returns the record's index, or -1 with an exception
 * set and nothing changed. */
static Py_ssize_t append_record(Appender *self, PyObject *batch, RecordList *records, const char *value,
                                Py_ssize_t vlen, const char *key, Py_ssize_t klen, long long ts,
                                PyObject *on_delivery, long long size) {
    Py_ssize_t index = records->count;
    PyObject *callbacks = NULL;
    if (on_delivery != Py_None) {
        callbacks = PyObject_GetAttr(batch, str_callbacks);
        PyObject *entry = callbacks ? Py_BuildValue("(nO)", index, on_delivery) : NULL;
        int failed = entry == NULL || !PyList_Check(callbacks) || PyList_Append(callbacks, entry) < 0;
        Py_XDECREF(entry);
        if (failed) {
            if (callbacks != NULL && !PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "the batch's callbacks are not a list");
            Py_XDECREF(callbacks);
            return -1;
        }
    }
    if (records_append(records, value, vlen, key, klen, ts, NULL, 0) < 0) {
        if (callbacks != NULL) {  /* take the callback back out: the record is not in the batch */
            Py_ssize_t n = PyList_GET_SIZE(callbacks);
            PyObject *exc_type, *exc_value, *exc_tb;
            PyErr_Fetch(&exc_type, &exc_value, &exc_tb);
            if (PyList_SetSlice(callbacks, n - 1, n, NULL) < 0) PyErr_Clear();
            PyErr_Restore(exc_type, exc_value, exc_tb);
        }
        Py_XDECREF(callbacks);
        return -1;
    }
    Py_XDECREF(callbacks);
    records->size_bytes += size;
    self->memory->buffered_bytes += size;
    return index;
}

static PyObject *Appender_produce(Appender *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *a[A_COUNT] = {NULL};
    if (parse_produce_args(args, nargs, kwnames, a) < 0) return NULL;
    PyObject *topic = a[A_TOPIC], *value = a[A_VALUE], *key = a[A_KEY], *partition = a[A_PARTITION];
    if (self->closed || self->fallback == NULL || a[A_HEADERS] != Py_None) goto fallback;
    if (a[A_ON_DELIVERY] != Py_None && !PyCallable_Check(a[A_ON_DELIVERY])) goto fallback;  /* Python raises */
    if (value != Py_None && !PyBytes_CheckExact(value)) goto fallback;
    if (key != Py_None && !PyBytes_CheckExact(key)) goto fallback;

    PyObject *count_obj = PyDict_GetItemWithError(self->partition_counts, topic);  /* borrowed */
    if (count_obj == NULL) {
        if (PyErr_Occurred()) return NULL;
        goto fallback;  /* a topic not seen yet: Python asks the metadata */
    }
    if (!PyLong_CheckExact(count_obj)) goto fallback;
    long count = PyLong_AsLong(count_obj);
    /* Partition numbers are int32 on the wire; anything else is left to Python (and keeps the modulo
     * below a 32-bit one that can never divide by zero). */
    if (count <= 0 || count > INT32_MAX) { PyErr_Clear(); goto fallback; }

    long part;
    PyObject *part_obj;  /* new reference from here on */
    if (partition != Py_None) {
        int overflow;
        if (!PyLong_CheckExact(partition)) goto fallback;
        part = PyLong_AsLongAndOverflow(partition, &overflow);
        if (overflow || part < 0 || part >= count) goto fallback;  /* Python raises the error */
        part_obj = Py_NewRef(partition);
    } else if (key != Py_None) {
        part = (long)(murmur3_32((const unsigned char *)PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key), 0) %
                      (uint32_t)count);
        part_obj = PyLong_FromLong(part);
        if (part_obj == NULL) return NULL;
    } else {
        PyObject *s = PyDict_GetItemWithError(self->sticky, topic);
        if (s == NULL) {
            if (PyErr_Occurred()) return NULL;
            goto fallback;  /* the topic's first sticky partition is drawn in Python */
        }
        part_obj = Py_NewRef(s);
    }

    Py_ssize_t vlen = value == Py_None ? -1 : PyBytes_GET_SIZE(value);
    Py_ssize_t klen = key == Py_None ? -1 : PyBytes_GET_SIZE(key);
    long long size = RECORD_OVERHEAD_BYTES + (vlen > 0 ? vlen : 0) + (klen > 0 ? klen : 0);
    long long ts;
    if (size > self->record_bytes_max) goto fallback_part;
    if (a[A_TIMESTAMP] == Py_None) {
        ts = now_ms();
    } else {
        int overflow;
        if (!PyLong_CheckExact(a[A_TIMESTAMP])) goto fallback_part;
        ts = PyLong_AsLongLongAndOverflow(a[A_TIMESTAMP], &overflow);
        if (overflow || ts < 0) goto fallback_part;  /* Python raises INVALID_REQUEST */
    }

    PyObject *tp = PyTuple_Pack(2, topic, part_obj);
    if (tp == NULL) { Py_DECREF(part_obj); return NULL; }
    PyObject *r = PyObject_CallNoArgs(self->acquire);
    if (r == NULL) { Py_DECREF(tp); Py_DECREF(part_obj); return NULL; }
    Py_DECREF(r);
    /* ---- under the accumulator's lock ---- */
    if (self->memory->buffered_bytes + size > self->buffer_memory_bytes) goto unlock_fallback;  /* blocks */
    PyObject *batch = PyDict_GetItemWithError(self->open_batches, tp);
    if (batch == NULL) {
        if (PyErr_Occurred()) goto unlock_error;
        goto unlock_fallback;  /* a new batch is made in Python */
    }
    Py_INCREF(batch);  /* seal_full takes it out of the dict */
    RecordList *records = (RecordList *)PyObject_GetAttr(batch, str_records);
    if (records == NULL) goto unlock_error_batch;
    if (!Py_IS_TYPE(records, &RecordListType) || records->taken) {
        Py_DECREF(records);
        Py_DECREF(batch);
        goto unlock_fallback;
    }
    Py_ssize_t index = append_record(self, batch, records, vlen >= 0 ? PyBytes_AS_STRING(value) : NULL, vlen,
                                     klen >= 0 ? PyBytes_AS_STRING(key) : NULL, klen, ts, a[A_ON_DELIVERY], size);
    if (index < 0) {
        Py_DECREF(records);
        goto unlock_error_batch;
    }
    int sealed = records->size_bytes >= self->batch_size_bytes;
    Py_DECREF(records);
    if (sealed) {
        r = PyObject_CallFunctionObjArgs(self->seal_full, tp, batch, NULL);
        if (r == NULL) goto unlock_error_batch;
        Py_DECREF(r);
    }
    Py_DECREF(tp);
    if (unlock(self) < 0) { Py_DECREF(batch); Py_DECREF(part_obj); return NULL; }
    /* ---- lock released ---- */
    if (sealed && key == Py_None) {  /* sticky partitioner: move on once a batch is full */
        PyObject *s = PyDict_GetItemWithError(self->sticky, topic);
        int same = s == NULL ? 0 : PyObject_RichCompareBool(s, part_obj, Py_EQ);
        if (same > 0) {
            /* count_obj was borrowed before the lock: another thread may have replaced it since. */
            PyObject *n = PyLong_FromLong(count);
            PyObject *next = n ? PyObject_CallOneArg(self->randrange, n) : NULL;
            if (next == NULL || PyDict_SetItem(self->sticky, topic, next) < 0) same = -1;
            Py_XDECREF(next);
            Py_XDECREF(n);
        }
        if (same < 0 || PyErr_Occurred()) { Py_DECREF(batch); Py_DECREF(part_obj); return NULL; }
    }
    Py_DECREF(part_obj);
    PyObject *future = future_new(batch, index);
    Py_DECREF(batch);
    self->fast_calls++;
    return future;

unlock_error_batch:
    unlock_on_error(self);
    Py_DECREF(batch);  /* after the unlock: if it was the last reference, freeing it may run Python code */
    Py_DECREF(tp);
    Py_DECREF(part_obj);
    return NULL;
unlock_error:
    unlock_on_error(self);
    Py_DECREF(tp);
    Py_DECREF(part_obj);
    return NULL;
unlock_fallback:
    Py_DECREF(tp);
    if (unlock(self) < 0) { Py_DECREF(part_obj); return NULL; }
fallback_part:
    Py_DECREF(part_obj);
fallback:
    if (self->fallback == NULL) return kanal_error("the producer's native appender was cleared");
    self->fallback_calls++;
    return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
}


/* ---- Appender.produce_many ---- */

/* An item of values or keys as (data, len); len -1 for None. 0 if it is not bytes or None: Python's
 * produce_many converts str and the like, and raises for the rest. */
static int bytes_item(PyObject *obj, const char **data, Py_ssize_t *len) {
    if (obj == Py_None) { *data = NULL; *len = -1; return 1; }
    if (!PyBytes_CheckExact(obj)) return 0;
    *data = PyBytes_AS_STRING(obj);
    *len = PyBytes_GET_SIZE(obj);
    return 1;
}

/* Producer.produce_many() for the common case: lists or tuples of bytes/None, a known topic, an
 * explicit partition in range or the built-in partitioners, no record over record_bytes_max and the
 * whole call fitting in buffer memory. Every record is checked before the lock is taken; then all are
 * appended under one hold of the lock, as the Python produce_many does (one timestamp, the sticky
 * partition moving on when its batch seals, batches opened through the accumulator's open_batch).
 * A full buffer is waited on here, through the accumulator's wait_for_space (it may raise
 * REQUEST_TIMED_OUT, with nothing appended).
 *
 * Returns (batches, owners, indexes): record i is record indexes[i] of batches[owners[i]], both bytes of
 * native-endian uint32 (Python wraps them in a RecordFutures; no object is made per record). Returns
 * None for anything else, which Python's produce_many then does itself, raising its errors. */
static PyObject *Appender_produce_many(Appender *self, PyObject *args) {
    PyObject *topic, *values, *keys, *partition, *timestamp, *on_delivery;
    if (!PyArg_ParseTuple(args, "OOOOOO:produce_many", &topic, &values, &keys, &partition, &timestamp,
                          &on_delivery))
        return NULL;
    if (self->closed) goto fallback;
    if (!PyList_CheckExact(values) && !PyTuple_CheckExact(values)) goto fallback;
    if (keys != Py_None && !PyList_CheckExact(keys) && !PyTuple_CheckExact(keys)) goto fallback;
    if (on_delivery != Py_None && !PyCallable_Check(on_delivery)) goto fallback;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(values);
    if (keys != Py_None && PySequence_Fast_GET_SIZE(keys) != n) goto fallback;
    PyObject **vitems = PySequence_Fast_ITEMS(values), **kitems = keys == Py_None ? NULL : PySequence_Fast_ITEMS(keys);

    PyObject *count_obj = PyDict_GetItemWithError(self->partition_counts, topic);  /* borrowed */
    if (count_obj == NULL) {
        if (PyErr_Occurred()) return NULL;
        goto fallback;
    }
    if (!PyLong_CheckExact(count_obj)) goto fallback;
    long count = PyLong_AsLong(count_obj);
    if (count <= 0 || count > INT32_MAX) { PyErr_Clear(); goto fallback; }
    long fixed = -1;
    if (partition != Py_None) {
        int overflow;
        if (!PyLong_CheckExact(partition)) goto fallback;
        fixed = PyLong_AsLongAndOverflow(partition, &overflow);
        if (overflow || fixed < 0 || fixed >= count) goto fallback;
    }
    long long ts;
    if (timestamp == Py_None) {
        ts = now_ms();
    } else {
        int overflow;
        if (!PyLong_CheckExact(timestamp)) goto fallback;
        ts = PyLong_AsLongLongAndOverflow(timestamp, &overflow);
        if (overflow || ts < 0) goto fallback;
    }
    /* Check every record before anything is appended. */
    long long total = 0;
    int needs_sticky = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *d;
        Py_ssize_t vlen, klen = -1;
        if (!bytes_item(vitems[i], &d, &vlen)) goto fallback;
        if (kitems != NULL && !bytes_item(kitems[i], &d, &klen)) goto fallback;
        long long size = RECORD_OVERHEAD_BYTES + (vlen > 0 ? vlen : 0) + (klen > 0 ? klen : 0);
        if (size > self->record_bytes_max) goto fallback;
        total += size;
        if (klen < 0) needs_sticky = 1;
    }
    if (total > self->buffer_memory_bytes) goto fallback;
    if (needs_sticky && fixed < 0) {
        PyObject *s = PyDict_GetItemWithError(self->sticky, topic);
        if (s == NULL) {
            if (PyErr_Occurred()) return NULL;
            goto fallback;  /* the topic's first sticky partition is drawn in Python */
        }
    }
    if (n > (Py_ssize_t)UINT32_MAX) goto fallback;

    PyObject *batches = PyList_New(0), *numbers = PyDict_New();  /* numbers: batch -> its place in batches */
    PyObject *owners_obj = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(uint32_t));
    PyObject *indexes_obj = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(uint32_t));
    PyObject *result = batches && numbers && owners_obj && indexes_obj
                       ? PyTuple_Pack(3, batches, owners_obj, indexes_obj) : NULL;
    Py_XDECREF(batches);  /* the tuple holds them from here on */
    Py_XDECREF(owners_obj);
    Py_XDECREF(indexes_obj);
    if (result == NULL) { Py_XDECREF(numbers); return NULL; }
    uint32_t *owners = (uint32_t *)PyBytes_AS_STRING(owners_obj), *indexes = (uint32_t *)PyBytes_AS_STRING(indexes_obj);
    uint32_t owner = 0;
    long cur_part = -1, sticky_part = -1;
    PyObject *tp = NULL, *batch = NULL;  /* the partition last appended to, its batch (new references) */
    RecordList *records = NULL;
    PyObject *r = PyObject_CallNoArgs(self->acquire);
    if (r == NULL) { Py_DECREF(numbers); Py_DECREF(result); return NULL; }
    Py_DECREF(r);
    /* ---- under the accumulator's lock ---- */
    if (self->memory->buffered_bytes + total > self->buffer_memory_bytes) {
        /* Back-pressure: wait (releasing the lock meanwhile, as a Condition does) until all fit. */
        PyObject *size = PyLong_FromLongLong(total);
        r = size ? PyObject_CallOneArg(self->wait_for_space, size) : NULL;
        Py_XDECREF(size);
        if (r == NULL) goto error;
        Py_DECREF(r);
        /* The wait released the lock: check the sticky partition again (it is only ever replaced). */
        if (needs_sticky && fixed < 0 && PyDict_GetItemWithError(self->sticky, topic) == NULL) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "the sticky partition was removed");
            goto error;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *value = NULL, *key = NULL;
        Py_ssize_t vlen = -1, klen = -1;
        (void)bytes_item(vitems[i], &value, &vlen);  /* checked above: bytes or None */
        if (kitems != NULL) (void)bytes_item(kitems[i], &key, &klen);
        int is_sticky = 0;
        long part;
        if (fixed >= 0) {
            part = fixed;
        } else if (klen >= 0) {
            part = (long)(murmur3_32((const unsigned char *)key, klen, 0) % (uint32_t)count);
        } else {
            if (sticky_part < 0) {  /* read once, and again after this call moves it on */
                PyObject *s = PyDict_GetItemWithError(self->sticky, topic);  /* checked present above */
                int overflow = 0;
                sticky_part = s == NULL ? -1 : PyLong_AsLongAndOverflow(s, &overflow);
                if (s == NULL || overflow || sticky_part < 0 || sticky_part >= count) {
                    if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "the sticky partition is not valid");
                    goto error;
                }
            }
            part = sticky_part;
            is_sticky = 1;
        }
        if (part != cur_part || batch == NULL) {
            Py_CLEAR(tp);
            Py_CLEAR(batch);
            Py_CLEAR(records);
            cur_part = part;
            tp = Py_BuildValue("(Ol)", topic, part);
            if (tp == NULL) goto error;
            batch = Py_XNewRef(PyDict_GetItemWithError(self->open_batches, tp));
            if (batch == NULL) {
                if (PyErr_Occurred()) goto error;
                batch = PyObject_CallOneArg(self->open_batch, tp);
                if (batch == NULL) goto error;
            }
            records = (RecordList *)PyObject_GetAttr(batch, str_records);
            if (records == NULL) goto error;
            if (!Py_IS_TYPE(records, &RecordListType)) {
                PyErr_SetString(PyExc_TypeError, "the batch's records are not a native RecordList");
                goto error;
            }
            PyObject *number = PyDict_GetItemWithError(numbers, batch);
            if (number != NULL) {
                owner = (uint32_t)PyLong_AsUnsignedLong(number);
            } else {
                if (PyErr_Occurred()) goto error;
                owner = (uint32_t)PyList_GET_SIZE(batches);
                number = PyLong_FromUnsignedLong(owner);
                int failed = number == NULL || PyDict_SetItem(numbers, batch, number) < 0 ||
                             PyList_Append(batches, batch) < 0;
                Py_XDECREF(number);
                if (failed) goto error;
            }
        }
        long long size = RECORD_OVERHEAD_BYTES + (vlen > 0 ? vlen : 0) + (klen > 0 ? klen : 0);
        Py_ssize_t index = append_record(self, batch, records, value, vlen, key, klen, ts, on_delivery, size);
        if (index < 0) goto error;
        owners[i] = owner;
        indexes[i] = (uint32_t)index;
        if (records->size_bytes >= self->batch_size_bytes) {
            r = PyObject_CallFunctionObjArgs(self->seal_full, tp, batch, NULL);
            if (r == NULL) goto error;
            Py_DECREF(r);
            Py_CLEAR(batch);  /* the next record of this partition opens a new batch */
            if (is_sticky) {  /* sticky partitioner: move on once a batch is full */
                PyObject *c = PyLong_FromLong(count);
                PyObject *next = c ? PyObject_CallOneArg(self->randrange, c) : NULL;
                int failed = next == NULL || PyDict_SetItem(self->sticky, topic, next) < 0;
                Py_XDECREF(next);
                Py_XDECREF(c);
                if (failed) goto error;
                sticky_part = -1;
            }
        }
    }
    Py_XDECREF(tp);
    Py_XDECREF(records);
    if (unlock(self) < 0) { Py_XDECREF(batch); Py_DECREF(numbers); Py_DECREF(result); return NULL; }
    Py_XDECREF(batch);  /* after the unlock: freeing a batch may run Python code */
    Py_DECREF(numbers);
    self->fast_calls += (unsigned long long)n;
    return result;

error:  /* under the lock; records appended so far stay queued (only MemoryError and broken state get here) */
    unlock_on_error(self);
    Py_XDECREF(tp);
    Py_XDECREF(records);
    Py_XDECREF(batch);
    Py_DECREF(numbers);
    Py_DECREF(result);
    return NULL;

fallback:
    self->fallback_calls++;
    Py_RETURN_NONE;
}

static PyObject *Appender_repr(Appender *self) {
    return PyUnicode_FromFormat("<Appender native fast=%llu fallback=%llu closed=%d>", self->fast_calls,
                                self->fallback_calls, self->closed);
}

static PyMethodDef Appender_methods[] = {
    {"produce", (PyCFunction)(void (*)(void))Appender_produce, METH_FASTCALL | METH_KEYWORDS,
     "produce(topic, value, key=None, partition=None, headers=None, timestamp=None, on_delivery=None): "
     "Producer.produce() with the common case in C; every other case goes to the Python produce()."},
    {"produce_many", (PyCFunction)Appender_produce_many, METH_VARARGS,
     "produce_many(topic, values, keys, partition, timestamp, on_delivery) -> (batches, owners, indexes) "
     "or None: Producer.produce_many()'s common case (see the comment above the function)."},
    {NULL}};

static PyMemberDef Appender_members[] = {
    {"closed", T_INT, offsetof(Appender, closed), 0, "set by Producer.close(): every call falls back"},
    {"fast_calls", T_ULONGLONG, offsetof(Appender, fast_calls), READONLY, "records appended in C"},
    {"fallback_calls", T_ULONGLONG, offsetof(Appender, fallback_calls), READONLY,
     "calls handed to the Python produce()"},
    {NULL}};

static PyTypeObject AppenderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kanal.clients._producer_fast.Appender",
    .tp_doc = "Producer.produce()'s per-record path for the common case (see the module comment).",
    .tp_basicsize = sizeof(Appender),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Appender_init,
    .tp_dealloc = (destructor)Appender_dealloc,
    .tp_traverse = (traverseproc)Appender_traverse,
    .tp_clear = (inquiry)Appender_clear,
    .tp_repr = (reprfunc)Appender_repr,
    .tp_methods = Appender_methods,
    .tp_members = Appender_members,
};

/* ---- module ---- */

static PyMethodDef module_methods[] = {
    {"murmur3_32", py_murmur3_32, METH_VARARGS,
     "murmur3_32(data, seed=0) -> int: MurmurHash3 x86_32, unsigned (mmh3.hash(data, seed, signed=False))."},
    {NULL}};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "kanal.clients._producer_fast",
    "The producer's per-record hot path in C (see clients/_producer_fast.c).", -1, module_methods,
};

PyMODINIT_FUNC PyInit__producer_fast(void) {
    static const char *names[A_COUNT] = {"topic", "value", "key", "partition", "headers", "timestamp",
                                         "on_delivery"};
    for (int i = 0; i < A_COUNT; i++)
        if ((kw_names[i] = PyUnicode_InternFromString(names[i])) == NULL) return NULL;
    if ((str_records = PyUnicode_InternFromString("records")) == NULL ||
        (str_callbacks = PyUnicode_InternFromString("callbacks")) == NULL ||
        (str_done = PyUnicode_InternFromString("done")) == NULL ||
        (str_is_set = PyUnicode_InternFromString("is_set")) == NULL ||
        (str_result_of = PyUnicode_InternFromString("result_of")) == NULL)
        return NULL;
    if (import_kanal_error("UNKNOWN_SERVER_ERROR", &KanalError, &UNKNOWN_SERVER_ERROR) < 0) return NULL;
    if (PyType_Ready(&RecordListType) < 0 || PyType_Ready(&BufferMemoryType) < 0 ||
        PyType_Ready(&RecordFutureType) < 0 || PyType_Ready(&AppenderType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL) return NULL;
    if (PyModule_AddObjectRef(m, "RecordList", (PyObject *)&RecordListType) < 0 ||
        PyModule_AddObjectRef(m, "BufferMemory", (PyObject *)&BufferMemoryType) < 0 ||
        PyModule_AddObjectRef(m, "RecordFuture", (PyObject *)&RecordFutureType) < 0 ||
        PyModule_AddObjectRef(m, "Appender", (PyObject *)&AppenderType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
