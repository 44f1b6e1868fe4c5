/*
 * relay.rows.coltypes._rowread: the generated row readers' work in C (sans-IO).
 *
 * relay/rows/coltypes/readers.py generates, per row image and pattern of NULLs, the Python
 * source that reads a row image into a dict: about a microsecond for a sysbench-like row,
 * most of it in the interpreter between the values (slicing, unpacking, the sign flips
 * and range checks of a DECIMAL, the datetime's fields, the dict).  A Reader does the same
 * reading in C for each column of a common type (Column kinds below, chosen by each type's
 * registry entry: ColumnType.compiled), calls the column's decoder for the others, and
 * builds the same dict with the same values.  It never decides anything the Python reader
 * would decide differently: a row it cannot read entirely and plainly (bytes running out,
 * a corrupt DECIMAL group, a date Python cannot hold, a decoder's exception, invalid
 * UTF-8) is handed, from its first byte, to the generated Python reader, which reads it,
 * gives the server's text for a zero date, or raises what it always raised.  Without a C
 * compiler the package installs without this module and the Python readers do all rows.
 *
 * Reader(run, names, columns, nulls, fallback) -> reader
 *   run       True: reader(buf, pos, stop, append) -> pos, as readers.compile_run's: appends
 *             the rows from pos (at a one-byte null bitmap) on while they have the pattern
 *             nulls (each NULL bit tested when nulls is None) and pos < stop;
 *             False: reader(buf, pos, nulls) -> (row, pos), as compile_body's (pos after the
 *             null bitmap)
 *   names     the dict's keys, one per column present
 *   columns   one (kind, size, extra, obj) per column present (R_* below)
 *   nulls     bytes, one per column: 1 where the pattern has a NULL; None: test each bit
 *             (a run's one byte, or a body's nulls argument: at most 64 columns)
 *   fallback  the generated Python reader of the same image, pattern and form
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <datetime.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* column kinds (relay/rows/coltypes/base.py's R_* are the same numbers) */
enum {
    R_CALL = 1,    /* obj(buf, pos) -> (value, pos): the column's decoder */
    R_INT,         /* little-endian signed integer of size bytes (1, 2, 3, 4, 8) */
    R_UINT,        /* the same, unsigned */
    R_YEAR,        /* one byte: 1900 + n, 0 for 0 */
    R_FLOAT,       /* little-endian float32, widened */
    R_DOUBLE,      /* little-endian float64 */
    R_UTF8,        /* length prefix of size bytes, then bytes.decode() */
    R_BYTES,       /* length prefix, then bytes, padded with NULs to extra when extra > 0 */
    R_CODEC,       /* length prefix, then bytes.decode(obj) */
    R_CONVERT,     /* length prefix, then obj(bytes) */
    R_DECIMAL,     /* NEWDECIMAL(size, extra); obj: (multiply, unit, negative zero, Decimal) */
    R_DATETIME2,   /* DATETIME2 of fsp size: a naive datetime */
    R_TIMESTAMP2,  /* TIMESTAMP2 of fsp size: an aware datetime in UTC; obj: the zero timestamp's str */
    R_DATE,        /* DATE: a date */
    R_KINDS
};

#define MAX_GROUPS 16

typedef struct {
    int kind, size, extra;
    PyObject *obj;
    PyObject *a, *b, *c, *d;   /* R_DECIMAL: multiply, unit, negative zero, Decimal */
    /* R_DECIMAL: the digit groups, most significant first */
    int ngroups, head;         /* groups; bytes of them all */
    unsigned char gbytes[MAX_GROUPS];
    uint32_t glimit[MAX_GROUPS];
    unsigned char gdigits[MAX_GROUPS];
    /* R_DATETIME2, R_TIMESTAMP2: the value of the last head read, as the Python plan keeps it */
    int has_last;
    uint64_t last_key;
    PyObject *last;
} Column;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    int run;
    Py_ssize_t n;
    PyObject *names;      /* tuple */
    PyObject *fallback;
    unsigned char *null;  /* per column, the pattern; NULL: test each bit */
    int mask, pattern;    /* run: the null byte's mask and the pattern's bits */
    Column *cols;
} Reader;

