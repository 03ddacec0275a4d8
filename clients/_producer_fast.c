/* kanal.clients._producer_fast: the per-record hot path of Producer.produce(), in C. Two files make the
 * module: this one (the Appender and the module's init) and _producer_records.c (RecordList, BufferMemory,
 * RecordFuture, murmur3 and the record encoding); _producer_records.h is what they share.
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
#include "_producer_records.h"

#include <structmember.h>

#include <string.h>
#include <time.h>

static PyObject *str_records, *str_callbacks;
static PyObject *kw_names[7];           /* produce()'s parameter names, interned */

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

/* A produce_many call as checked before the lock is taken. */
typedef struct {
    PyObject *topic, *on_delivery;  /* borrowed from the call's arguments */
    PyObject **vitems, **kitems;    /* the values and keys (kitems NULL without keys) */
    Py_ssize_t n;
    long count;                     /* the topic's partition count */
    long fixed;                     /* the explicit partition, or -1 */
    long long ts;                   /* one timestamp for every record, as the Python produce_many */
    long long total;                /* bytes charged against buffer memory for the whole call */
    int needs_sticky;               /* some record goes to the topic's sticky partition */
} ManyCall;

/* Checks the call and every record before anything is appended. Returns 1 for the common case (c filled
 * in), 0 for a call Python's produce_many does itself, -1 with an exception set. */
static int many_check(Appender *self, PyObject *args, ManyCall *c) {
    PyObject *values, *keys, *partition, *timestamp;
    if (!PyArg_ParseTuple(args, "OOOOOO:produce_many", &c->topic, &values, &keys, &partition, &timestamp,
                          &c->on_delivery))
        return -1;
    if (self->closed) return 0;
    if (!PyList_CheckExact(values) && !PyTuple_CheckExact(values)) return 0;
    if (keys != Py_None && !PyList_CheckExact(keys) && !PyTuple_CheckExact(keys)) return 0;
    if (c->on_delivery != Py_None && !PyCallable_Check(c->on_delivery)) return 0;
    c->n = PySequence_Fast_GET_SIZE(values);
    if (keys != Py_None && PySequence_Fast_GET_SIZE(keys) != c->n) return 0;
    if (c->n > (Py_ssize_t)UINT32_MAX) return 0;  /* owners and indexes are uint32 */
    c->vitems = PySequence_Fast_ITEMS(values);
    c->kitems = keys == Py_None ? NULL : PySequence_Fast_ITEMS(keys);

    PyObject *count_obj = PyDict_GetItemWithError(self->partition_counts, c->topic);  /* borrowed */
    if (count_obj == NULL) return PyErr_Occurred() ? -1 : 0;  /* a topic not seen yet: Python asks */
    if (!PyLong_CheckExact(count_obj)) return 0;
    c->count = PyLong_AsLong(count_obj);
    if (c->count <= 0 || c->count > INT32_MAX) { PyErr_Clear(); return 0; }
    c->fixed = -1;
    if (partition != Py_None) {
        int overflow;
        if (!PyLong_CheckExact(partition)) return 0;
        c->fixed = PyLong_AsLongAndOverflow(partition, &overflow);
        if (overflow || c->fixed < 0 || c->fixed >= c->count) return 0;  /* Python raises the error */
    }
    if (timestamp == Py_None) {
        c->ts = now_ms();
    } else {
        int overflow;
        if (!PyLong_CheckExact(timestamp)) return 0;
        c->ts = PyLong_AsLongLongAndOverflow(timestamp, &overflow);
        if (overflow || c->ts < 0) return 0;
    }
    c->total = 0;
    c->needs_sticky = 0;
    for (Py_ssize_t i = 0; i < c->n; i++) {
        const char *d;
        Py_ssize_t vlen, klen = -1;
        if (!bytes_item(c->vitems[i], &d, &vlen)) return 0;
        if (c->kitems != NULL && !bytes_item(c->kitems[i], &d, &klen)) return 0;
        long long size = RECORD_OVERHEAD_BYTES + (vlen > 0 ? vlen : 0) + (klen > 0 ? klen : 0);
        if (size > self->record_bytes_max) return 0;
        c->total += size;
        if (klen < 0) c->needs_sticky = 1;
    }
    if (c->total > self->buffer_memory_bytes) return 0;
    if (c->needs_sticky && c->fixed < 0 && PyDict_GetItemWithError(self->sticky, c->topic) == NULL)
        return PyErr_Occurred() ? -1 : 0;  /* the topic's first sticky partition is drawn in Python */
    return 1;
}

/* Where a produce_many call has got to: its result so far, and the batch it last appended to. */
typedef struct {
    PyObject *result;          /* (batches, owners, indexes), see Appender_produce_many */
    PyObject *batches;         /* borrowed from result */
    PyObject *numbers;         /* batch -> its place in batches */
    uint32_t *owners, *indexes;
    long part;                 /* the partition last appended to, -1 before the first */
    long sticky_part;          /* the sticky partition as last read, -1 when it must be read again */
    PyObject *tp, *batch;      /* (topic, part) and its open batch: new references */
    RecordList *records;       /* that batch's records: a new reference */
    uint32_t owner;            /* that batch's place in batches */
} ManyState;

