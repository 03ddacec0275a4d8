/* Arrow column buffers grown in C, and the protobuf wire reads both C column walks use
 * (spark/_record_columns.c: partition log records; spark/_metadata_columns.c: metadata records).
 *
 * A Buf is a growing buffer held in a bytes object, handed to Arrow without a copy (pa.py_buffer); a
 * Binary is a variable-width column (int32 end offsets starting with 0, data bytes, one validity byte per
 * row, packed into Arrow's bitmap when handed over). Every wire read is checked against the end of its
 * buffer. Included by one .c file per extension module: everything here is static.
 */
#ifndef KANAL_ARROW_BUFFERS_H
#define KANAL_ARROW_BUFFERS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

/* A binary column's bytes above this would overflow Arrow's int32 offsets. */
#define BINARY_BYTES_MAX ((Py_ssize_t)INT32_MAX)

/* A growing buffer held in a bytes object, so take() hands it to Arrow without a copy. */
typedef struct {
    PyObject *obj;
    char *data;
    Py_ssize_t len, cap, hint; /* hint: the size the last take() handed over, the next first allocation */
} Buf;

static inline int buf_reserve(Buf *b, Py_ssize_t more) {
    if (b->len + more <= b->cap) return 0;
    Py_ssize_t cap = b->cap ? b->cap : (b->hint > 4096 ? b->hint : 4096);
    while (cap < b->len + more) cap *= 2;
    if (!b->obj) {
        b->obj = PyBytes_FromStringAndSize(NULL, cap);
        if (!b->obj) return -1;
    } else if (_PyBytes_Resize(&b->obj, cap) < 0) {
        b->obj = NULL;
        b->data = NULL;
        b->len = b->cap = 0;
        return -1;
    }
    b->data = PyBytes_AS_STRING(b->obj);
    b->cap = cap;
    return 0;
}

/* The bytes written so far, as a bytes object the caller owns; the buffer starts empty. */
static inline PyObject *buf_take(Buf *b) {
    if (!b->obj && buf_reserve(b, 1) < 0) return NULL;
    PyObject *out = b->obj;
    if (_PyBytes_Resize(&out, b->len) < 0) out = NULL;
    b->hint = b->len;
    b->obj = NULL;
    b->data = NULL;
    b->len = b->cap = 0;
    return out;
}

static inline void buf_free(Buf *b) {
    Py_CLEAR(b->obj);
    b->data = NULL;
    b->len = b->cap = 0;
}

static inline int buf_put(Buf *b, const void *src, Py_ssize_t n) {
    if (buf_reserve(b, n) < 0) return -1;
    memcpy(b->data + b->len, src, n);
    b->len += n;
    return 0;
}

static inline int put_i32(Buf *b, int32_t v) { return buf_put(b, &v, 4); }
static inline int put_u8(Buf *b, uint8_t v) { return buf_put(b, &v, 1); }

/* Unchecked writes, for room reserved before a batch's walk (reserve_rows). */
static inline void raw(Buf *b, const void *src, Py_ssize_t n) {
    memcpy(b->data + b->len, src, n);
    b->len += n;
}
static inline void raw_i64(Buf *b, int64_t v) { raw(b, &v, 8); }
static inline void raw_i32(Buf *b, int32_t v) { raw(b, &v, 4); }

/* A variable-width column: int32 end offsets, data bytes, one validity byte per row. */
typedef struct {
    Buf offsets, data, valid;
} Binary;

static inline int binary_init(Binary *c) { return put_i32(&c->offsets, 0); }

/* Checked append (header columns, whose sizes are not known before the walk). */
static inline int binary_put(Binary *c, const uint8_t *p, Py_ssize_t n, int present) {
    if (present && c->data.len + n > BINARY_BYTES_MAX) {
        PyErr_SetString(PyExc_OverflowError, "more than 2 GiB in one binary column: flush more often");
        return -1;
    }
    if (present && buf_put(&c->data, p, n) < 0) return -1;
    if (put_u8(&c->valid, (uint8_t)present) < 0) return -1;
    return put_i32(&c->offsets, (int32_t)c->data.len);
}

