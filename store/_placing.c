/* store._placing: the writer's per-message loop for one-message appends, in C.
 *
 * Why: the writer thread places a batch (allocate, number, frame), then writes and syncs it,
 * and the next batch waits: its Python is on the commit path's critical chain, beside the
 * sync. This is store/placing.py's fast path and nothing
 * more: records bumped into the current free area of a p segment, LIVE, outside any
 * transaction. Every case it does not handle (a job with an error, a journal message, a
 * payload that is not bytes, too large or past the area's end, a field out of range) stops
 * the loop *before* anything of that job is changed, and Python places that job.
 *
 * The record layout is store/framing.py's (encode_plain_parts); tests/unit/store/
 * test_native_placing.py checks both give the same bytes, records and numbering.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define HEADER_SIZE 56
#define GRANULE 64
#define RECORD_MAGIC 0xEA7E
#define KIND_MESSAGE 1
#define STATE_LIVE 0

static uint32_t crc_table[256];
static uint32_t head_crc;            /* CRC of the first four header bytes (state zeroed) */
static PyObject *record_type = NULL; /* store.records.StoredRecord */
static PyObject *crc_func = NULL;    /* store.crc.crc32: crc32(data, seed) */
static PyObject *pads = NULL;        /* pads[n]: n zero bytes, n < GRANULE */
static PyObject *str_error, *str_sends, *str_records, *zero;

