/* What the two halves of kanal.clients._producer_fast share (one extension module, two files):
 *   _producer_records.c  the per-batch objects: RecordList (one batch's encoded records), BufferMemory,
 *                        RecordFuture, murmur3 and the varint encoding;
 *   _producer_fast.c     the Appender (produce() and produce_many()) and the module's init.
 * Both are compiled into one shared object, so these names are hidden from other modules. */
#ifndef KANAL_PRODUCER_RECORDS_H
#define KANAL_PRODUCER_RECORDS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

#define KANAL_HIDDEN __attribute__((visibility("hidden")))

#define RECORD_OVERHEAD_BYTES 16 /* producer.py's _RECORD_OVERHEAD_BYTES: the charge per record */

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

typedef struct {
    PyObject_HEAD
    long long buffered_bytes;
} BufferMemory;

KANAL_HIDDEN extern PyTypeObject RecordListType, BufferMemoryType, RecordFutureType;

/* Readies the three types and the names and error objects they use. 0, or -1 with an exception set. */
KANAL_HIDDEN int producer_records_ready(void);

/* MurmurHash3 x86_32 of data, as mmh3.hash(data, seed, signed=False). */
KANAL_HIDDEN uint32_t murmur3_32(const unsigned char *data, Py_ssize_t len, uint32_t seed);

/* Appends one record (vlen / klen -1 for None; tail: its encoded headers); returns its index (offset
 * delta), or -1 with an exception set and nothing changed. */
KANAL_HIDDEN Py_ssize_t records_append(RecordList *self, const char *value, Py_ssize_t vlen, const char *key,
                                       Py_ssize_t klen, long long ts, const char *tail, Py_ssize_t tlen);

/* A RecordFuture for record index of batch (takes a new reference to batch). */
KANAL_HIDDEN PyObject *future_new(PyObject *batch, Py_ssize_t index);

/* Raises KanalError(UNKNOWN_SERVER_ERROR, message); returns NULL. */
KANAL_HIDDEN PyObject *kanal_error(const char *message);

#endif