/* Unchecked append into room reserved for it. */
static inline void binary_raw(Binary *c, const uint8_t *p, Py_ssize_t n, int present) {
    if (present) raw(&c->data, p, n);
    c->valid.data[c->valid.len++] = (char)present;
    raw_i32(&c->offsets, (int32_t)c->data.len);
}

static inline int binary_reserve(Binary *c, Py_ssize_t rows, Py_ssize_t bytes) {
    if (c->data.len + bytes > BINARY_BYTES_MAX) {
        PyErr_SetString(PyExc_OverflowError, "more than 2 GiB in one binary column: flush more often");
        return -1;
    }
    return buf_reserve(&c->offsets, 4 * rows) < 0 || buf_reserve(&c->valid, rows) < 0 ||
                   buf_reserve(&c->data, bytes) < 0
               ? -1
               : 0;
}


typedef struct {
    const char *why;
} Fail;

static inline int varint(const uint8_t **pp, const uint8_t *end, uint64_t *out) {
    const uint8_t *p = *pp;
    uint64_t v = 0;
    for (int i = 0; i < 10; i++) {
        if (p >= end) return -1;
        uint8_t b = *p++;
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (b < 0x80) {
            *out = v;
            *pp = p;
            return 0;
        }
    }
    return -1;
}

static inline int length_field(const uint8_t **pp, const uint8_t *end, const uint8_t **start, Py_ssize_t *len) {
    uint64_t n;
    if (varint(pp, end, &n) < 0 || n > (uint64_t)(end - *pp)) return -1;
    *start = *pp;
    *len = (Py_ssize_t)n;
    *pp += n;
    return 0;
}

/* UTF-8 as protobuf's string rule wants it (no surrogates, no overlong forms, at most U+10FFFF). */
static inline int valid_utf8(const uint8_t *p, Py_ssize_t n) {
    const uint8_t *end = p + n;
    while (p < end) {
        uint8_t b = *p;
        if (b < 0x80) {
            p++;
            continue;
        }
        int more;
        uint32_t cp;
        if ((b & 0xe0) == 0xc0) more = 1, cp = b & 0x1f;
        else if ((b & 0xf0) == 0xe0) more = 2, cp = b & 0x0f;
        else if ((b & 0xf8) == 0xf0) more = 3, cp = b & 0x07;
        else return 0;
        if (end - p <= more) return 0;
        for (int i = 1; i <= more; i++) {
            if ((p[i] & 0xc0) != 0x80) return 0;
            cp = (cp << 6) | (p[i] & 0x3f);
        }
        if ((more == 1 && cp < 0x80) || (more == 2 && cp < 0x800) || (more == 3 && cp < 0x10000) ||
            cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        p += more + 1;
    }
    return 1;
}

/* Arrow's validity bitmap from one byte per row; None when every row is valid. */
static inline PyObject *bitmap_of(const Buf *valid) {
    Py_ssize_t n = valid->len, nulls = 0;
    for (Py_ssize_t i = 0; i < n; i++) nulls += !valid->data[i];
    if (!nulls) Py_RETURN_NONE;
    PyObject *out = PyBytes_FromStringAndSize(NULL, (n + 7) / 8);
    if (!out) return NULL;
    uint8_t *bits = (uint8_t *)PyBytes_AS_STRING(out);
    memset(bits, 0, (n + 7) / 8);
    for (Py_ssize_t i = 0; i < n; i++)
        if (valid->data[i]) bits[i >> 3] |= (uint8_t)(1 << (i & 7));
    return out;
}

static inline PyObject *binary_tuple(Binary *b) {
    PyObject *bitmap = bitmap_of(&b->valid);
    if (!bitmap) return NULL;
    return Py_BuildValue("(NNN)", bitmap, buf_take(&b->offsets), buf_take(&b->data));
}


#endif
