/* kanal.spark._record_columns: a partition log's records walked straight into Arrow column buffers, in C.
 *
 * Optional: kanal.spark.log_columns uses it when it is built (setup.py builds it where a C compiler and the
 * Python headers are found) and falls back to log_rows.add_entry (protobuf decoding, one Python object per
 * record) otherwise. Both must give the same rows: tests/spark/test_fast_columns.py compares them.
 *
 * Columns(flags) accumulates rows over many stored batches; take() hands the buffers over and starts anew.
 *
 *   add(record_list, record_count, base_offset, first_timestamp_ms, lo, hi, topic, partition, producer_id,
 *       producer_epoch, leader_epoch) -> rows added
 *
 * walks one decompressed RecordList (records.proto) and appends one row per record whose offset
 * (base_offset + offset_delta) is in [lo, hi). Wire format accepted, as the leader's validation walk
 * (broker/_batch_walk.c) leaves it; tags are one byte, anything else is refused:
 *   RecordList   0x0a len Record
 *   Record       0x08 varint offset_delta, 0x10 varint timestamp_delta_ms (zigzag), 0x1a len key,
 *                0x22 len value, 0x2a len RecordHeader; a scalar or bytes field given twice: the last wins
 *   RecordHeader 0x0a len key (UTF-8), 0x12 len value
 * Every read is checked against the end of the buffer. A batch that does not walk, or holds another
 * number of records than record_count, raises KanalError(CORRUPT_MESSAGE) and leaves the columns as they
 * were before the call (every buffer is cut back), so the caller can report the batch and go on.
 *
 * Buffers are Arrow's layouts (little-endian): int64 offset, timestamp (microseconds), producer_id,
 * batch_offset; int32 partition, producer_epoch, leader_epoch, value_bytes; binary and string columns as
 * int32 end offsets (starting with 0) and one data buffer; validity one byte per row here, packed into
 * Arrow's bitmap by take(). The headers column is a list: int32 offsets per row into the flat header
 * key (string) and value (binary, nullable) columns.
 */
#include "_arrow_buffers.h"

static PyObject *KanalError;
static PyObject *CORRUPT_MESSAGE;

enum {
    WANT_OFFSET = 1 << 0,
    WANT_TIMESTAMP = 1 << 1,
    WANT_KEY = 1 << 2,
    WANT_VALUE = 1 << 3,
    WANT_HEADERS = 1 << 4,
    WANT_VALUE_BYTES = 1 << 5,
    WANT_TOPIC = 1 << 6,
    WANT_PARTITION = 1 << 7,
    WANT_PRODUCER_ID = 1 << 8,
    WANT_PRODUCER_EPOCH = 1 << 9,
    WANT_LEADER_EPOCH = 1 << 10,
    WANT_BATCH_OFFSET = 1 << 11,
};

#define N_FIXED 8
enum { F_OFFSET, F_TIMESTAMP, F_VALUE_BYTES, F_PARTITION, F_PRODUCER_ID, F_PRODUCER_EPOCH, F_LEADER_EPOCH,
       F_BATCH_OFFSET };
#define N_BINARY 5
enum { B_KEY, B_VALUE, B_TOPIC, B_HEADER_KEY, B_HEADER_VALUE };

static const char *FIXED_NAMES[N_FIXED] = {"offset", "timestamp", "value_bytes", "partition", "producer_id",
                                           "producer_epoch", "leader_epoch", "batch_offset"};
static const int FIXED_WANT[N_FIXED] = {WANT_OFFSET, WANT_TIMESTAMP, WANT_VALUE_BYTES, WANT_PARTITION,
                                        WANT_PRODUCER_ID, WANT_PRODUCER_EPOCH, WANT_LEADER_EPOCH,
                                        WANT_BATCH_OFFSET};
static const char *BINARY_NAMES[3] = {"key", "value", "topic"};
static const int BINARY_WANT[3] = {WANT_KEY, WANT_VALUE, WANT_TOPIC};