static PyObject *utc;  /* datetime.timezone.utc */

/* ------------------------------------------------------------------ reading */

static inline uint64_t be(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

static inline uint64_t le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* The outcome of a column: a value, or the row goes to the Python reader (BAIL, no error set,
   or an error that is not an Exception: FAIL). */
#define BAIL ((PyObject *)1)
#define FAIL ((PyObject *)0)

/* An exception of a call: an Exception bails (the Python reader raises it again), others fail. */
static PyObject *bail_or_fail(void)
{
    if (PyErr_ExceptionMatches(PyExc_Exception)) {
        PyErr_Clear();
        return BAIL;
    }
    return FAIL;
}

static void civil_from_days(long long z, int *y, int *m, int *d)
{
    /* days since 1970-01-01 -> the proleptic Gregorian date (H. Hinnant's algorithm) */
    z += 719468;
    long long era = (z >= 0 ? z : z - 146096) / 146097;
    unsigned doe = (unsigned)(z - era * 146097);
    unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    unsigned mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = (int)((long long)yoe + era * 400 + (*m <= 2));
}

static int frac_bytes(int fsp)
{
    return (fsp + 1) / 2;  /* 0, 1, 1, 2, 2, 3, 3 */
}

static long frac_us(const unsigned char *p, int fsp)
{
    switch (fsp) {
    case 0: return 0;
    case 1: case 2: return (long)p[0] * 10000;
    case 3: case 4: return (long)be(p, 2) * 100;
    default: return (long)be(p, 3);
    }
}

static PyObject *read_decimal(Column *c, const unsigned char *p)
{
    uint32_t g[MAX_GROUPS] = {0};
    const unsigned char *q = p;
    for (int i = 0; i < c->ngroups; i++) {
        g[i] = (uint32_t)be(q, c->gbytes[i]);
        q += c->gbytes[i];
    }
    uint32_t sign = 1u << (c->gbytes[0] * 8 - 1);
    int negative = !(g[0] & sign);
    if (negative) {
        for (int i = 0; i < c->ngroups; i++) {
            uint32_t m = c->gbytes[i] == 4 ? 0xFFFFFFFFu : (1u << c->gbytes[i] * 8) - 1;
            g[i] ^= m;
        }
    }
    g[0] &= ~sign;  /* positive: the sign bit was set; negative: it was 0, now 1 */
    for (int i = 0; i < c->ngroups; i++)
        if (g[i] >= c->glimit[i])
            return BAIL;  /* corrupt: the Python reader raises */
    PyObject *digits;
    int zero = 1;
    for (int i = 0; i < c->ngroups; i++)
        zero &= g[i] == 0;
    if (negative && zero)
        return Py_NewRef(c->c);
    if (c->size <= 18) {
        long long x = 0;
        for (int i = 0; i < c->ngroups; i++)
            x = x * c->glimit[i] + g[i];
        digits = PyLong_FromLongLong(negative ? -x : x);
    } else {
        char text[80];
        int len = 0;
        if (negative)
            text[len++] = '-';
        for (int i = 0; i < c->ngroups; i++) {
            if (i)
                len += snprintf(text + len, sizeof text - (size_t)len, "%0*u", (int)c->gdigits[i], (unsigned)g[i]);
            else
                len += snprintf(text + len, sizeof text - (size_t)len, "%u", (unsigned)g[i]);
        }
        digits = PyLong_FromString(text, NULL, 10);
    }
    if (digits == NULL)
        return bail_or_fail();
    PyObject *value;
    if (c->extra) {
        PyObject *args[2] = {digits, c->b};
        value = PyObject_Vectorcall(c->a, args, 2, NULL);
    } else {
        value = PyObject_CallOneArg(c->d, digits);
    }
    Py_DECREF(digits);
    return value != NULL ? value : bail_or_fail();
}

/* The value of column c at *pos (moved on), or BAIL/FAIL. */
static PyObject *read_column(Column *c, PyObject *buf, const unsigned char *data, Py_ssize_t len,
                             Py_ssize_t *pos)
{
    const unsigned char *p = data + *pos;
    Py_ssize_t left = len - *pos;
    switch (c->kind) {
    case R_INT:
    case R_UINT: {
        if (left < c->size)
            return BAIL;
        uint64_t u = le(p, c->size);
        *pos += c->size;
        if (c->kind == R_UINT)
            return PyLong_FromUnsignedLongLong(u);
        int shift = 64 - 8 * c->size;
        return PyLong_FromLongLong(shift ? (long long)(u << shift) >> shift : (long long)u);
    }
    case R_YEAR:
        if (left < 1)
            return BAIL;
        *pos += 1;
        return PyLong_FromLong(p[0] ? p[0] + 1900 : 0);
    case R_FLOAT:
    case R_DOUBLE: {
        int size = c->kind == R_FLOAT ? 4 : 8;
        if (left < size)
            return BAIL;
        double d = size == 4 ? PyFloat_Unpack4((const char *)p, 1) : PyFloat_Unpack8((const char *)p, 1);
        if (d == -1.0 && PyErr_Occurred())
            return bail_or_fail();
        *pos += size;
        return PyFloat_FromDouble(d);
    }
    case R_UTF8:
    case R_BYTES:
    case R_CODEC:
    case R_CONVERT: {
        if (left < c->size)
            return BAIL;
        Py_ssize_t n = (Py_ssize_t)le(p, c->size);
        if (n > left - c->size)
            return BAIL;
        const char *s = (const char *)p + c->size;
        PyObject *value;
        if (c->kind == R_UTF8) {
            value = PyUnicode_DecodeUTF8(s, n, NULL);
        } else if (c->kind == R_CODEC) {
            value = PyUnicode_Decode(s, n, PyUnicode_AsUTF8(c->obj), NULL);
        } else if (c->kind == R_BYTES && c->extra > n) {
            value = PyBytes_FromStringAndSize(NULL, c->extra);
            if (value != NULL) {
                memcpy(PyBytes_AS_STRING(value), s, (size_t)n);
                memset(PyBytes_AS_STRING(value) + n, 0, (size_t)(c->extra - n));
            }
        } else {
            value = PyBytes_FromStringAndSize(s, n);
            if (value != NULL && c->kind == R_CONVERT)
                Py_SETREF(value, PyObject_CallOneArg(c->obj, value));
        }
        if (value == NULL)
            return bail_or_fail();
        *pos += c->size + n;
        return value;
    }
    case R_DECIMAL: {
        if (left < c->head)
            return BAIL;
        PyObject *value = read_decimal(c, p);
        if (value != BAIL && value != FAIL)
            *pos += c->head;
        return value;
    }
    case R_DATETIME2:
    case R_TIMESTAMP2: {
        int head = (c->kind == R_DATETIME2 ? 5 : 4) + frac_bytes(c->size);
        if (left < head)
            return BAIL;
        uint64_t key = be(p, head);
        PyObject *value;
        if (c->has_last && c->last_key == key) {
            value = Py_NewRef(c->last);
        } else if (c->kind == R_DATETIME2) {
            int64_t x = (int64_t)be(p, 5) - 0x8000000000LL;
            long us = frac_us(p + 5, c->size);
            if (x < 0)
                return BAIL;  /* negative: Python has no such datetime, the reader writes its text */
            int64_t ymd = x >> 17, ym = ymd >> 5, hms = x & 0x1FFFF;
            value = PyDateTimeAPI->DateTime_FromDateAndTime(
                (int)(ym / 13), (int)(ym % 13), (int)(ymd & 31), (int)(hms >> 12), (int)((hms >> 6) & 0x3F),
                (int)(hms & 0x3F), (int)us, Py_None, PyDateTimeAPI->DateTimeType);
            if (value == NULL)
                return bail_or_fail();  /* a zero date: its text, by the Python reader */
        } else {
            long long secs = (long long)be(p, 4);
            long us = frac_us(p + 4, c->size);
            if (secs == 0) {
                value = Py_NewRef(c->obj);  /* the zero timestamp */
            } else {
                long long total = secs * 1000000 + us;  /* timedelta(0, secs, us) */
                long long s = total / 1000000;
                int y, m, d;
                civil_from_days(s / 86400, &y, &m, &d);
                value = PyDateTimeAPI->DateTime_FromDateAndTime(
                    y, m, d, (int)(s % 86400 / 3600), (int)(s % 3600 / 60), (int)(s % 60), (int)(total % 1000000),
                    utc, PyDateTimeAPI->DateTimeType);
                if (value == NULL)
                    return bail_or_fail();
            }
        }
        if (!c->has_last || c->last_key != key) {
            Py_XSETREF(c->last, Py_NewRef(value));
            c->last_key = key;
            c->has_last = 1;
        }
        *pos += head;
        return value;
    }
    case R_DATE: {
        if (left < 3)
            return BAIL;
        uint32_t x = (uint32_t)le(p, 3);
        PyObject *value = PyDateTimeAPI->Date_FromDate((int)(x >> 9), (int)(x >> 5 & 15), (int)(x & 31),
                                                       PyDateTimeAPI->DateType);
        if (value == NULL)
            return bail_or_fail();  /* a zero date: its text, by the Python reader */
        *pos += 3;
        return value;
    }
    case R_CALL: {
        PyObject *at = PyLong_FromSsize_t(*pos);
        if (at == NULL)
            return bail_or_fail();
        PyObject *args[2] = {buf, at};
        PyObject *got = PyObject_Vectorcall(c->obj, args, 2, NULL);
        Py_DECREF(at);
        if (got == NULL)
            return bail_or_fail();
        Py_ssize_t next;
        if (!PyTuple_CheckExact(got) || PyTuple_GET_SIZE(got) != 2
            || (next = PyLong_AsSsize_t(PyTuple_GET_ITEM(got, 1))) == -1 || next > len || next < *pos) {
            PyErr_Clear();
            Py_DECREF(got);
            return BAIL;
        }
        PyObject *value = Py_NewRef(PyTuple_GET_ITEM(got, 0));
        Py_DECREF(got);
        *pos = next;
        return value;
    }
    }
    return BAIL;
}

static PyObject *new_row(Py_ssize_t n)
{
#if PY_VERSION_HEX < 0x030D0000
    return _PyDict_NewPresized(n);
#else
    (void)n;
    return PyDict_New();
#endif
}

/* One row's columns after its null bitmap (nulls: its bits, when the reader has no pattern)
   into a new dict; NULL with *bail set when the row goes to the Python reader, NULL alone on
   an error. */
static PyObject *read_row(Reader *self, PyObject *buf, const unsigned char *data, Py_ssize_t len,
                          Py_ssize_t *pos, uint64_t nulls, int *bail)
{
    PyObject *row = new_row(self->n);
    if (row == NULL)
        return NULL;
    for (Py_ssize_t k = 0; k < self->n; k++) {
        int is_null = self->null != NULL ? self->null[k] : (int)(nulls >> k & 1);
        PyObject *value;
        if (is_null) {
            value = Py_NewRef(Py_None);
        } else {
            value = read_column(&self->cols[k], buf, data, len, pos);
            if (value == BAIL || value == FAIL) {
                Py_DECREF(row);
                *bail = value == BAIL;
                return NULL;
            }
        }
        int failed = PyDict_SetItem(row, PyTuple_GET_ITEM(self->names, k), value);
        Py_DECREF(value);
        if (failed) {
            Py_DECREF(row);
            return NULL;
        }
    }
    return row;
}

static PyObject *run_call(Reader *self, PyObject *const *argv)
{
    PyObject *buf = argv[0], *append = argv[3];
    Py_ssize_t pos = PyLong_AsSsize_t(argv[1]), stop = PyLong_AsSsize_t(argv[2]);
    if ((pos == -1 || stop == -1) && PyErr_Occurred())
        return NULL;
    if (!PyBytes_CheckExact(buf) || pos < 0)
        return PyObject_Vectorcall(self->fallback, argv, 4, NULL);
    const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(buf);
    Py_ssize_t len = PyBytes_GET_SIZE(buf);
    while (pos < stop && pos < len) {
        int bits = data[pos] & self->mask;
        if (self->null != NULL && bits != self->pattern)
            break;
        Py_ssize_t at = pos + 1;
        int bail = 0;
        PyObject *row = read_row(self, buf, data, len, &at, (uint64_t)bits, &bail);
        if (row == NULL) {
            if (!bail)
                return NULL;
            PyObject *start = PyLong_FromSsize_t(pos);
            if (start == NULL)
                return NULL;
            PyObject *args[4] = {buf, start, argv[2], append};
            PyObject *got = PyObject_Vectorcall(self->fallback, args, 4, NULL);
            Py_DECREF(start);
            return got;
        }
        PyObject *ok = PyObject_CallOneArg(append, row);
        Py_DECREF(row);
        if (ok == NULL)
            return NULL;
        Py_DECREF(ok);
        pos = at;
    }
    if (pos < stop && pos >= len) {  /* stop past the data: the Python reader says what it says */
        PyObject *start = PyLong_FromSsize_t(pos);
        if (start == NULL)
            return NULL;
        PyObject *args[4] = {buf, start, argv[2], append};
        PyObject *got = PyObject_Vectorcall(self->fallback, args, 4, NULL);
        Py_DECREF(start);
        return got;
    }
    return PyLong_FromSsize_t(pos);
}

static PyObject *body_call(Reader *self, PyObject *const *argv)
{
    PyObject *buf = argv[0];
    Py_ssize_t pos = PyLong_AsSsize_t(argv[1]);
    if (pos == -1 && PyErr_Occurred())
        return NULL;
    uint64_t nulls = 0;
    if (self->null == NULL) {
        nulls = PyLong_AsUnsignedLongLong(argv[2]);
        if (nulls == (uint64_t)-1 && PyErr_Occurred()) {
            PyErr_Clear();
            return PyObject_Vectorcall(self->fallback, argv, 3, NULL);
        }
    }
    if (!PyBytes_CheckExact(buf) || pos < 0)
        return PyObject_Vectorcall(self->fallback, argv, 3, NULL);
    int bail = 0;
    PyObject *row = read_row(self, buf, (const unsigned char *)PyBytes_AS_STRING(buf), PyBytes_GET_SIZE(buf),
                             &pos, nulls, &bail);
    if (row == NULL)
        return bail ? PyObject_Vectorcall(self->fallback, argv, 3, NULL) : NULL;
    PyObject *end = PyLong_FromSsize_t(pos);
    if (end == NULL) {
        Py_DECREF(row);
        return NULL;
    }
    PyObject *out = PyTuple_Pack(2, row, end);
    Py_DECREF(row);
    Py_DECREF(end);
    return out;
}

static PyObject *reader_vectorcall(PyObject *self_obj, PyObject *const *argv, size_t nargsf, PyObject *kwnames)
{
    Reader *self = (Reader *)self_obj;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (kwnames != NULL || nargs != (self->run ? 4 : 3)) {
        PyErr_Format(PyExc_TypeError, "a reader takes %d positional arguments", self->run ? 4 : 3);
        return NULL;
    }
    return self->run ? run_call(self, argv) : body_call(self, argv);
}

/* ------------------------------------------------------------------ construction */

static const unsigned char dig2bytes[10] = {0, 1, 1, 2, 2, 3, 3, 4, 4, 4};

static int decimal_layout(Column *c)
{
    int precision = c->size, scale = c->extra, intg = precision - scale, n = 0;
    if (scale < 0 || scale > 38 || precision > 65 || scale > precision)
        return -1;
#define GROUP(bytes, digits) do { c->gbytes[n] = (unsigned char)(bytes); c->gdigits[n] = (unsigned char)(digits); \
        c->glimit[n] = 1; for (int j = 0; j < (digits); j++) c->glimit[n] *= 10; n++; } while (0)
    if (intg % 9)
        GROUP(dig2bytes[intg % 9], intg % 9);
    for (int i = 0; i < intg / 9; i++)
        GROUP(4, 9);
    for (int i = 0; i < scale / 9; i++)
        GROUP(4, 9);
    if (scale % 9)
        GROUP(dig2bytes[scale % 9], scale % 9);
#undef GROUP
    if (n == 0)
        return -1;
    c->ngroups = n;
    c->head = 0;
    for (int i = 0; i < n; i++)
        c->head += c->gbytes[i];
    return 0;
}