static uint32_t
crc_update(uint32_t crc, const unsigned char *p, size_t n)
{
    crc = ~crc;
    while (n--)
        crc = crc_table[(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

static void
put16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}

static void
put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void
put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* An int in [0, max], or -1 (no exception left set) when it is not one. */
static long long
small_int(PyObject *obj, unsigned long long max)
{
    if (!PyLong_Check(obj))
        return -1;
    int overflow = 0;
    long long value = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (overflow || value < 0 || (unsigned long long)value > max) {
        PyErr_Clear();
        return -1;
    }
    return value;
}

static PyObject *
setup(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *type, *func;
    if (!PyArg_ParseTuple(args, "O!O", &PyType_Type, &type, &func))
        return NULL;
    if (!PyType_IsSubtype((PyTypeObject *)type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "the record type must be a tuple subclass");
        return NULL;
    }
    Py_INCREF(type);
    Py_XSETREF(record_type, type);
    Py_INCREF(func);
    Py_XSETREF(crc_func, func);
    Py_RETURN_NONE;
}

/* place_run(jobs, start, segment, cursor, end, lsn, nonce32, payload_max, next_seq, items)
 *   -> (stop, cursor, lsn, placed)
 * Places jobs[start:stop] at cursor, cursor + size, ... of ``segment`` (one run), appends
 * (offset, (header, payload, padding)) to ``items`` and each StoredRecord to its job's
 * records, and moves ``next_seq`` on. ``stop`` is the first job it did not place. */
static PyObject *
place_run(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *jobs, *segment, *next_seq, *items;
    Py_ssize_t start, payload_max;
    long long cursor, end, lsn;
    unsigned long nonce32;
    if (!PyArg_ParseTuple(args, "O!nOLLLknO!O!", &PyList_Type, &jobs, &start, &segment,
                          &cursor, &end, &lsn, &nonce32, &payload_max, &PyDict_Type,
                          &next_seq, &PyList_Type, &items))
        return NULL;
    if (record_type == NULL || crc_func == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "store._placing.setup() was not called");
        return NULL;
    }
    PyTypeObject *rtype = (PyTypeObject *)record_type;
    Py_ssize_t n = PyList_GET_SIZE(jobs), i, placed = 0;
    for (i = start; i < n; i++) {
        PyObject *job = PyList_GET_ITEM(jobs, i);
        PyObject *error = PyObject_GetAttr(job, str_error);
        if (error == NULL)
            return NULL;
        Py_DECREF(error);
        if (error != Py_None)
            break;
        PyObject *sends = PyObject_GetAttr(job, str_sends);
        if (sends == NULL)
            return NULL;
        /* Checks first: nothing of this job changes unless all pass. ``sends`` keeps the
         * borrowed fields below alive until the end of the iteration. */
        PyObject *send;
        if (!PyTuple_Check(sends) || PyTuple_GET_SIZE(sends) != 1
            || !PyTuple_Check(send = PyTuple_GET_ITEM(sends, 0))
            || PyTuple_GET_SIZE(send) != 8) {
            Py_DECREF(sends);
            break;
        }
        PyObject *queue_obj = PyTuple_GET_ITEM(send, 0);
        PyObject *payload = PyTuple_GET_ITEM(send, 1);
        PyObject *priority_obj = PyTuple_GET_ITEM(send, 2);
        PyObject *expires_obj = PyTuple_GET_ITEM(send, 3);
        PyObject *flags_obj = PyTuple_GET_ITEM(send, 4);
        PyObject *journal_obj = PyTuple_GET_ITEM(send, 5);
        PyObject *seq_obj = PyTuple_GET_ITEM(send, 7);
        int journal = PyObject_IsTrue(journal_obj);
        if (journal < 0) {
            Py_DECREF(sends);
            return NULL;
        }
        long long queue_id = small_int(queue_obj, 0xFFFFFFFFULL);
        long long priority = small_int(priority_obj, 0xFF);
        long long flags = small_int(flags_obj, 0xFF);
        long long seq = small_int(seq_obj, 0x7FFFFFFFFFFFFFFEULL);
        long long expires = small_int(expires_obj, 0x7FFFFFFFFFFFFFFFULL);
        if (journal || !PyBytes_CheckExact(payload) || queue_id < 0 || priority < 0
            || flags < 0 || seq < 0 || expires < 0) {
            Py_DECREF(sends);
            break;
        }
        Py_ssize_t payload_len = PyBytes_GET_SIZE(payload);
        long long size = (HEADER_SIZE + payload_len + GRANULE - 1) & ~(long long)(GRANULE - 1);
        if (payload_len > payload_max || end - cursor < size) {
            Py_DECREF(sends);
            break;
        }
        long long following = 1;
        PyObject *found = PyDict_GetItemWithError(next_seq, queue_obj);
        if (found == NULL && PyErr_Occurred()) {
            Py_DECREF(sends);
            return NULL;
        }
        if (found != NULL) {
            following = PyLong_AsLongLong(found);
            if (following == -1 && PyErr_Occurred()) {
                Py_DECREF(sends);
                return NULL;
            }
        }
        if (seq == 0)
            seq = following;

        /* The header: store/framing.py's _RECORD layout, little-endian. */
        PyObject *header = PyBytes_FromStringAndSize(NULL, HEADER_SIZE);
        PyObject *seq_long = PyLong_FromLongLong(seq);
        PyObject *rest[5] = {PyLong_FromLongLong(cursor), PyLong_FromLongLong(size),
                             PyLong_FromSsize_t(payload_len), PyLong_FromLongLong(lsn),
                             PyLong_FromLongLong(flags)};
        PyObject *seed = PyLong_FromUnsignedLong(0);
        PyObject *record = rtype->tp_alloc(rtype, 11);
        PyObject *parts = PyTuple_New(3), *item = PyTuple_New(2);
        int ok = header && seq_long && seed && record && parts && item;
        for (int k = 0; k < 5; k++)
            ok = ok && rest[k] != NULL;
        PyObject *crc_obj = NULL;
        if (ok) {
            unsigned char *h = (unsigned char *)PyBytes_AS_STRING(header);
            put16(h, RECORD_MAGIC);
            h[2] = KIND_MESSAGE;
            h[3] = STATE_LIVE;
            put32(h + 4, (uint32_t)payload_len);
            put64(h + 8, (uint64_t)lsn);
            put32(h + 16, (uint32_t)nonce32);
            put32(h + 20, (uint32_t)queue_id);
            put64(h + 24, 0); /* tx_id */
            put64(h + 32, (uint64_t)seq);
            put64(h + 40, (uint64_t)expires);
            h[48] = (unsigned char)priority;
            h[49] = (unsigned char)flags;
            put16(h + 50, 0); /* group */
            Py_DECREF(seed);
            seed = PyLong_FromUnsignedLong(crc_update(head_crc, h + 4, HEADER_SIZE - 8));
            if (seed != NULL) {
                PyObject *call_args[2] = {payload, seed};
                crc_obj = PyObject_Vectorcall(crc_func, call_args, 2, NULL);
            }
            ok = crc_obj != NULL;
        }
        unsigned long crc = ok ? PyLong_AsUnsignedLong(crc_obj) : 0;
        ok = ok && !(crc == (unsigned long)-1 && PyErr_Occurred());
        Py_XDECREF(crc_obj);
        Py_XDECREF(seed);
        PyObject *records = NULL;
        if (ok) {
            put32((unsigned char *)PyBytes_AS_STRING(header) + HEADER_SIZE - 4, (uint32_t)crc);
            PyObject *pad = PyTuple_GET_ITEM(pads, (GRANULE - (HEADER_SIZE + payload_len)
                                                    % GRANULE) % GRANULE);
            Py_INCREF(header);
            Py_INCREF(payload);
            Py_INCREF(pad);
            PyTuple_SET_ITEM(parts, 0, header);
            PyTuple_SET_ITEM(parts, 1, payload);
            PyTuple_SET_ITEM(parts, 2, pad);
            Py_INCREF(rest[0]);
            PyTuple_SET_ITEM(item, 0, rest[0]);
            PyTuple_SET_ITEM(item, 1, parts);
            parts = NULL; /* owned by item */
            /* StoredRecord(queue_id, seq, segment, offset, size, payload_len, lsn,
             *              priority, expires_ms, flags, tx_id) */
            PyObject *fields[11] = {queue_obj, seq_long, segment, rest[0], rest[1], rest[2],
                                   rest[3], priority_obj, expires_obj, rest[4], zero};
            for (int k = 0; k < 11; k++) {
                Py_INCREF(fields[k]);
                PyTuple_SET_ITEM(record, k, fields[k]);
            }
            records = PyObject_GetAttr(job, str_records);
            ok = records != NULL && PyList_Check(records);
            if (records != NULL && !ok)
                PyErr_SetString(PyExc_TypeError, "Job.records is not a list");
        }
        /* The changes, in one go: a failure here leaves the batch half-placed, and the
         * writer fail-stops the store on any exception from placing. */
        if (ok && seq >= following) {
            PyObject *next = PyLong_FromLongLong(seq + 1);
            ok = next != NULL && PyDict_SetItem(next_seq, queue_obj, next) == 0;
            Py_XDECREF(next);
        }
        ok = ok && PyList_Append(items, item) == 0 && PyList_Append(records, record) == 0;
        Py_XDECREF(records);
        Py_XDECREF(header);
        Py_XDECREF(seq_long);
        for (int k = 0; k < 5; k++)
            Py_XDECREF(rest[k]);
        Py_XDECREF(record);
        Py_XDECREF(parts);
        Py_XDECREF(item);
        Py_DECREF(sends);
        if (!ok)
            return NULL;
        cursor += size;
        lsn += 1;
        placed += 1;
    }
    return Py_BuildValue("(nLLn)", i, cursor, lsn, placed);
}

/* runs(items) -> [(start, buffers, total), ...]: store/runs.py's _runs over items already
 * sorted by offset (each (offset, (header, payload, padding))): one run of buffers per
 * stretch of adjacent records; the Python loop is the fallback. */
/* Appends (start, run, end - start) to out; steals run. -1 on error. */
static int
close_run(PyObject *out, long long start, PyObject *run, long long end)
{
    PyObject *done = Py_BuildValue("(LNL)", start, run, end - start);
    if (done == NULL)
        return -1;
    int failed = PyList_Append(out, done);
    Py_DECREF(done);
    return failed;
}

static PyObject *
runs(PyObject *self, PyObject *args)
{
    PyObject *items;
    if (!PyArg_ParseTuple(args, "O!", &PyList_Type, &items))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(items);
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    PyObject *run = NULL;
    long long run_start = 0, run_end = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(items, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2)
            goto bad;
        PyObject *parts = PyTuple_GET_ITEM(item, 1);
        if (!PyTuple_Check(parts) || PyTuple_GET_SIZE(parts) != 3)
            goto bad;
        long long offset = PyLong_AsLongLong(PyTuple_GET_ITEM(item, 0));
        if (offset == -1 && PyErr_Occurred())
            goto fail;
        if (run == NULL || offset != run_end) {
            if (run != NULL) {
                int failed = close_run(out, run_start, run, run_end);
                run = NULL;
                if (failed)
                    goto fail;
            }
            run = PyList_New(0);
            if (run == NULL)
                goto fail;
            run_start = run_end = offset;
        }
        run_end = offset;
        for (Py_ssize_t k = 0; k < 3; k++) {
            PyObject *buffer = PyTuple_GET_ITEM(parts, k);
            Py_ssize_t size = PyObject_Length(buffer);
            if (size < 0 || PyList_Append(run, buffer) < 0)
                goto fail;
            run_end += size;
        }
    }
    if (run != NULL) {
        int failed = close_run(out, run_start, run, run_end);
        run = NULL;
        if (failed)
            goto fail;
    }
    return out;
bad:
    PyErr_SetString(PyExc_TypeError, "runs: items must be (offset, (header, payload, padding))");
fail:
    Py_XDECREF(run);
    Py_DECREF(out);
    return NULL;
}