typedef struct {
    PyObject_HEAD
    int want;
    Py_ssize_t rows;
    Buf fixed[N_FIXED];
    Binary binary[N_BINARY];
    Buf header_offsets; /* int32 per row + 1: where each row's headers start in the flat header columns */
    Py_ssize_t headers;
} Columns;

typedef struct {
    Py_ssize_t fixed[N_FIXED];
    Py_ssize_t binary[N_BINARY][3];
    Py_ssize_t header_offsets, rows, headers;
} Mark;

static void mark(Columns *c, Mark *m) {
    for (int i = 0; i < N_FIXED; i++) m->fixed[i] = c->fixed[i].len;
    for (int i = 0; i < N_BINARY; i++) {
        m->binary[i][0] = c->binary[i].offsets.len;
        m->binary[i][1] = c->binary[i].data.len;
        m->binary[i][2] = c->binary[i].valid.len;
    }
    m->header_offsets = c->header_offsets.len;
    m->rows = c->rows;
    m->headers = c->headers;
}

static void rewind_to(Columns *c, const Mark *m) {
    for (int i = 0; i < N_FIXED; i++) c->fixed[i].len = m->fixed[i];
    for (int i = 0; i < N_BINARY; i++) {
        c->binary[i].offsets.len = m->binary[i][0];
        c->binary[i].data.len = m->binary[i][1];
        c->binary[i].valid.len = m->binary[i][2];
    }
    c->header_offsets.len = m->header_offsets;
    c->rows = m->rows;
    c->headers = m->headers;
}

static void free_buffers(Columns *c) {
    for (int i = 0; i < N_FIXED; i++) buf_free(&c->fixed[i]);
    for (int i = 0; i < N_BINARY; i++) {
        buf_free(&c->binary[i].offsets);
        buf_free(&c->binary[i].data);
        buf_free(&c->binary[i].valid);
    }
    buf_free(&c->header_offsets);
}

static int start_buffers(Columns *c) {
    c->rows = 0;
    c->headers = 0;
    for (int i = 0; i < N_BINARY; i++)
        if (binary_init(&c->binary[i]) < 0) return -1;
    return put_i32(&c->header_offsets, 0);
}

/* ---- the walk ---- */

static int add_header(Columns *c, const uint8_t *p, const uint8_t *end, Fail *f) {
    const uint8_t *key = (const uint8_t *)"", *value = NULL;
    Py_ssize_t key_len = 0, value_len = 0;
    while (p < end) {
        uint8_t tag = *p++;
        const uint8_t *s;
        Py_ssize_t n;
        if (tag != 0x0a && tag != 0x12) return f->why = "a header holds an unknown field", -1;
        if (length_field(&p, end, &s, &n) < 0) return f->why = "a header field overruns its header", -1;
        if (tag == 0x0a) key = s, key_len = n;
        else value = s, value_len = n;
    }
    if (!valid_utf8(key, key_len)) return f->why = "a header key is not valid UTF-8", -1;
    if (binary_put(&c->binary[B_HEADER_KEY], key, key_len, 1) < 0) return -2;
    if (binary_put(&c->binary[B_HEADER_VALUE], value, value_len, value != NULL) < 0) return -2;
    c->headers++;
    return 0;
}

/* One record: fields parsed, then a row appended when its offset is in [lo, hi). -1: malformed (f->why),
 * -2: a Python error is set (memory). */