static int reader_traverse(Reader *self, visitproc visit, void *arg)
{
    Py_VISIT(self->names);
    Py_VISIT(self->fallback);
    for (Py_ssize_t k = 0; self->cols != NULL && k < self->n; k++) {
        Py_VISIT(self->cols[k].obj);
        Py_VISIT(self->cols[k].a);
        Py_VISIT(self->cols[k].b);
        Py_VISIT(self->cols[k].c);
        Py_VISIT(self->cols[k].d);
        Py_VISIT(self->cols[k].last);
    }
    return 0;
}

static int reader_clear(Reader *self)
{
    Py_CLEAR(self->names);
    Py_CLEAR(self->fallback);
    for (Py_ssize_t k = 0; self->cols != NULL && k < self->n; k++) {
        Py_CLEAR(self->cols[k].obj);
        Py_CLEAR(self->cols[k].a);
        Py_CLEAR(self->cols[k].b);
        Py_CLEAR(self->cols[k].c);
        Py_CLEAR(self->cols[k].d);
        Py_CLEAR(self->cols[k].last);
    }
    return 0;
}

static void reader_dealloc(Reader *self)
{
    PyObject_GC_UnTrack(self);
    reader_clear(self);
    PyMem_Free(self->cols);
    PyMem_Free(self->null);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *reader_new(PyTypeObject *type, PyObject *argv, PyObject *kwargs)
{
    int run;
    PyObject *names, *columns, *nulls, *fallback;
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs)) {
        PyErr_SetString(PyExc_TypeError, "Reader takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_ParseTuple(argv, "pO!O!OO:Reader", &run, &PyTuple_Type, &names, &PyTuple_Type, &columns,
                          &nulls, &fallback))
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(names);
    if (PyTuple_GET_SIZE(columns) != n) {
        PyErr_SetString(PyExc_ValueError, "Reader: one column per name");
        return NULL;
    }
    if (nulls != Py_None && (!PyBytes_Check(nulls) || PyBytes_GET_SIZE(nulls) != n)) {
        PyErr_SetString(PyExc_ValueError, "Reader: nulls is None or one byte per column");
        return NULL;
    }
    if ((run && n > 8) || (nulls == Py_None && n > 64)) {
        PyErr_SetString(PyExc_ValueError, "Reader: too many columns for one null byte (run) or 64 bits");
        return NULL;
    }
    Reader *self = (Reader *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = reader_vectorcall;
    self->run = run;
    self->names = Py_NewRef(names);
    self->fallback = Py_NewRef(fallback);
    self->cols = PyMem_Calloc((size_t)(n ? n : 1), sizeof(Column));
    if (self->cols == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    self->n = n;
    self->mask = n < 8 ? (1 << n) - 1 : 0xFF;
    if (nulls != Py_None) {
        self->null = PyMem_Malloc((size_t)(n ? n : 1));
        if (self->null == NULL) {
            Py_DECREF(self);
            return PyErr_NoMemory();
        }
        memcpy(self->null, PyBytes_AS_STRING(nulls), (size_t)n);
        for (Py_ssize_t k = 0; k < n && k < 8; k++)
            self->pattern |= (self->null[k] ? 1 : 0) << k;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        Column *c = &self->cols[k];
        PyObject *spec = PyTuple_GET_ITEM(columns, k), *obj;
        if (!PyTuple_Check(spec)
            || !PyArg_ParseTuple(spec, "iiiO:Reader column", &c->kind, &c->size, &c->extra, &obj)) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "Reader: a column is (kind, size, extra, obj)");
            Py_DECREF(self);
            return NULL;
        }
        int ok = c->kind > 0 && c->kind < R_KINDS;
        switch (c->kind) {
        case R_CALL: case R_CONVERT: ok = PyCallable_Check(obj); break;
        case R_INT: case R_UINT: ok = c->size == 1 || c->size == 2 || c->size == 3 || c->size == 4 || c->size == 8; break;
        case R_UTF8: case R_BYTES: ok = c->size >= 1 && c->size <= 4; break;
        case R_CODEC: ok = c->size >= 1 && c->size <= 4 && PyUnicode_Check(obj); break;
        case R_DATETIME2: ok = c->size >= 0 && c->size <= 6; break;
        case R_TIMESTAMP2: ok = c->size >= 0 && c->size <= 6 && PyUnicode_Check(obj); break;
        case R_DECIMAL:
            ok = decimal_layout(c) == 0 && PyTuple_Check(obj) && PyTuple_GET_SIZE(obj) == 4;
            if (ok) {
                c->a = Py_NewRef(PyTuple_GET_ITEM(obj, 0));
                c->b = Py_NewRef(PyTuple_GET_ITEM(obj, 1));
                c->c = Py_NewRef(PyTuple_GET_ITEM(obj, 2));
                c->d = Py_NewRef(PyTuple_GET_ITEM(obj, 3));
            }
            break;
        }
        c->obj = Py_NewRef(obj);
        if (!ok) {
            PyErr_Format(PyExc_ValueError, "Reader: column %zd: bad kind %d or arguments", k, c->kind);
            Py_DECREF(self);
            return NULL;
        }
    }
    return (PyObject *)self;
}

static PyTypeObject ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "relay.rows.coltypes._rowread.Reader",
    .tp_basicsize = sizeof(Reader),
    .tp_dealloc = (destructor)reader_dealloc,
    .tp_vectorcall_offset = offsetof(Reader, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Reader(run, names, columns, nulls, fallback): a row reader (see the module's source)",
    .tp_traverse = (traverseproc)reader_traverse,
    .tp_clear = (inquiry)reader_clear,
    .tp_new = reader_new,
};

static struct PyModuleDef rowread_module = {
    PyModuleDef_HEAD_INIT, "relay.rows.coltypes._rowread",
    "The generated row readers' work in C (see relay/rows/coltypes/readers.py).", -1, NULL,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__rowread(void)
{
    PyDateTime_IMPORT;
    if (PyDateTimeAPI == NULL)
        return NULL;
    utc = PyDateTime_TimeZone_UTC;
    if (PyType_Ready(&ReaderType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&rowread_module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&ReaderType);
    if (PyModule_AddObject(m, "Reader", (PyObject *)&ReaderType) < 0) {
        Py_DECREF(&ReaderType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
