/* kanal.spark._metadata_columns: metadata-log records walked straight into Arrow column buffers, in C.
 *
 * Optional, like _record_columns: kanal.spark.metadata_columns uses it when built; without it (and for any
 * batch it declines) the rows come from metadata_rows.add_metadata_entry (protobuf and
 * metadata_json.message_json). Both must give the same rows: tests/spark/test_metadata_columns.py.
 *
 *   MetadataColumns(plans, kinds, slot_kinds)
 *   add(record_list, record_count, base_offset, lo, hi, leader_epoch) -> rows added, or None
 *   take() -> (rows, [buffers per column])
 *
 * add() walks one decompressed RecordList (records.proto, as _record_columns.c: one-byte tags) and parses
 * each record's value as a MetadataRecord. It only accepts what it can render exactly as the Python path
 * does: the canonical encoding protobuf's serializer writes (fields in increasing number, each once except
 * repeated ones, packed repeated scalars, no implicit-presence field holding its default, no unknown
 * field), valid UTF-8 in strings, known enum values where a name is wanted. On anything else it returns
 * None with the columns unchanged, and the caller reads that batch with the Python path, which parses it
 * with protobuf (and reports it as not decodable when it is not). So nothing here decides what is corrupt.
 *
 * The JSON of a record's body follows `plans` (made by metadata_columns.py from the descriptors): per
 * message type, per field number, the field's type, key text ("\"name\": "), labels and, for enums, the
 * names by number. The text is json_format.MessageToJson(body, indent=None,
 * preserving_proto_field_name=True)'s: fields by number, ", " and ": " separators, int64 as strings,
 * bytes as base64, strings escaped as json.dumps(ensure_ascii=True) escapes them, doubles as repr().
 * A field marked hidden is checked but not written (a SCRAM credential's salt and keys).
 *
 * `kinds`: per oneof field number of MetadataRecord, (kind name, body plan index, typed specs); a typed
 * spec fills one typed column (slot) from a field of the body (conversions below, V_*).
 *
 * Columns, in order: offset, batch_offset, controller_epoch, time (int64; time in microseconds),
 * record_type, principal, request_id, record, record_json (strings/binary), then one per slot
 * (slot_kinds: int32, int64, bool, string, list<int32>). take() gives each as (validity bitmap or None,
 * buffer, buffer or None): fixed width (data, None); bool (bit-packed values, None); string and binary
 * (offsets, data); list (offsets, int32 values).
 */
#include "_arrow_buffers.h"

enum { T_INT32 = 1, T_INT64, T_BOOL, T_ENUM, T_STRING, T_BYTES, T_MESSAGE, T_DOUBLE };
enum { K_I64 = 1, K_I32, K_BOOL, K_STR, K_LIST };
enum { V_INT = 1, V_BOOL, V_STR, V_NAME, V_TOPIC_IF, V_DOUBLE_REPR, V_LIST, V_MSG_LIST };

#define FIELDS_MAX 32 /* field numbers of a body message, 1..31 */
#define KINDS_MAX 64  /* oneof field numbers of MetadataRecord */
#define NAMES_MAX 64  /* enum numbers named, 0..63 */
#define SPECS_MAX 16
#define DEPTH_MAX 16
#define TIME_MS_MAX (INT64_MAX / 1000)
#define FIXED_COLS 4
#define TEXT_COLS 5
#define SLOTS_MAX 24
#define COLS_MAX (FIXED_COLS + TEXT_COLS + SLOTS_MAX)
enum { C_OFFSET, C_BATCH_OFFSET, C_EPOCH, C_TIME, C_KIND, C_PRINCIPAL, C_REQUEST_ID, C_RECORD, C_JSON };

typedef struct {
    const char *p;
    Py_ssize_t n;
} Text;

typedef struct {
    int type, repeated, presence, hidden, nested;
    Text key;
    Text names[NAMES_MAX]; /* enums: JSON text of each known number (p NULL: not a known number) */
} FieldPlan;

typedef struct {
    int ok;
    FieldPlan fields[FIELDS_MAX];
} MessagePlan;

typedef struct {
    int slot, conv, field, optional, aux_field;
    long long aux_value;
    Text names[NAMES_MAX];
    Text fallback; /* V_NAME: the text for an unnamed number (p NULL: decline the batch) */
} Spec;

typedef struct {
    int known, plan, nspecs;
    Text name;
    Spec specs[SPECS_MAX];
} Kind;

typedef struct {
    int kind;
    Buf a, b, c; /* fixed: a data, c validity; text/list: a offsets, b data/values, c validity */
} Column;