static int add_record(Columns *c, const uint8_t *p, const uint8_t *end, int64_t base_offset, int64_t first_ts,
                      int64_t lo, int64_t hi, const uint8_t *topic, Py_ssize_t topic_len, int32_t partition,
                      int64_t producer_id, int32_t producer_epoch, int32_t leader_epoch, Fail *f) {
    uint64_t offset_delta = 0, ts_zigzag = 0;
    const uint8_t *key = NULL, *value = NULL;
    Py_ssize_t key_len = 0, value_len = 0;
    const uint8_t *headers_at = NULL; /* first header field, walked again below when the row is kept */
    while (p < end) {
        uint8_t tag = *p++;
        const uint8_t *s;
        Py_ssize_t n;
        switch (tag) {
        case 0x08:
            if (varint(&p, end, &offset_delta) < 0) return f->why = "a truncated offset_delta", -1;
            break;
        case 0x10:
            if (varint(&p, end, &ts_zigzag) < 0) return f->why = "a truncated timestamp_delta_ms", -1;
            break;
        case 0x1a:
            if (length_field(&p, end, &s, &n) < 0) return f->why = "a key overruns its record", -1;
            key = s, key_len = n;
            break;
        case 0x22:
            if (length_field(&p, end, &s, &n) < 0) return f->why = "a value overruns its record", -1;
            value = s, value_len = n;
            break;
        case 0x2a:
            if (!headers_at) headers_at = p - 1;
            if (length_field(&p, end, &s, &n) < 0) return f->why = "a header overruns its record", -1;
            break;
        default:
            return f->why = "a record holds an unknown field", -1;
        }
    }
    if (offset_delta > UINT32_MAX) return f->why = "offset_delta above 2^32 - 1", -1;
    int64_t offset = base_offset + (int64_t)offset_delta;
    if (offset < lo || offset >= hi) return 0;
    int64_t ts_delta = (int64_t)(ts_zigzag >> 1) ^ -(int64_t)(ts_zigzag & 1);
    int w = c->want;
    if (w & WANT_HEADERS) {
        for (const uint8_t *q = headers_at; q && q < end;) {
            uint8_t tag = *q++;
            const uint8_t *s = NULL;
            Py_ssize_t n = 0;
            if (tag == 0x08 || tag == 0x10) {
                uint64_t skip;
                varint(&q, end, &skip); /* walked above: cannot fail */
                continue;
            }
            length_field(&q, end, &s, &n);
            if (tag == 0x2a) {
                int r = add_header(c, s, s + n, f);
                if (r < 0) return r;
            }
        }
        if (put_i32(&c->header_offsets, (int32_t)c->headers) < 0) return -2;
    }
    if (w & WANT_OFFSET) raw_i64(&c->fixed[F_OFFSET], offset);
    if (w & WANT_TIMESTAMP) raw_i64(&c->fixed[F_TIMESTAMP], (first_ts + ts_delta) * 1000);
    if (w & WANT_KEY) binary_raw(&c->binary[B_KEY], key, key_len, key != NULL);
    if (w & WANT_VALUE) binary_raw(&c->binary[B_VALUE], value, value_len, value != NULL);
    if (w & WANT_VALUE_BYTES) raw_i32(&c->fixed[F_VALUE_BYTES], (int32_t)value_len);
    if (w & WANT_TOPIC) binary_raw(&c->binary[B_TOPIC], topic, topic_len, 1);
    if (w & WANT_PARTITION) raw_i32(&c->fixed[F_PARTITION], partition);
    if (w & WANT_PRODUCER_ID) raw_i64(&c->fixed[F_PRODUCER_ID], producer_id);
    if (w & WANT_PRODUCER_EPOCH) raw_i32(&c->fixed[F_PRODUCER_EPOCH], producer_epoch);
    if (w & WANT_LEADER_EPOCH) raw_i32(&c->fixed[F_LEADER_EPOCH], leader_epoch);
    if (w & WANT_BATCH_OFFSET) raw_i64(&c->fixed[F_BATCH_OFFSET], base_offset);
    c->rows++;
    return 0;
}

static int reserve_rows(Columns *c, Py_ssize_t rows, Py_ssize_t bytes, Py_ssize_t topic_len) {
    int w = c->want;
    static const int widths[N_FIXED] = {8, 8, 4, 4, 8, 4, 4, 8};
    for (int i = 0; i < N_FIXED; i++)
        if ((w & FIXED_WANT[i]) && buf_reserve(&c->fixed[i], widths[i] * rows) < 0) return -1;
    if ((w & WANT_KEY) && binary_reserve(&c->binary[B_KEY], rows, bytes) < 0) return -1;
    if ((w & WANT_VALUE) && binary_reserve(&c->binary[B_VALUE], rows, bytes) < 0) return -1;
    if ((w & WANT_TOPIC) && binary_reserve(&c->binary[B_TOPIC], rows, topic_len * rows) < 0) return -1;
    return 0;
}