static int many_state_init(ManyState *s, Py_ssize_t n) {
    memset(s, 0, sizeof *s);
    s->part = s->sticky_part = -1;
    PyObject *batches = PyList_New(0);
    PyObject *owners = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(uint32_t));
    PyObject *indexes = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(uint32_t));
    s->numbers = PyDict_New();
    s->result = batches && owners && indexes && s->numbers ? PyTuple_Pack(3, batches, owners, indexes) : NULL;
    Py_XDECREF(batches);  /* the tuple holds them from here on */
    Py_XDECREF(owners);
    Py_XDECREF(indexes);
    if (s->result == NULL) { Py_CLEAR(s->numbers); return -1; }
    s->batches = batches;
    s->owners = (uint32_t *)PyBytes_AS_STRING(owners);
    s->indexes = (uint32_t *)PyBytes_AS_STRING(indexes);
    return 0;
}

/* Drops what the state holds. Call it after the lock is released: freeing a batch may run Python code. */
static void many_state_clear(ManyState *s) {
    Py_CLEAR(s->tp);
    Py_CLEAR(s->records);
    Py_CLEAR(s->batch);
    Py_CLEAR(s->numbers);
    Py_CLEAR(s->result);
}

/* Under the lock: waits (releasing the lock meanwhile, as a Condition does) until the whole call fits in
 * buffer memory; wait_for_space raises REQUEST_TIMED_OUT when it does not in time. */
static int many_wait_for_room(Appender *self, const ManyCall *c) {
    if (self->memory->buffered_bytes + c->total <= self->buffer_memory_bytes) return 0;
    PyObject *size = PyLong_FromLongLong(c->total);
    PyObject *r = size ? PyObject_CallOneArg(self->wait_for_space, size) : NULL;
    Py_XDECREF(size);
    if (r == NULL) return -1;
    Py_DECREF(r);
    /* The wait released the lock: check the sticky partition again (it is only ever replaced). */
    if (c->needs_sticky && c->fixed < 0 && PyDict_GetItemWithError(self->sticky, c->topic) == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "the sticky partition was removed");
        return -1;
    }
    return 0;
}

/* The partition of a record (key: klen bytes, klen -1 for none); sets *is_sticky when the sticky
 * partitioner chose it. -1 with an exception set. */
static long many_partition(Appender *self, const ManyCall *c, ManyState *s, const char *key, Py_ssize_t klen,
                           int *is_sticky) {
    *is_sticky = 0;
    if (c->fixed >= 0) return c->fixed;
    if (klen >= 0) return (long)(murmur3_32((const unsigned char *)key, klen, 0) % (uint32_t)c->count);
    if (s->sticky_part < 0) {  /* read once, and again after this call moves it on */
        PyObject *p = PyDict_GetItemWithError(self->sticky, c->topic);  /* checked present before */
        int overflow = 0;
        s->sticky_part = p == NULL ? -1 : PyLong_AsLongAndOverflow(p, &overflow);
        if (p == NULL || overflow || s->sticky_part < 0 || s->sticky_part >= c->count) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "the sticky partition is not valid");
            s->sticky_part = -1;
            return -1;
        }
    }
    *is_sticky = 1;
    return s->sticky_part;
}

/* Under the lock: makes part's open batch the one appended to (opening one through the accumulator when
 * the partition has none), numbering it in the result's batches the first time it is seen. */
static int many_use_batch(Appender *self, const ManyCall *c, ManyState *s, long part) {
    Py_CLEAR(s->tp);
    Py_CLEAR(s->batch);
    Py_CLEAR(s->records);
    s->part = part;
    s->tp = Py_BuildValue("(Ol)", c->topic, part);
    if (s->tp == NULL) return -1;
    s->batch = Py_XNewRef(PyDict_GetItemWithError(self->open_batches, s->tp));
    if (s->batch == NULL) {
        if (PyErr_Occurred()) return -1;
        s->batch = PyObject_CallOneArg(self->open_batch, s->tp);
        if (s->batch == NULL) return -1;
    }
    s->records = (RecordList *)PyObject_GetAttr(s->batch, str_records);
    if (s->records == NULL) return -1;
    if (!Py_IS_TYPE(s->records, &RecordListType)) {
        PyErr_SetString(PyExc_TypeError, "the batch's records are not a native RecordList");
        return -1;
    }
    PyObject *number = PyDict_GetItemWithError(s->numbers, s->batch);
    if (number != NULL) {
        s->owner = (uint32_t)PyLong_AsUnsignedLong(number);
        return 0;
    }
    if (PyErr_Occurred()) return -1;
    s->owner = (uint32_t)PyList_GET_SIZE(s->batches);
    number = PyLong_FromUnsignedLong(s->owner);
    int failed = number == NULL || PyDict_SetItem(s->numbers, s->batch, number) < 0 ||
                 PyList_Append(s->batches, s->batch) < 0;
    Py_XDECREF(number);
    return failed ? -1 : 0;
}