typedef struct {
    PyObject_HEAD
    PyObject *keep; /* the plan objects whose bytes the Text pointers point into */
    MessagePlan *plans;
    int nplans;
    Kind kinds[KINDS_MAX];
    int ncols;
    Column cols[COLS_MAX];
    Py_ssize_t rows;
} MC;

/* What one body's walk saw of each field (its last occurrence). */
typedef struct {
    int present;
    uint64_t v;
    const uint8_t *p;
    Py_ssize_t n;
} Seen;

#define DECLINE (-1)
#define PYERR (-2)
#define TRY(x)                                                                                             \
    do {                                                                                                   \
        int r_ = (x);                                                                                      \
        if (r_ < 0) return r_;                                                                             \
    } while (0)

static inline int put(Buf *b, const char *s, Py_ssize_t n) { return n && buf_put(b, s, n) < 0 ? PYERR : 0; }
#define PUTS(b, lit) put((b), (lit), (Py_ssize_t)sizeof(lit) - 1)

static int put_decimal(Buf *b, long long v) {
    char tmp[24];
    int n = snprintf(tmp, sizeof tmp, "%lld", v);
    return put(b, tmp, n);
}

/* A string as json.dumps(ensure_ascii=True) writes it, quotes included; DECLINE when not valid UTF-8. */
static int put_json_string(Buf *b, const uint8_t *p, Py_ssize_t n) {
    static const char hex[] = "0123456789abcdef";
    if (!valid_utf8(p, n)) return DECLINE;
    TRY(PUTS(b, "\""));
    const uint8_t *end = p + n;
    while (p < end) {
        uint32_t c = *p;
        if (c < 0x80) {
            const uint8_t *run = p;
            while (p < end && *p >= 0x20 && *p <= 0x7e && *p != '"' && *p != '\\') p++;
            if (p > run) { /* printable ASCII is written as it is, a run at a time */
                TRY(put(b, (const char *)run, p - run));
                continue;
            }
            p++;
            const char *esc = NULL;
            switch (c) {
            case '"': esc = "\\\""; break;
            case '\\': esc = "\\\\"; break;
            case '\b': esc = "\\b"; break;
            case '\f': esc = "\\f"; break;
            case '\n': esc = "\\n"; break;
            case '\r': esc = "\\r"; break;
            case '\t': esc = "\\t"; break;
            }
            if (esc) {
                TRY(put(b, esc, 2));
                continue;
            }
        } else {
            int more = (c & 0xe0) == 0xc0 ? 1 : (c & 0xf0) == 0xe0 ? 2 : 3;
            c &= more == 1 ? 0x1f : more == 2 ? 0x0f : 0x07;
            for (int i = 1; i <= more; i++) c = (c << 6) | (p[i] & 0x3f);
            p += more + 1;
        }
        uint32_t units[2] = {c, 0};
        int nunits = 1;
        if (c >= 0x10000) {
            c -= 0x10000;
            units[0] = 0xd800 | (c >> 10);
            units[1] = 0xdc00 | (c & 0x3ff);
            nunits = 2;
        }
        for (int i = 0; i < nunits; i++) {
            char u[6] = {'\\', 'u', hex[(units[i] >> 12) & 15], hex[(units[i] >> 8) & 15], hex[(units[i] >> 4) & 15],
                         hex[units[i] & 15]};
            TRY(put(b, u, 6));
        }
    }
    return PUTS(b, "\"");
}

static int put_base64(Buf *b, const uint8_t *p, Py_ssize_t n) {
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    TRY(PUTS(b, "\""));
    if (buf_reserve(b, (n + 2) / 3 * 4) < 0) return PYERR;
    char *o = b->data + b->len;
    Py_ssize_t i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        *o++ = abc[v >> 18], *o++ = abc[(v >> 12) & 63], *o++ = abc[(v >> 6) & 63], *o++ = abc[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)p[i] << 16;
        *o++ = abc[v >> 18], *o++ = abc[(v >> 12) & 63], *o++ = '=', *o++ = '=';
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8;
        *o++ = abc[v >> 18], *o++ = abc[(v >> 12) & 63], *o++ = abc[(v >> 6) & 63], *o++ = '=';
    }
    b->len = o - b->data;
    return PUTS(b, "\"");
}