/* KanalError(CORRUPT_MESSAGE, msg) raised; steals msg. */
static void raise_corrupt(PyObject *msg) {
    if (!msg) return;
    PyObject *err = PyObject_CallFunction(KanalError, "OO", CORRUPT_MESSAGE, msg);
    Py_DECREF(msg);
    if (err) {
        PyErr_SetObject(KanalError, err);
        Py_DECREF(err);
    }
}

static PyObject *Columns_add(Columns *c, PyObject *args) {
    Py_buffer records, topic;
    long long record_count, base_offset, first_ts, lo, hi, producer_id;
    int partition, producer_epoch, leader_epoch;
    if (!PyArg_ParseTuple(args, "y*LLLLLy*iLii", &records, &record_count, &base_offset, &first_ts, &lo, &hi,
                          &topic, &partition, &producer_id, &producer_epoch, &leader_epoch))
        return NULL;
    Mark m;
    mark(c, &m);
    Fail f = {NULL};
    int r = 0;
    long long seen = 0;
    /* Room for every row this batch can add, so the per-record writes need no checks: at most
     * record_count rows (a further record is an error below), keys and values at most the batch's bytes. */
    Py_ssize_t rows_max = record_count < 0 ? 0 : (Py_ssize_t)record_count;
    if (rows_max > records.len / 2 + 1) rows_max = records.len / 2 + 1; /* a record takes 2 bytes at least */
    if (reserve_rows(c, rows_max, records.len, topic.len) < 0) {
        PyBuffer_Release(&records);
        PyBuffer_Release(&topic);
        return NULL;
    }
    const uint8_t *p = records.buf, *end = p + records.len;
    while (p < end) {
        const uint8_t *s;
        Py_ssize_t n;
        if (seen == rows_max) {
            f.why = "more records than the batch's record_count";
            r = -1;
            break;
        }
        if (*p++ != 0x0a) {
            f.why = "the record list holds an unknown field";
            r = -1;
            break;
        }
        if (length_field(&p, end, &s, &n) < 0) {
            f.why = "a record overruns the record list";
            r = -1;
            break;
        }
        r = add_record(c, s, s + n, base_offset, first_ts, lo, hi, topic.buf, topic.len, partition, producer_id,
                       producer_epoch, leader_epoch, &f);
        if (r < 0) break;
        seen++;
    }
    PyBuffer_Release(&records);
    PyBuffer_Release(&topic);
    if (r == 0 && seen != record_count) {
        rewind_to(c, &m);
        raise_corrupt(PyUnicode_FromFormat("batch says %lld records but holds %lld", record_count, seen));
        return NULL;
    }
    if (r < 0) {
        rewind_to(c, &m);
        if (r == -1) raise_corrupt(PyUnicode_FromFormat("records do not walk: %s", f.why));
        return NULL;
    }
    return PyLong_FromSsize_t(c->rows - m.rows);
}

/* ---- handing the buffers over ---- */


/* take() -> (rows, {column: buffers}): fixed-width columns as bytes, binary ones as (validity or None,
 * offsets, data), headers as (list offsets, key buffers, value buffers); the columns start anew. */