static PyMethodDef methods[] = {
    {"runs", runs, METH_VARARGS,
     "runs(items) -> [(start, buffers, total), ...] of items sorted by offset"},
    {"setup", setup, METH_VARARGS,
     "setup(record_type, crc32): the record class to build and the CRC-32 to use."},
    {"place_run", place_run, METH_VARARGS,
     "place_run(jobs, start, segment, cursor, end, lsn, nonce32, payload_max, next_seq, "
     "items) -> (stop, cursor, lsn, placed)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "store._placing",
    "The writer's per-message placing loop in C (see store/placing.py).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__placing(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[n] = c;
    }
    const unsigned char head[4] = {RECORD_MAGIC & 0xFF, RECORD_MAGIC >> 8, KIND_MESSAGE,
                                   STATE_LIVE};
    head_crc = crc_update(0, head, 4);
    str_error = PyUnicode_InternFromString("error");
    str_sends = PyUnicode_InternFromString("sends");
    str_records = PyUnicode_InternFromString("records");
    zero = PyLong_FromLong(0);
    pads = PyTuple_New(GRANULE);
    if (!str_error || !str_sends || !str_records || !zero || !pads)
        return NULL;
    for (Py_ssize_t k = 0; k < GRANULE; k++) {
        PyObject *pad = PyBytes_FromStringAndSize(NULL, k);
        if (pad == NULL)
            return NULL;
        memset(PyBytes_AS_STRING(pad), 0, (size_t)k);
        PyTuple_SET_ITEM(pads, k, pad);
    }
    return PyModule_Create(&module_def);
}
