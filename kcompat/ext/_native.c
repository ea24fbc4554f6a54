/* kcompat.ext._native: the two per-record loops of a produce of delayed records, in C.
 *
 * Theory of operation
 * -------------------
 * A produce of delayed records pays two loops whose cost is per record:
 * ``holes.split`` reads each record's layout and its kc-delay-ms (and
 * kc-schedule-id) to take it out of the batch, and
 * ``schedule_adds.delayed_records`` encodes each taken record again for the
 * schedule log. In Python they are most of the broker's CPU under a delayed
 * producer; here they are a scan of bytes and two or three allocations per
 * record.
 *
 * Each function is the twin of a Python loop that stays the reference (and
 * the path of every case this one does not take): the Python code asks
 * here first and falls back to its own loop when the answer is None. None
 * means "not a case this code is sure of" (``classify`` lists them): a
 * header name that is not ASCII, a delay or time that is not 1 to 18 ASCII
 * digits, any header the Python loop refuses (one of ours twice or null, a
 * cancellation with another of ours, a delay over the limit...: it raises
 * the HeaderError), any malformation (it raises its RecordError), any sum
 * that would overflow an int64. The tests
 * (tests/unit/ext/test_native.py) hold each function's answer equal to its
 * Python twin's, and to be an answer, not None, for the batches it is for.
 *
 * Pure: bytes in, values out; the GIL is held throughout.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* our headers' names: kc-delay-ms, kc-deliver-at, kc-schedule-id, kc-cancel-schedule */
enum { DELAY, DELIVER, ID, CANCEL, OURS };
static const char *const OUR_NAMES[OURS] = {"kc-delay-ms", "kc-deliver-at", "kc-schedule-id",
                                            "kc-cancel-schedule"};
static const int64_t OUR_SIZES[OURS] = {11, 13, 14, 18};
/* the name that delivered records carry, as a record holds it: its length (zig-zag), then it */
static const unsigned char SCHEDULED_NAME[] = "\x26" "kc-scheduled-offset";
#define SCHEDULED_NAME_SIZE 20
#define FAST_DIGITS 18

/* A zig-zag varint at *pos, of at most 9 bytes (63 bits: what an int64 holds
 * whatever its sign); -1 when it is longer or runs past ``limit``. */
static int read_varint(const unsigned char *buf, Py_ssize_t limit, Py_ssize_t *pos,
                       int64_t *out) {
    uint64_t result = 0;
    Py_ssize_t p = *pos;
    for (int shift = 0; shift <= 56; shift += 7) {
        if (p >= limit)
            return -1;
        unsigned char b = buf[p++];
        result |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *out = (int64_t)(result >> 1) ^ -(int64_t)(result & 1);
            *pos = p;
            return 0;
        }
    }
    return -1;
}

static Py_ssize_t put_varint(unsigned char *out, int64_t value) {
    uint64_t z = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    Py_ssize_t n = 0;
    while (z >= 0x80) {
        out[n++] = (unsigned char)(z | 0x80);
        z >>= 7;
    }
    out[n++] = (unsigned char)z;
    return n;
}

/* The delay of ``size`` bytes at ``at`` when they are 1..18 ASCII digits, else -1. */
static int64_t digits_value(const unsigned char *at, Py_ssize_t size) {
    if (size < 1 || size > FAST_DIGITS)
        return -1;
    int64_t value = 0;
    for (Py_ssize_t i = 0; i < size; i++) {
        if (at[i] < '0' || at[i] > '9')
            return -1;
        value = value * 10 + (at[i] - '0');
    }
    return value;
}

/* What a record's headers ask (``delay.classify``), for the forms this file
 * is for; OTHER: any other, or any doubt (the Python loop decides). */