/* repr(float), as Python writes it. */
static int put_repr(Buf *b, double d) {
    char *s = PyOS_double_to_string(d, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    if (!s) return PYERR;
    int r = put(b, s, (Py_ssize_t)strlen(s));
    PyMem_Free(s);
    return r;
}

static int is_varint_type(int t) { return t == T_INT32 || t == T_INT64 || t == T_BOOL || t == T_ENUM; }

/* One varint-typed value as JSON. */
static int put_varint_value(Buf *b, const FieldPlan *f, uint64_t v) {
    switch (f->type) {
    case T_INT32: return put_decimal(b, (int32_t)v);
    case T_INT64: {
        TRY(PUTS(b, "\""));
        TRY(put_decimal(b, (long long)(int64_t)v));
        return PUTS(b, "\"");
    }
    case T_BOOL: return v ? PUTS(b, "true") : PUTS(b, "false");
    default: { /* T_ENUM: the name of a known number, else the number (open enums) */
        int32_t e = (int32_t)v;
        if (e >= 0 && e < NAMES_MAX && f->names[e].p) return put(b, f->names[e].p, f->names[e].n);
        return put_decimal(b, e);
    }
    }
}

static int json_message(MC *mc, int type, const uint8_t *p, const uint8_t *end, Buf *out, Seen *seen, int depth);

/* A singular field's value; DECLINE for an implicit-presence field holding its default (never written by
 * protobuf's serializer, and not listed by ListFields). */
static int put_single(MC *mc, const FieldPlan *f, int wt, const uint8_t **pp, const uint8_t *end, Buf *out,
                      int emit, Seen *s, int depth) {
    uint64_t v = 0;
    const uint8_t *sp = NULL;
    Py_ssize_t sn = 0;
    if (is_varint_type(f->type)) {
        if (wt != 0 || varint(pp, end, &v) < 0) return DECLINE;
        if (!f->presence && (f->type == T_INT32 || f->type == T_ENUM ? (int32_t)v == 0 : v == 0)) return DECLINE;
    } else if (f->type == T_DOUBLE) {
        if (wt != 1 || end - *pp < 8) return DECLINE;
        memcpy(&v, *pp, 8);
        *pp += 8;
    } else {
        if (wt != 2 || length_field(pp, end, &sp, &sn) < 0) return DECLINE;
        if (!f->presence && f->type != T_MESSAGE && sn == 0) return DECLINE;
    }
    s->present = 1, s->v = v, s->p = sp, s->n = sn;
    double d;
    switch (f->type) {
    case T_STRING:
        if (!emit) return valid_utf8(sp, sn) ? 0 : DECLINE;
        return put_json_string(out, sp, sn);
    case T_BYTES: return emit ? put_base64(out, sp, sn) : 0;
    case T_MESSAGE: return json_message(mc, f->nested, sp, sp + sn, emit ? out : NULL, NULL, depth + 1);
    case T_DOUBLE:
        memcpy(&d, &v, 8);
        if (!f->presence && d == 0.0) return DECLINE;
        if (!emit) return 0;
        if (isinf(d)) return d < 0 ? PUTS(out, "\"-Infinity\"") : PUTS(out, "\"Infinity\"");
        if (isnan(d)) return PUTS(out, "\"NaN\"");
        return put_repr(out, d);
    default: return emit ? put_varint_value(out, f, v) : 0;
    }
}

/* The JSON object of one message (out NULL: only checked); `seen` (FIELDS_MAX entries, or NULL) gets each
 * field. */
static int json_message(MC *mc, int type, const uint8_t *p, const uint8_t *end, Buf *out, Seen *seen, int depth) {
    if (depth > DEPTH_MAX || type < 0 || type >= mc->nplans || !mc->plans[type].ok) return DECLINE;
    const MessagePlan *mp = &mc->plans[type];
    Seen dummy; /* where a nested message's fields go: only the body's are read afterwards */
    if (seen) memset(seen, 0, sizeof(Seen) * FIELDS_MAX);
    if (out) TRY(PUTS(out, "{"));
    int written = 0, last = 0, list_open = 0;
    while (p < end) {
        uint64_t tag;
        if (varint(&p, end, &tag) < 0) return DECLINE;
        uint64_t num = tag >> 3;
        int wt = (int)(tag & 7);
        if (num == 0 || num >= FIELDS_MAX || !mp->fields[num].type) return DECLINE;
        const FieldPlan *f = &mp->fields[num];
        int per_occurrence = f->repeated && !is_varint_type(f->type); /* strings, bytes, messages */
        if ((int)num < last || ((int)num == last && !per_occurrence)) return DECLINE;
        int emit = out && !f->hidden;
        if (list_open && (int)num != last) {
            TRY(PUTS(out, "]"));
            list_open = 0;
        }
        if (per_occurrence) {
            if (emit) {
                if ((int)num == last) {
                    TRY(PUTS(out, ", "));
                } else {
                    if (written++) TRY(PUTS(out, ", "));
                    TRY(put(out, f->key.p, f->key.n));
                    TRY(PUTS(out, "["));
                    list_open = 1;
                }
            }
            FieldPlan one = *f;
            one.repeated = 0, one.presence = 1; /* an element is written even when empty */
            TRY(put_single(mc, &one, wt, &p, end, out, emit, seen ? &seen[num] : &dummy, depth));
        } else if (f->repeated) { /* packed varints */
            const uint8_t *sp;
            Py_ssize_t sn;
            if (wt != 2 || length_field(&p, end, &sp, &sn) < 0 || sn == 0) return DECLINE;
            if (seen) seen[num].present = 1, seen[num].p = sp, seen[num].n = sn;
            if (emit) {
                if (written++) TRY(PUTS(out, ", "));
                TRY(put(out, f->key.p, f->key.n));
                TRY(PUTS(out, "["));
            }
            const uint8_t *q = sp, *qend = sp + sn;
            for (int i = 0; q < qend; i++) {
                uint64_t v;
                if (varint(&q, qend, &v) < 0) return DECLINE;
                if (emit) {
                    if (i) TRY(PUTS(out, ", "));
                    TRY(put_varint_value(out, f, v));
                }
            }
            if (emit) TRY(PUTS(out, "]"));
        } else {
            if (emit) {
                if (written++) TRY(PUTS(out, ", "));
                TRY(put(out, f->key.p, f->key.n));
            }
            TRY(put_single(mc, f, wt, &p, end, out, emit, seen ? &seen[num] : &dummy, depth));
        }
        last = (int)num;
    }
    if (list_open) TRY(PUTS(out, "]"));
    return out ? PUTS(out, "}") : 0;
}

/* ---- columns ---- */

static int col_init(Column *c) {
    if (c->kind == K_STR || c->kind == K_LIST) return put_i32(&c->a, 0) < 0 ? PYERR : 0;
    return 0;
}

static int text_end(Column *c, int valid) { /* close a text row whose bytes are in c->b */
    if (c->b.len > BINARY_BYTES_MAX) {
        PyErr_SetString(PyExc_OverflowError, "more than 2 GiB in one string column: flush more often");
        return PYERR;
    }
    if (put_u8(&c->c, (uint8_t)valid) < 0 || put_i32(&c->a, (int32_t)c->b.len) < 0) return PYERR;
    return 0;
}

static int text_row(Column *c, const char *p, Py_ssize_t n, int valid) {
    if (valid) TRY(put(&c->b, p, n));
    return text_end(c, valid);
}

static int fixed_row(Column *c, int64_t v, int valid) {
    if (!valid) v = 0;
    int r = c->kind == K_I64 ? buf_put(&c->a, &v, 8) : c->kind == K_I32 ? put_i32(&c->a, (int32_t)v)
                                                                        : put_u8(&c->a, (uint8_t)(v != 0));
    if (r < 0 || put_u8(&c->c, (uint8_t)valid) < 0) return PYERR;
    return 0;
}

/* Packed int32 varints as one list row (valid: the list is there). */
static int list_row(Column *c, const uint8_t *p, Py_ssize_t n, int valid) {
    const uint8_t *end = p + n;
    while (valid && p < end) {
        uint64_t v;
        if (varint(&p, end, &v) < 0) return DECLINE;
        if (put_i32(&c->b, (int32_t)v) < 0) return PYERR;
    }
    if (put_u8(&c->c, (uint8_t)valid) < 0 || put_i32(&c->a, (int32_t)(c->b.len / 4)) < 0) return PYERR;
    return 0;
}

static int null_row(Column *c) {
    if (c->kind == K_STR) return text_end(c, 0);
    if (c->kind == K_LIST) return list_row(c, NULL, 0, 0);
    return fixed_row(c, 0, 0);
}

/* The field `field` of a message (packed int32 list), from its bytes: the last occurrence. */
static int nested_field(const uint8_t *p, const uint8_t *end, int field, const uint8_t **sp, Py_ssize_t *sn) {
    *sp = NULL, *sn = 0;
    while (p < end) {
        uint64_t tag, v;
        const uint8_t *s;
        Py_ssize_t n;
        if (varint(&p, end, &tag) < 0) return DECLINE;
        switch (tag & 7) {
        case 0: if (varint(&p, end, &v) < 0) return DECLINE; break;
        case 1: if (end - p < 8) return DECLINE; p += 8; break;
        case 2:
            if (length_field(&p, end, &s, &n) < 0) return DECLINE;
            if ((int)(tag >> 3) == field) *sp = s, *sn = n;
            break;
        default: return DECLINE;
        }
    }
    return 0;
}

static int typed_row(Column *c, const Spec *s, const Seen *seen) {
    const Seen *f = &seen[s->field];
    if (s->optional && !f->present) return null_row(c);
    switch (s->conv) {
    case V_INT:
        return fixed_row(c, c->kind == K_I32 ? (int64_t)(int32_t)f->v : (int64_t)f->v, 1);
    case V_BOOL: return fixed_row(c, f->v != 0, 1);
    case V_STR: return text_row(c, (const char *)f->p, f->n, 1);
    case V_NAME: {
        int32_t e = (int32_t)f->v;
        const Text *t = e >= 0 && e < NAMES_MAX && s->names[e].p ? &s->names[e] : &s->fallback;
        if (!t->p) return DECLINE; /* the Python path raises for it */
        return text_row(c, t->p, t->n, 1);
    }
    case V_TOPIC_IF:
        if ((long long)seen[s->aux_field].v != s->aux_value) return null_row(c);
        return text_row(c, (const char *)f->p, f->n, 1);
    case V_DOUBLE_REPR: {
        double d;
        memcpy(&d, &f->v, 8);
        TRY(put_repr(&c->b, d));
        return text_end(c, 1);
    }
    case V_LIST: return list_row(c, f->p, f->n, 1);
    default: { /* V_MSG_LIST */
        const uint8_t *sp;
        Py_ssize_t sn;
        TRY(nested_field(f->p, f->p + f->n, s->aux_field, &sp, &sn));
        return list_row(c, sp, sn, 1);
    }
    }
}

/* One MetadataRecord (its serialized bytes p..end) as a row. */
static int add_metadata_record(MC *mc, const uint8_t *p, const uint8_t *end, int64_t offset, int64_t base_offset,
                               int64_t epoch) {
    uint64_t time_ms = 0;
    const uint8_t *principal = NULL, *request_id = NULL, *body = NULL;
    Py_ssize_t principal_len = 0, request_id_len = 0, body_len = 0;
    int kind = 0, last = 0;
    const uint8_t *record = p;
    Py_ssize_t record_len = end - p;
    while (p < end) {
        uint64_t tag;
        if (varint(&p, end, &tag) < 0) return DECLINE;
        int num = tag >> 3 < KINDS_MAX ? (int)(tag >> 3) : KINDS_MAX;
        if (num <= last || kind) return DECLINE; /* out of order, repeated, or a field after the oneof */
        last = num;
        if (num == 1) {
            if ((tag & 7) != 0 || varint(&p, end, &time_ms) < 0 || time_ms == 0) return DECLINE;
            /* Microseconds must fit in int64 (the Python path's Arrow cast refuses what does not). */
            if ((int64_t)time_ms > TIME_MS_MAX || (int64_t)time_ms < -TIME_MS_MAX) return DECLINE;
            continue;
        }
        const uint8_t *s;
        Py_ssize_t n;
        if ((tag & 7) != 2 || length_field(&p, end, &s, &n) < 0) return DECLINE;
        if (num == 2 || num == 3) {
            if (n == 0 || !valid_utf8(s, n)) return DECLINE;
            if (num == 2) principal = s, principal_len = n;
            else request_id = s, request_id_len = n;
        } else if (num < KINDS_MAX && mc->kinds[num].known) {
            kind = num, body = s, body_len = n;
        } else {
            return DECLINE;
        }
    }
    Column *cols = mc->cols;
    Seen seen[FIELDS_MAX]; /* zeroed by json_message (a record without a body reads none) */
    Kind *k = kind ? &mc->kinds[kind] : NULL;
    if (k) {
        TRY(json_message(mc, k->plan, body, body + body_len, &cols[C_JSON].b, seen, 0));
        TRY(text_end(&cols[C_JSON], 1));
    } else {
        TRY(text_row(&cols[C_JSON], "{}", 2, 1));
    }
    TRY(fixed_row(&cols[C_OFFSET], offset, 1));
    TRY(fixed_row(&cols[C_BATCH_OFFSET], base_offset, 1));
    TRY(fixed_row(&cols[C_EPOCH], epoch, 1));
    TRY(fixed_row(&cols[C_TIME], (int64_t)time_ms * 1000, 1));
    TRY(k ? text_row(&cols[C_KIND], k->name.p, k->name.n, 1) : text_end(&cols[C_KIND], 0));
    TRY(text_row(&cols[C_PRINCIPAL], (const char *)principal, principal_len, 1));
    TRY(text_row(&cols[C_REQUEST_ID], (const char *)request_id, request_id_len, 1));
    TRY(text_row(&cols[C_RECORD], (const char *)record, record_len, 1));
    int filled[SLOTS_MAX] = {0};
    for (int i = 0; k && i < k->nspecs; i++) {
        const Spec *s = &k->specs[i];
        TRY(typed_row(&cols[FIXED_COLS + TEXT_COLS + s->slot], s, seen));
        filled[s->slot] = 1;
    }
    for (int i = FIXED_COLS + TEXT_COLS; i < mc->ncols; i++)
        if (!filled[i - FIXED_COLS - TEXT_COLS]) TRY(null_row(&cols[i]));
    mc->rows++;
    return 0;
}

/* The value of one RecordList Record (records.proto) and its offset delta; DECLINE where the log walk would
 * refuse it (_record_columns.c) or it holds no value. */
static int record_value(const uint8_t *p, const uint8_t *end, uint64_t *delta, const uint8_t **vp, Py_ssize_t *vn) {
    *delta = 0, *vp = NULL, *vn = 0;
    while (p < end) {
        uint8_t tag = *p++;
        const uint8_t *s;
        Py_ssize_t n;
        uint64_t v;
        switch (tag) {
        case 0x08: if (varint(&p, end, delta) < 0) return DECLINE; break;
        case 0x10: if (varint(&p, end, &v) < 0) return DECLINE; break;
        case 0x1a:
        case 0x2a: if (length_field(&p, end, &s, &n) < 0) return DECLINE; break;
        case 0x22:
            if (length_field(&p, end, &s, &n) < 0) return DECLINE;
            *vp = s, *vn = n;
            break;
        default: return DECLINE;
        }
    }
    return *vp && *delta <= UINT32_MAX ? 0 : DECLINE;
}

typedef struct {
    Py_ssize_t len[COLS_MAX][3];
    Py_ssize_t rows;
} Mark;

static void mark(MC *mc, Mark *m) {
    for (int i = 0; i < mc->ncols; i++)
        m->len[i][0] = mc->cols[i].a.len, m->len[i][1] = mc->cols[i].b.len, m->len[i][2] = mc->cols[i].c.len;
    m->rows = mc->rows;
}

static void rewind_to(MC *mc, const Mark *m) {
    for (int i = 0; i < mc->ncols; i++)
        mc->cols[i].a.len = m->len[i][0], mc->cols[i].b.len = m->len[i][1], mc->cols[i].c.len = m->len[i][2];
    mc->rows = m->rows;
}

static PyObject *MC_add(MC *mc, PyObject *args) {
    Py_buffer records;
    long long record_count, base_offset, lo, hi, epoch;
    if (!PyArg_ParseTuple(args, "y*LLLLL", &records, &record_count, &base_offset, &lo, &hi, &epoch)) return NULL;
    Mark m;
    mark(mc, &m);
    const uint8_t *p = records.buf, *end = p + records.len;
    long long seen = 0;
    int r = 0;
    while (p < end && r == 0) {
        const uint8_t *s, *vp;
        Py_ssize_t n, vn;
        uint64_t delta;
        if (*p++ != 0x0a || length_field(&p, end, &s, &n) < 0 || record_value(s, s + n, &delta, &vp, &vn) < 0) {
            r = DECLINE;
            break;
        }
        seen++;
        long long offset = base_offset + (long long)delta;
        if (offset >= lo && offset < hi) r = add_metadata_record(mc, vp, vp + vn, offset, base_offset, epoch);
    }
    PyBuffer_Release(&records);
    if (r == 0 && seen != record_count) r = DECLINE;
    if (r < 0) {
        rewind_to(mc, &m);
        if (r == PYERR) return NULL;
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    return PyLong_FromSsize_t(mc->rows - m.rows);
}

/* Bit-packed values from one byte per row (Arrow's boolean data). */
static PyObject *bits_of(const Buf *bytes) {
    Py_ssize_t n = bytes->len;
    PyObject *out = PyBytes_FromStringAndSize(NULL, (n + 7) / 8 + 1);
    if (!out) return NULL;
    uint8_t *bits = (uint8_t *)PyBytes_AS_STRING(out);
    memset(bits, 0, (n + 7) / 8 + 1);
    for (Py_ssize_t i = 0; i < n; i++)
        if (bytes->data[i]) bits[i >> 3] |= (uint8_t)(1 << (i & 7));
    return out;
}

static PyObject *MC_take(MC *mc, PyObject *Py_UNUSED(ignored)) {
    PyObject *out = PyList_New(mc->ncols);
    if (!out) return NULL;
    for (int i = 0; i < mc->ncols; i++) {
        Column *c = &mc->cols[i];
        PyObject *v;
        if (i < FIXED_COLS) {
            buf_free(&c->c);
            v = Py_BuildValue("(ONO)", Py_None, buf_take(&c->a), Py_None);
        } else if (c->kind == K_STR || c->kind == K_LIST) {
            PyObject *validity = bitmap_of(&c->c);
            v = validity ? Py_BuildValue("(NNN)", validity, buf_take(&c->a), buf_take(&c->b)) : NULL;
            buf_free(&c->c);
        } else {
            PyObject *validity = bitmap_of(&c->c);
            PyObject *data = c->kind == K_BOOL ? bits_of(&c->a) : buf_take(&c->a);
            v = validity && data ? Py_BuildValue("(NNO)", validity, data, Py_None) : NULL;
            buf_free(&c->a);
            buf_free(&c->c);
        }
        if (!v) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, v);
        if (col_init(c) < 0) {
            Py_DECREF(out);
            return NULL;
        }
    }
    Py_ssize_t rows = mc->rows;
    mc->rows = 0;
    return Py_BuildValue("(nN)", rows, out);
}

static PyObject *MC_get_rows(MC *mc, void *Py_UNUSED(closure)) { return PyLong_FromSsize_t(mc->rows); }

static PyObject *MC_get_bytes(MC *mc, void *Py_UNUSED(closure)) {
    Py_ssize_t total = 0;
    for (int i = 0; i < mc->ncols; i++) total += mc->cols[i].a.len + mc->cols[i].b.len;
    return PyLong_FromSsize_t(total);
}

/* ---- plans from Python ---- */

static int text_of(PyObject *o, Text *t) { /* o: bytes (kept alive by mc->keep) or None */
    if (o == Py_None) {
        t->p = NULL, t->n = 0;
        return 0;
    }
    char *s;
    if (PyBytes_AsStringAndSize(o, &s, &t->n) < 0) return -1;
    t->p = s;
    return 0;
}

/* names: a tuple of bytes-or-None by number (at most NAMES_MAX). */
static int names_of(PyObject *names, Text *out) {
    if (names == Py_None) return 0;
    if (!PyTuple_Check(names) || PyTuple_GET_SIZE(names) > NAMES_MAX) {
        PyErr_SetString(PyExc_ValueError, "enum names: a tuple of at most 64 entries");
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names); i++)
        if (text_of(PyTuple_GET_ITEM(names, i), &out[i]) < 0) return -1;
    return 0;
}