/* Under the lock: seals the current batch, which reached batch_size_bytes; the next record of its
 * partition opens a new one. The sticky partitioner moves on once its batch is full. */
static int many_seal(Appender *self, const ManyCall *c, ManyState *s, int is_sticky) {
    PyObject *r = PyObject_CallFunctionObjArgs(self->seal_full, s->tp, s->batch, NULL);
    if (r == NULL) return -1;
    Py_DECREF(r);
    Py_CLEAR(s->batch);
    if (!is_sticky) return 0;
    PyObject *n = PyLong_FromLong(c->count);
    PyObject *next = n ? PyObject_CallOneArg(self->randrange, n) : NULL;
    int failed = next == NULL || PyDict_SetItem(self->sticky, c->topic, next) < 0;
    Py_XDECREF(next);
    Py_XDECREF(n);
    s->sticky_part = -1;
    return failed ? -1 : 0;
}

/* Under the lock: appends record i of the call. */
static int many_append(Appender *self, const ManyCall *c, ManyState *s, Py_ssize_t i) {
    const char *value = NULL, *key = NULL;
    Py_ssize_t vlen = -1, klen = -1;
    (void)bytes_item(c->vitems[i], &value, &vlen);  /* checked by many_check: bytes or None */
    if (c->kitems != NULL) (void)bytes_item(c->kitems[i], &key, &klen);
    int is_sticky;
    long part = many_partition(self, c, s, key, klen, &is_sticky);
    if (part < 0) return -1;
    if ((part != s->part || s->batch == NULL) && many_use_batch(self, c, s, part) < 0) return -1;
    long long size = RECORD_OVERHEAD_BYTES + (vlen > 0 ? vlen : 0) + (klen > 0 ? klen : 0);
    Py_ssize_t index = append_record(self, s->batch, s->records, value, vlen, key, klen, c->ts, c->on_delivery,
                                     size);
    if (index < 0) return -1;
    s->owners[i] = s->owner;
    s->indexes[i] = (uint32_t)index;
    return s->records->size_bytes >= self->batch_size_bytes ? many_seal(self, c, s, is_sticky) : 0;
}

/* Producer.produce_many() for the common case: lists or tuples of bytes/None, a known topic, an
 * explicit partition in range or the built-in partitioners, no record over record_bytes_max and the
 * whole call fitting in buffer memory. Every record is checked before the lock is taken (many_check);
 * then all are appended under one hold of the lock, as the Python produce_many does (one timestamp, the
 * sticky partition moving on when its batch seals, batches opened through the accumulator's
 * open_batch). A full buffer is waited on here, through the accumulator's wait_for_space (it may raise
 * REQUEST_TIMED_OUT, with nothing appended).
 *
 * Returns (batches, owners, indexes): record i is record indexes[i] of batches[owners[i]], both bytes of
 * native-endian uint32 (Python wraps them in a RecordFutures; no object is made per record). Returns
 * None for anything else, which Python's produce_many then does itself, raising its errors. An error
 * after the lock is taken (only MemoryError and broken state) leaves the records appended so far queued. */
static PyObject *Appender_produce_many(Appender *self, PyObject *args) {
    ManyCall c;
    int common = many_check(self, args, &c);
    if (common <= 0) {
        if (common < 0) return NULL;
        self->fallback_calls++;
        Py_RETURN_NONE;
    }
    ManyState s;
    if (many_state_init(&s, c.n) < 0) return NULL;
    PyObject *r = PyObject_CallNoArgs(self->acquire);
    if (r == NULL) { many_state_clear(&s); return NULL; }
    Py_DECREF(r);
    /* ---- under the accumulator's lock ---- */
    int failed = many_wait_for_room(self, &c) < 0;
    for (Py_ssize_t i = 0; i < c.n && !failed; i++) failed = many_append(self, &c, &s, i) < 0;
    if (failed) {
        unlock_on_error(self);
        many_state_clear(&s);
        return NULL;
    }
    failed = unlock(self) < 0;
    /* ---- lock released ---- */
    PyObject *result = failed ? NULL : Py_NewRef(s.result);
    many_state_clear(&s);
    if (result != NULL) self->fast_calls += (unsigned long long)c.n;
    return result;
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

static PyObject *py_murmur3_32(PyObject *mod, PyObject *args) {
    Py_buffer data;
    unsigned long seed = 0;
    if (!PyArg_ParseTuple(args, "y*|k:murmur3_32", &data, &seed)) return NULL;
    uint32_t h = murmur3_32(data.buf, data.len, (uint32_t)seed);
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(h);
}

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
        (str_callbacks = PyUnicode_InternFromString("callbacks")) == NULL)
        return NULL;
    if (producer_records_ready() < 0 || PyType_Ready(&AppenderType) < 0) return NULL;
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