static PyObject *Columns_take(Columns *c, PyObject *Py_UNUSED(ignored)) {
    PyObject *out = PyDict_New();
    if (!out) return NULL;
    for (int i = 0; i < N_FIXED; i++) {
        if (!(c->want & FIXED_WANT[i])) continue;
        PyObject *v = buf_take(&c->fixed[i]);
        if (!v || PyDict_SetItemString(out, FIXED_NAMES[i], v) < 0) goto fail_v;
        Py_DECREF(v);
        continue;
    fail_v:
        Py_XDECREF(v);
        Py_DECREF(out);
        return NULL;
    }
    for (int i = 0; i < 3; i++) {
        if (!(c->want & BINARY_WANT[i])) continue;
        PyObject *v = binary_tuple(&c->binary[i]);
        if (!v || PyDict_SetItemString(out, BINARY_NAMES[i], v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(v);
    }
    if (c->want & WANT_HEADERS) {
        PyObject *keys = binary_tuple(&c->binary[B_HEADER_KEY]);
        PyObject *values = keys ? binary_tuple(&c->binary[B_HEADER_VALUE]) : NULL;
        PyObject *v = values ? Py_BuildValue("(NNNn)", buf_take(&c->header_offsets), keys, values, c->headers)
                             : NULL;
        if (!v) {
            Py_XDECREF(keys);
            Py_DECREF(out);
            return NULL;
        }
        if (PyDict_SetItemString(out, "headers", v) < 0) {
            Py_DECREF(v);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(v);
    }
    Py_ssize_t rows = c->rows;
    free_buffers(c);
    if (start_buffers(c) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    return Py_BuildValue("(nN)", rows, out);
}

static PyObject *Columns_get_rows(Columns *c, void *Py_UNUSED(closure)) { return PyLong_FromSsize_t(c->rows); }

static PyObject *Columns_get_bytes(Columns *c, void *Py_UNUSED(closure)) {
    Py_ssize_t total = 0;
    for (int i = 0; i < N_FIXED; i++) total += c->fixed[i].len;
    for (int i = 0; i < N_BINARY; i++) total += c->binary[i].data.len + c->binary[i].offsets.len;
    return PyLong_FromSsize_t(total);
}

static int Columns_init(Columns *c, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"want", NULL};
    int want;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "i", kwlist, &want)) return -1;
    free_buffers(c);
    c->want = want;
    return start_buffers(c);
}

static void Columns_dealloc(Columns *c) {
    free_buffers(c);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

static PyMethodDef Columns_methods[] = {
    {"add", (PyCFunction)Columns_add, METH_VARARGS,
     "add(record_list, record_count, base_offset, first_timestamp_ms, lo, hi, topic, partition, producer_id, "
     "producer_epoch, leader_epoch) -> rows added (records with offsets in [lo, hi))"},
    {"take", (PyCFunction)Columns_take, METH_NOARGS, "take() -> (rows, {column: buffers}); starts anew"},
    {NULL},
};

static PyGetSetDef Columns_getset[] = {
    {"rows", (getter)Columns_get_rows, NULL, "rows held", NULL},
    {"bytes", (getter)Columns_get_bytes, NULL, "bytes held in the column buffers", NULL},
    {NULL},
};

static PyTypeObject ColumnsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kanal.spark._record_columns.Columns",
    .tp_basicsize = sizeof(Columns),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Arrow column buffers filled from RecordLists (module docstring)",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Columns_init,
    .tp_dealloc = (destructor)Columns_dealloc,
    .tp_methods = Columns_methods,
    .tp_getset = Columns_getset,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "kanal.spark._record_columns",
    "Records walked into Arrow column buffers (see spark/_record_columns.c).", -1, NULL,
};

PyMODINIT_FUNC PyInit__record_columns(void) {
    PyObject *errors = PyImport_ImportModule("kanal.v1.error");
    if (!errors) return NULL;
    KanalError = PyObject_GetAttrString(errors, "KanalError");
    PyObject *codes = KanalError ? PyObject_GetAttrString(errors, "ErrorCode") : NULL;
    Py_DECREF(errors);
    if (!codes) return NULL;
    CORRUPT_MESSAGE = PyObject_GetAttrString(codes, "CORRUPT_MESSAGE");
    Py_DECREF(codes);
    if (!CORRUPT_MESSAGE || PyType_Ready(&ColumnsType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&ColumnsType);
    if (PyModule_AddObject(m, "Columns", (PyObject *)&ColumnsType) < 0) {
        Py_DECREF(&ColumnsType);
        Py_DECREF(m);
        return NULL;
    }
#define WANT(name) PyModule_AddIntConstant(m, "WANT_" #name, WANT_##name)
    if (WANT(OFFSET) || WANT(TIMESTAMP) || WANT(KEY) || WANT(VALUE) || WANT(HEADERS) || WANT(VALUE_BYTES) ||
        WANT(TOPIC) || WANT(PARTITION) || WANT(PRODUCER_ID) || WANT(PRODUCER_EPOCH) || WANT(LEADER_EPOCH) ||
        WANT(BATCH_OFFSET)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