static int MC_init(MC *mc, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"plans", "kinds", "slot_kinds", NULL};
    PyObject *plans, *kinds, *slot_kinds;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!O!O!", kwlist, &PyList_Type, &plans, &PyDict_Type, &kinds,
                                     &PyTuple_Type, &slot_kinds))
        return -1;
    if (mc->plans) {
        PyErr_SetString(PyExc_RuntimeError, "MetadataColumns is initialized once");
        return -1;
    }
    mc->keep = Py_BuildValue("(OOO)", plans, kinds, slot_kinds);
    if (!mc->keep) return -1;
    mc->nplans = (int)PyList_GET_SIZE(plans);
    mc->plans = PyMem_Calloc(mc->nplans ? mc->nplans : 1, sizeof(MessagePlan));
    if (!mc->plans) return PyErr_NoMemory(), -1;
    /* plan: None (declined) or a list of (number, type, repeated, presence, hidden, nested, key, names) */
    for (int i = 0; i < mc->nplans; i++) {
        PyObject *fields = PyList_GET_ITEM(plans, i);
        if (fields == Py_None) continue;
        if (!PyList_Check(fields)) return PyErr_SetString(PyExc_TypeError, "a plan is a list or None"), -1;
        for (Py_ssize_t j = 0; j < PyList_GET_SIZE(fields); j++) {
            int num, type, repeated, presence, hidden, nested;
            PyObject *key, *names;
            if (!PyArg_ParseTuple(PyList_GET_ITEM(fields, j), "iiiiiiSO", &num, &type, &repeated, &presence,
                                  &hidden, &nested, &key, &names))
                return -1;
            if (num <= 0 || num >= FIELDS_MAX)
                return PyErr_SetString(PyExc_ValueError, "field number out of the plan's range"), -1;
            FieldPlan *f = &mc->plans[i].fields[num];
            f->type = type, f->repeated = repeated, f->presence = presence, f->hidden = hidden;
            f->nested = nested;
            if (text_of(key, &f->key) < 0 || names_of(names, f->names) < 0) return -1;
        }
        mc->plans[i].ok = 1;
    }
    /* kinds: {field number: (name, plan, [(slot, conv, field, optional, aux_field, aux_value, names,
     * fallback)])} */
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(kinds, &pos, &key, &value)) {
        long num = PyLong_AsLong(key);
        PyObject *name, *specs;
        int plan;
        if (num <= 0 || num >= KINDS_MAX) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "kind field number out of range");
            return -1;
        }
        if (!PyArg_ParseTuple(value, "SiO!", &name, &plan, &PyList_Type, &specs)) return -1;
        Kind *k = &mc->kinds[num];
        k->known = 1, k->plan = plan;
        if (text_of(name, &k->name) < 0) return -1;
        if (PyList_GET_SIZE(specs) > SPECS_MAX) return PyErr_SetString(PyExc_ValueError, "too many specs"), -1;
        k->nspecs = (int)PyList_GET_SIZE(specs);
        for (int j = 0; j < k->nspecs; j++) {
            Spec *s = &k->specs[j];
            PyObject *names, *fallback;
            if (!PyArg_ParseTuple(PyList_GET_ITEM(specs, j), "iiiiiLOO", &s->slot, &s->conv, &s->field,
                                  &s->optional, &s->aux_field, &s->aux_value, &names, &fallback))
                return -1;
            if (s->slot < 0 || s->field <= 0 || s->field >= FIELDS_MAX || s->aux_field < 0 ||
                s->aux_field >= FIELDS_MAX || FIXED_COLS + TEXT_COLS + s->slot >= COLS_MAX)
                return PyErr_SetString(PyExc_ValueError, "typed spec out of range"), -1;
            if (names_of(names, s->names) < 0 || text_of(fallback, &s->fallback) < 0) return -1;
        }
    }
    Py_ssize_t nslots = PyTuple_GET_SIZE(slot_kinds);
    if (nslots > SLOTS_MAX) return PyErr_SetString(PyExc_ValueError, "too many typed columns"), -1;
    mc->ncols = FIXED_COLS + TEXT_COLS + (int)nslots;
    for (int i = 0; i < mc->ncols; i++) {
        int kind = i < FIXED_COLS ? K_I64 : i < FIXED_COLS + TEXT_COLS ? K_STR
                                          : (int)PyLong_AsLong(PyTuple_GET_ITEM(slot_kinds, i - FIXED_COLS - TEXT_COLS));
        if (kind < K_I64 || kind > K_LIST) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "unknown slot kind");
            return -1;
        }
        mc->cols[i].kind = kind;
        if (col_init(&mc->cols[i]) < 0) return -1;
    }
    for (int i = 0; i < KINDS_MAX; i++)
        for (int j = 0; j < mc->kinds[i].nspecs; j++)
            if (mc->kinds[i].specs[j].slot >= nslots)
                return PyErr_SetString(PyExc_ValueError, "typed spec names no slot"), -1;
    return 0;
}