enum { OTHER, KEPT, MOVED, CANCELLED };
typedef struct {
    int kind;
    int header_count;  /* MOVED: the record's headers */
    int64_t due;       /* MOVED */
    Py_ssize_t id_at, id_size; /* kc-schedule-id's (MOVED, KEPT) or the cancelled one's */
} Asked;

/* The headers whose count is at ``hc`` and which fill the record to ``end``,
 * as ``record_scan.headers_at`` reads them and ``delay.classify`` decides:
 * KEPT for none of ours (or kc-schedule-id alone, or a time not ahead),
 * MOVED for kc-delay-ms or kc-deliver-at (with or without kc-schedule-id,
 * and other headers, in any order), CANCELLED for kc-cancel-schedule alone
 * of ours. OTHER for anything the Python loop refuses or might read
 * otherwise: a name not ASCII, one of ours twice or null, cancel with
 * another of ours, a delay and a time, a delay or time not 1 to 18 ASCII
 * digits (``classify`` also takes spaces and more digits), a delay over the
 * limit or a time too far ahead, a count or length of a varint this file
 * does not read. The caller checks the id is UTF-8. */
static Asked classify(const unsigned char *buf, Py_ssize_t hc, Py_ssize_t end, int64_t now_ms,
                      int64_t max_delay_ms) {
    Asked a = {OTHER, 0, 0, 0, 0};
    if (buf[hc] & 0x81) /* a negative count, or one of two bytes or more */
        return a;
    int count = buf[hc] >> 1;
    Py_ssize_t p = hc + 1, at[OURS] = {-1, -1, -1, -1}, size[OURS] = {0, 0, 0, 0};
    for (int h = 0; h < count; h++) {
        int64_t n, v;
        if (read_varint(buf, end, &p, &n) || n < 0 || n > end - p)
            return a;
        const unsigned char *name = buf + p;
        int ours = -1;
        for (int k = 0; k < OURS; k++)
            if (n == OUR_SIZES[k] && memcmp(name, OUR_NAMES[k], n) == 0)
                ours = k;
        for (int64_t i = 0; ours < 0 && i < n; i++)
            if (name[i] & 0x80) /* not ASCII: the Python loop decodes it */
                return a;
        p += (Py_ssize_t)n;
        if (read_varint(buf, end, &p, &v) || v < -1 || v > end - p)
            return a;
        if (ours >= 0) {
            if (at[ours] >= 0 || v < 0) /* ours twice, or null: classify raises */
                return a;
            at[ours] = p;
            size[ours] = (Py_ssize_t)v;
        }
        if (v > 0)
            p += (Py_ssize_t)v;
    }
    if (p != end)
        return a;
    if (at[CANCEL] >= 0) {
        if (at[DELAY] >= 0 || at[DELIVER] >= 0 || at[ID] >= 0 || size[CANCEL] == 0)
            return a;
        a.kind = CANCELLED;
        a.id_at = at[CANCEL];
        a.id_size = size[CANCEL];
        return a;
    }
    if (at[DELAY] >= 0 && at[DELIVER] >= 0)
        return a;
    if (at[ID] >= 0) {
        if (size[ID] == 0)
            return a;
        a.id_at = at[ID];
        a.id_size = size[ID];
    }
    int which = at[DELAY] >= 0 ? DELAY : at[DELIVER] >= 0 ? DELIVER : -1;
    if (which < 0) { /* none of ours, or kc-schedule-id alone: an ordinary record */
        a.kind = KEPT;
        return a;
    }
    int64_t value = digits_value(buf + at[which], size[which]), ahead;
    if (value < 0)
        return a;
    if (which == DELIVER) {
        if (__builtin_sub_overflow(value, now_ms, &ahead) || ahead > max_delay_ms)
            return a;
        a.due = value;
    } else if (value > max_delay_ms || __builtin_add_overflow(now_ms, value, &a.due)) {
        return a;
    }
    a.kind = a.due > now_ms ? MOVED : KEPT;
    a.header_count = count;
    return a;
}