static void MC_dealloc(MC *mc) {
    for (int i = 0; i < COLS_MAX; i++) buf_free(&mc->cols[i].a), buf_free(&mc->cols[i].b), buf_free(&mc->cols[i].c);
    PyMem_Free(mc->plans);
    Py_CLEAR(mc->keep);
    Py_TYPE(mc)->tp_free((PyObject *)mc);
}

static PyMethodDef MC_methods[] = {
    {"add", (PyCFunction)MC_add, METH_VARARGS,
     "add(record_list, record_count, base_offset, lo, hi, leader_epoch) -> rows added, or None (declined: "
     "nothing added)"},
    {"take", (PyCFunction)MC_take, METH_NOARGS, "take() -> (rows, [buffers per column]); starts anew"},
    {NULL},
};

static PyGetSetDef MC_getset[] = {
    {"rows", (getter)MC_get_rows, NULL, "rows held", NULL},
    {"bytes", (getter)MC_get_bytes, NULL, "bytes held in the column buffers", NULL},
    {NULL},
};

static PyTypeObject MCType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kanal.spark._metadata_columns.MetadataColumns",
    .tp_basicsize = sizeof(MC),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Arrow column buffers filled from metadata-log RecordLists (module docstring)",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)MC_init,
    .tp_dealloc = (destructor)MC_dealloc,
    .tp_methods = MC_methods,
    .tp_getset = MC_getset,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "kanal.spark._metadata_columns",
    "Metadata records walked into Arrow column buffers (see spark/_metadata_columns.c).", -1, NULL,
};

PyMODINIT_FUNC PyInit__metadata_columns(void) {
    if (PyType_Ready(&MCType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&MCType);
    if (PyModule_AddObject(m, "MetadataColumns", (PyObject *)&MCType) < 0) {
        Py_DECREF(&MCType);
        Py_DECREF(m);
        return NULL;
    }
#define CONST(name) PyModule_AddIntConstant(m, #name, name)
    if (CONST(T_INT32) || CONST(T_INT64) || CONST(T_BOOL) || CONST(T_ENUM) || CONST(T_STRING) || CONST(T_BYTES) ||
        CONST(T_MESSAGE) || CONST(T_DOUBLE) || CONST(K_I64) || CONST(K_I32) || CONST(K_BOOL) || CONST(K_STR) ||
        CONST(K_LIST) || CONST(V_INT) || CONST(V_BOOL) || CONST(V_STR) || CONST(V_NAME) || CONST(V_TOPIC_IF) ||
        CONST(V_DOUBLE_REPR) || CONST(V_LIST) || CONST(V_MSG_LIST)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