typedef struct {
    int64_t *items;
    Py_ssize_t size;
} Column;

static PyObject *column_bytes(const Column *c) {
    return PyBytes_FromStringAndSize((const char *)c->items, c->size * (Py_ssize_t)sizeof(int64_t));
}

/* split_delays(payload, count, base_offset, base_ts, append_time, now_ms, max_delay_ms)
 *
 * ``holes.split``'s loop over a batch's uncompressed ``payload`` of ``count``
 * records, when every record's headers are a form ``classify`` knows: (kept,
 * kept_count, offsets, timestamps, bodies, header_counts, header_bytes,
 * dues, id_rows, id_names, cancelled, cancelled_ids) — the kept records'
 * bytes joined, the moves' columns (``ext.moves``; int64 columns as
 * native-endian bytes for ``array('q').frombytes``), and the cancellations'
 * holes and ids. None: the Python loop decides (see the top of this file).
 * ``append_time`` is None
 * or the log-append time every record takes. */
static PyObject *split_delays(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t count;
    long long base_offset, base_ts, now_ms, max_delay_ms;
    PyObject *append_obj;
    if (!PyArg_ParseTuple(args, "y*nLLOLL", &view, &count, &base_offset, &base_ts, &append_obj,
                          &now_ms, &max_delay_ms))
        return NULL;
    const unsigned char *buf = view.buf;
    Py_ssize_t total = view.len;
    int has_append = append_obj != Py_None;
    long long append_time = 0;
    PyObject *result = NULL, *bodies = NULL, *blocks = NULL, *names = NULL, *cancel_ids = NULL;
    Column offsets = {0}, stamps = {0}, counts = {0}, dues = {0}, id_rows = {0}, spans = {0},
           cancelled = {0};
    if (has_append) {
        append_time = PyLong_AsLongLong(append_obj);
        if (append_time == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            goto fallback;
        }
    }
    if (count < 0 || count > total)  /* a record takes two bytes at least */
        goto fallback;
    size_t room = (size_t)(count ? count : 1) * sizeof(int64_t);
    offsets.items = PyMem_Malloc(room);
    stamps.items = PyMem_Malloc(room);
    counts.items = PyMem_Malloc(room);
    dues.items = PyMem_Malloc(room);
    id_rows.items = PyMem_Malloc(room);
    cancelled.items = PyMem_Malloc(room);
    spans.items = PyMem_Malloc(2 * room);
    bodies = PyList_New(0);
    blocks = PyList_New(0);
    names = PyList_New(0);
    cancel_ids = PyList_New(0);
    if (!offsets.items || !stamps.items || !counts.items || !dues.items || !id_rows.items ||
        !spans.items || !cancelled.items || !bodies || !blocks || !names || !cancel_ids) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t pos = 0, kept_bytes = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t length, ts, delta, size;
        Py_ssize_t p = pos;
        if (read_varint(buf, total, &p, &length) || length < 1 || length > total - p)
            goto fallback;
        Py_ssize_t end = p + (Py_ssize_t)length;
        p += 1; /* attributes: unused */
        if (read_varint(buf, end, &p, &ts) || read_varint(buf, end, &p, &delta))
            goto fallback;
        Py_ssize_t kv = p;
        for (int part = 0; part < 2; part++) { /* the key, then the value */
            if (read_varint(buf, end, &p, &size) || size < -1 || size > end - p)
                goto fallback;
            if (size > 0)
                p += (Py_ssize_t)size;
        }
        if (p >= end)
            goto fallback;
        Py_ssize_t hc = p;
        Asked asked = classify(buf, hc, end, now_ms, max_delay_ms);
        if (asked.kind == OTHER)
            goto fallback;
        PyObject *schedule_id = NULL; /* checked UTF-8 whatever it is for, as the Python loop */
        if (asked.id_size) {
            schedule_id = PyUnicode_DecodeUTF8((const char *)buf + asked.id_at, asked.id_size,
                                               "strict");
            if (schedule_id == NULL) {
                if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
                    goto done;
                PyErr_Clear();
                goto fallback;
            }
        }
        int64_t offset, stamp;
        if (asked.kind == KEPT) {
            Py_XDECREF(schedule_id);
            spans.items[spans.size++] = pos;
            spans.items[spans.size++] = end;
            kept_bytes += end - pos;
            pos = end;
            continue;
        }
        if (__builtin_add_overflow((int64_t)base_offset, delta, &offset) ||
            (!has_append && __builtin_add_overflow((int64_t)base_ts, ts, &stamp))) {
            Py_XDECREF(schedule_id);
            goto fallback;
        }
        if (asked.kind == CANCELLED) {
            if (schedule_id == NULL) /* classify gives none empty: kept so, never a crash */
                goto fallback;
            cancelled.items[cancelled.size++] = offset;
            int failed = PyList_Append(cancel_ids, schedule_id);
            Py_DECREF(schedule_id);
            if (failed)
                goto done;
            pos = end;
            continue;
        }
        if (has_append)
            stamp = append_time;
        if (schedule_id != NULL) {
            id_rows.items[id_rows.size++] = offsets.size;
            int failed = PyList_Append(names, schedule_id);
            Py_DECREF(schedule_id);
            if (failed)
                goto done;
        }
        offsets.items[offsets.size++] = offset;
        stamps.items[stamps.size++] = stamp;
        counts.items[counts.size++] = asked.header_count;
        dues.items[dues.size++] = asked.due;
        PyObject *body = PyBytes_FromStringAndSize((const char *)buf + kv, hc - kv);
        PyObject *block = body ? PyBytes_FromStringAndSize((const char *)buf + hc + 1,
                                                           end - hc - 1) : NULL;
        int failed = !block || PyList_Append(bodies, body) || PyList_Append(blocks, block);
        Py_XDECREF(body);
        Py_XDECREF(block);
        if (failed)
            goto done;
        pos = end;
    }
    if (pos != total)
        goto fallback;
    PyObject *kept = PyBytes_FromStringAndSize(NULL, kept_bytes);
    if (kept == NULL)
        goto done;
    char *into = PyBytes_AS_STRING(kept);
    for (Py_ssize_t s = 0; s < spans.size; s += 2) {
        memcpy(into, buf + spans.items[s], spans.items[s + 1] - spans.items[s]);
        into += spans.items[s + 1] - spans.items[s];
    }
    result = Py_BuildValue("(NnNNONONNONO)", kept, spans.size / 2, column_bytes(&offsets),
                           column_bytes(&stamps), bodies, column_bytes(&counts), blocks,
                           column_bytes(&dues), column_bytes(&id_rows), names,
                           column_bytes(&cancelled), cancel_ids);
    goto done;
fallback:
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&view);
    PyMem_Free(offsets.items);
    PyMem_Free(stamps.items);
    PyMem_Free(counts.items);
    PyMem_Free(dues.items);
    PyMem_Free(id_rows.items);
    PyMem_Free(cancelled.items);
    PyMem_Free(spans.items);
    Py_XDECREF(bodies);
    Py_XDECREF(blocks);
    Py_XDECREF(names);
    Py_XDECREF(cancel_ids);
    return result;
}

/* delayed_records(offsets, timestamps, bodies, header_counts, header_bytes, shift)
 *
 * ``schedule_adds.delayed_records``'s loop over a batch's moves (their
 * columns): ([record, ...], base_ts, max_ts), each record with its length
 * varint, offset delta i + 1, its headers and then kc-scheduled-offset
 * naming its hole (offset + ``shift``). None when a sum would overflow. */
static PyObject *delayed_records(PyObject *self, PyObject *args) {
    Py_buffer offsets, stamps, counts;
    PyObject *bodies, *blocks, *result = NULL, *out = NULL;
    long long shift;
    if (!PyArg_ParseTuple(args, "y*y*O!y*O!L", &offsets, &stamps, &PyList_Type, &bodies,
                          &counts, &PyList_Type, &blocks, &shift))
        return NULL;
    Py_ssize_t n = offsets.len / (Py_ssize_t)sizeof(int64_t);
    if (stamps.len != offsets.len || counts.len != offsets.len || PyList_GET_SIZE(bodies) != n ||
        PyList_GET_SIZE(blocks) != n || n == 0) {
        PyErr_SetString(PyExc_ValueError, "delayed_records: columns of unequal or no length");
        goto done;
    }
    const int64_t *offset = offsets.buf, *stamp = stamps.buf, *hcount = counts.buf;
    int64_t base_ts = stamp[0], max_ts = base_ts;
    out = PyList_New(n);
    if (out == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *body = PyList_GET_ITEM(bodies, i), *block = PyList_GET_ITEM(blocks, i);
        if (!PyBytes_Check(body) || !PyBytes_Check(block)) {
            PyErr_SetString(PyExc_TypeError, "delayed_records: bodies and headers are bytes");
            goto done;
        }
        int64_t hole, ts;
        if (__builtin_add_overflow(offset[i], (int64_t)shift, &hole) ||
            __builtin_sub_overflow(stamp[i], base_ts, &ts) || hcount[i] < 0 ||
            hcount[i] >= INT64_MAX)
            goto fallback;
        if (ts > 0 && stamp[i] > max_ts)
            max_ts = stamp[i];
        char digits[24];
        int ndigits = snprintf(digits, sizeof digits, "%lld", (long long)hole);
        unsigned char head[3 * 10 + 1], tail[10];
        Py_ssize_t h = 0, t;
        head[h++] = 0; /* attributes */
        h += put_varint(head + h, ts);
        h += put_varint(head + h, (int64_t)i + 1);
        t = put_varint(tail, hcount[i] + 1);
        Py_ssize_t rest = h + PyBytes_GET_SIZE(body) + t + PyBytes_GET_SIZE(block) +
                          SCHEDULED_NAME_SIZE + 1 + ndigits;
        unsigned char size[10];
        Py_ssize_t s = put_varint(size, rest);
        PyObject *record = PyBytes_FromStringAndSize(NULL, s + rest);
        if (record == NULL)
            goto done;
        char *w = PyBytes_AS_STRING(record);
        memcpy(w, size, s), w += s;
        memcpy(w, head, h), w += h;
        memcpy(w, PyBytes_AS_STRING(body), PyBytes_GET_SIZE(body)), w += PyBytes_GET_SIZE(body);
        memcpy(w, tail, t), w += t;
        memcpy(w, PyBytes_AS_STRING(block), PyBytes_GET_SIZE(block)), w += PyBytes_GET_SIZE(block);
        memcpy(w, SCHEDULED_NAME, SCHEDULED_NAME_SIZE), w += SCHEDULED_NAME_SIZE;
        *w++ = (char)(2 * ndigits);
        memcpy(w, digits, ndigits);
        PyList_SET_ITEM(out, i, record);
    }
    result = Py_BuildValue("(OLL)", out, (long long)base_ts, (long long)max_ts);
    goto done;
fallback:
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(out);
    PyBuffer_Release(&offsets);
    PyBuffer_Release(&stamps);
    PyBuffer_Release(&counts);
    return result;
}

static PyMethodDef methods[] = {
    {"split_delays", split_delays, METH_VARARGS,
     "holes.split's loop when every record is plain or simply delayed (None: the Python loop)."},
    {"delayed_records", delayed_records, METH_VARARGS,
     "schedule_adds.delayed_records's loop (None: the Python loop)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "kcompat.ext._native",
    "The per-record loops of a produce of delayed records, in C (see _native.c).", -1, methods,
};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }
