/*
 * relay.pipeline._jsontext: the JSON text of a row image, in C, for relay/pipeline/jsonform.py.
 *
 * The export writes every row image of every change as JSON text (jsonform.row_json).  Its
 * generated Python encoders cost about 1.5 us for a sysbench-like row, most of it in calls
 * that make a few characters each (datetime.isoformat, the string escaping, str of a
 * Decimal) and in the f-string that joins them; here one call writes the row.  Without a C
 * compiler the package installs without this module, and the generated Python encoders do
 * the same work (jsonform.compile_encoder, which also builds these encoders).
 *
 * Encoder(parts, kinds, args, otherwise) -> encoder; encoder(row) -> str
 *   parts      n + 1 str: the text before each column's value ('{"id":', ',"k":', ...) and
 *              the closing '}', as they are written (names already escaped)
 *   kinds      bytes, one per column: how its value is written (K_* below)
 *   args       tuple, one per column: K_DATETIME the text's length (19, or 20 + fsp), K_TIME
 *              the fraction digits, K_CALL a callable (value -> the column's whole text)
 *   otherwise  the encoder for a row this one does not write: the generated Python encoder
 *   A row is a dict of exactly n values, taken in its order without looking at its keys (as
 *   the Python encoder takes row.values()).  A value that is neither None nor of the exact
 *   Python type the decoder gives for its kind (int, str, bytes, Decimal, datetime, date,
 *   timedelta, float), or None where the Python encoder would not write null by itself,
 *   sends the whole row to otherwise, as does an exception (Exception) of a K_CALL or of
 *   str(Decimal): the text is then the Python encoder's, and for every other row it is the
 *   same text, byte for byte (tests/unit/test_jsonform.py checks both on every fixture).
 *
 * Texts, as the Python forms write them:
 *   str     json.dumps(ensure_ascii=False): quotes, \" \\ \b \f \n \r \t, the other
 *           characters below U+0020 as \u00XX (lowercase hex), everything else as it is
 *           (lone surrogates included)
 *   int     its decimal digits; bytes: standard base64 with padding, quoted
 *   Decimal str(value), or format(value, "f") when str has an exponent, quoted
 *   datetime "YYYY-MM-DD HH:MM:SS.ffffff" cut to args[k] characters, quoted; naive, or aware
 *           in datetime.timezone.utc (the decoder's TIMESTAMP); other zones go to otherwise
 *   date    "YYYY-MM-DD"; timedelta "[-]HH:MM:SS[.ffffff]" (hours past 24, args[k] fraction
 *           digits); float: repr(), Infinity, -Infinity, NaN as json writes them
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <datetime.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* column kinds (jsonform's K_* are the same numbers) */
enum {
    K_INT = 1,       /* int */
    K_STR,           /* str */
    K_TEXT,          /* str, or bytes as base64 (a text column without charset metadata) */
    K_B64,           /* bytes as base64 */
    K_DECIMAL,       /* Decimal */
    K_DATETIME,      /* datetime, or str (a zero date: the server's text) */
    K_DATE,          /* date, or str */
    K_TIME,          /* timedelta, or str */
    K_FLOAT,         /* float (DOUBLE) */
    K_CALL,          /* args[k](value): the column's text, None included */
    K_KINDS
};
#define K_NULLABLE 0x80  /* or-ed into a kind: None is null (else the Python form raises for it) */

enum { P_ASCII, P_STR, P_ESCAPED, P_B64 };

typedef struct {
    unsigned char type;  /* P_* */
    unsigned char quote; /* P_ASCII, P_STR: written between quote marks */
    Py_ssize_t len;      /* characters written, quote marks included */
    PyObject *obj;       /* P_STR, P_ESCAPED: a str; P_B64: bytes (new references) */
    char text[40];       /* P_ASCII: the text, ASCII */
} Piece;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    Py_ssize_t n;
    PyObject *parts;     /* tuple of n + 1 str */
    PyObject *args;      /* tuple of n */
    PyObject *otherwise;
    unsigned char *kinds;
    int *lengths;        /* K_DATETIME, K_TIME: args[k] as a C int */
    Py_ssize_t parts_len;
    Py_UCS4 parts_max;
} Encoder;

static PyObject *decimal_type;  /* decimal.Decimal, set by the module's setup() */
static PyObject *str_f;         /* "f" */

/* ------------------------------------------------------------------ string escapes */

/* characters written for each character below 0x80 (json's escape_unicode); 1 for the rest */
static unsigned char escape_len[128];

static void escape_init(void)
{
    for (int c = 0; c < 128; c++)
        escape_len[c] = c < 0x20 ? 6 : 1;
    escape_len['"'] = escape_len['\\'] = 2;
    escape_len['\b'] = escape_len['\f'] = escape_len['\n'] = escape_len['\r'] = escape_len['\t'] = 2;
}

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL
/* whether some byte of w may be below 0x20, a quote mark or a backslash: never false when one
   is (a false true only costs the byte-by-byte look that follows) */
static inline int word_needs_escape(uint64_t w)
{
    uint64_t quote = w ^ (ONES * '"'), backslash = w ^ (ONES * '\\');
    return ((((w - ONES * 0x20) & ~w) | ((quote - ONES) & ~quote) | ((backslash - ONES) & ~backslash))
            & HIGHS) != 0;
}

/* The length of s escaped, quote marks included. */
static Py_ssize_t escaped_len(PyObject *s)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(s), out = n + 2, i = 0;
    int kind = PyUnicode_KIND(s);
    const void *data = PyUnicode_DATA(s);
    if (kind == PyUnicode_1BYTE_KIND) {
        const Py_UCS1 *p = (const Py_UCS1 *)data;
        for (; i + 8 <= n; i += 8) {
            uint64_t w;
            memcpy(&w, p + i, 8);
            if (word_needs_escape(w))
                for (int j = 0; j < 8; j++)
                    if (p[i + j] < 0x80)
                        out += escape_len[p[i + j]] - 1;
        }
        for (; i < n; i++)
            if (p[i] < 0x80)
                out += escape_len[p[i]] - 1;
    } else if (kind == PyUnicode_2BYTE_KIND) {
        const Py_UCS2 *p = (const Py_UCS2 *)data;
        for (; i < n; i++)
            if (p[i] < 0x80)
                out += escape_len[p[i]] - 1;
    } else {
        const Py_UCS4 *p = (const Py_UCS4 *)data;
        for (; i < n; i++)
            if (p[i] < 0x80)
                out += escape_len[p[i]] - 1;
    }
    return out;
}

/* ------------------------------------------------------------------ writing into the result */

static inline void put_char(void *data, int kind, Py_ssize_t at, Py_UCS4 c)
{
    PyUnicode_WRITE(kind, data, at, c);
}

static Py_ssize_t put_ascii(void *data, int kind, Py_ssize_t at, const char *s, Py_ssize_t n)
{
    if (kind == PyUnicode_1BYTE_KIND) {
        memcpy((Py_UCS1 *)data + at, s, (size_t)n);
    } else if (kind == PyUnicode_2BYTE_KIND) {
        Py_UCS2 *d = (Py_UCS2 *)data + at;
        for (Py_ssize_t i = 0; i < n; i++)
            d[i] = (unsigned char)s[i];
    } else {
        Py_UCS4 *d = (Py_UCS4 *)data + at;
        for (Py_ssize_t i = 0; i < n; i++)
            d[i] = (unsigned char)s[i];
    }
    return at + n;
}

/* s as it is */
static Py_ssize_t put_str(void *data, int kind, Py_ssize_t at, PyObject *s)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    int skind = PyUnicode_KIND(s);
    const void *src = PyUnicode_DATA(s);
    if (skind == kind) {
        memcpy((char *)data + at * kind, src, (size_t)(n * kind));
    } else if (skind == PyUnicode_1BYTE_KIND && kind == PyUnicode_2BYTE_KIND) {
        Py_UCS2 *d = (Py_UCS2 *)data + at;
        for (Py_ssize_t i = 0; i < n; i++)
            d[i] = ((const Py_UCS1 *)src)[i];
    } else if (skind == PyUnicode_1BYTE_KIND) {
        Py_UCS4 *d = (Py_UCS4 *)data + at;
        for (Py_ssize_t i = 0; i < n; i++)
            d[i] = ((const Py_UCS1 *)src)[i];
    } else {  /* 2 -> 4 (the result's kind is never narrower than a piece's) */
        Py_UCS4 *d = (Py_UCS4 *)data + at;
        for (Py_ssize_t i = 0; i < n; i++)
            d[i] = ((const Py_UCS2 *)src)[i];
    }
    return at + n;
}

static const char hexdigits[] = "0123456789abcdef";

/* s with json's escapes, without the quote marks */
static Py_ssize_t put_escaped(void *data, int kind, Py_ssize_t at, PyObject *s)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    int skind = PyUnicode_KIND(s);
    const void *src = PyUnicode_DATA(s);
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(skind, src, i);
        if (c >= 0x80 || escape_len[c] == 1) {
            put_char(data, kind, at++, c);
            continue;
        }
        put_char(data, kind, at++, '\\');
        switch (c) {
        case '"': case '\\': put_char(data, kind, at++, c); break;
        case '\b': put_char(data, kind, at++, 'b'); break;
        case '\f': put_char(data, kind, at++, 'f'); break;
        case '\n': put_char(data, kind, at++, 'n'); break;
        case '\r': put_char(data, kind, at++, 'r'); break;
        case '\t': put_char(data, kind, at++, 't'); break;
        default:
            put_char(data, kind, at++, 'u');
            put_char(data, kind, at++, '0');
            put_char(data, kind, at++, '0');
            put_char(data, kind, at++, hexdigits[c >> 4]);
            put_char(data, kind, at++, hexdigits[c & 15]);
        }
    }
    return at;
}

static const char b64digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static Py_ssize_t b64_len(Py_ssize_t n)
{
    return (n + 2) / 3 * 4;
}

/* binascii.b2a_base64(src, newline=False) */
static Py_ssize_t put_b64(void *data, int kind, Py_ssize_t at, const unsigned char *src, Py_ssize_t n)
{
    char chunk[256];  /* 64 groups of 4 */
    Py_ssize_t i = 0;
    while (i < n) {
        int used = 0;
        for (; i + 3 <= n && used < (int)sizeof chunk; i += 3, used += 4) {
            uint32_t v = (uint32_t)src[i] << 16 | (uint32_t)src[i + 1] << 8 | src[i + 2];
            chunk[used] = b64digits[v >> 18];
            chunk[used + 1] = b64digits[v >> 12 & 63];
            chunk[used + 2] = b64digits[v >> 6 & 63];
            chunk[used + 3] = b64digits[v & 63];
        }
        if (i < n && n - i < 3 && used < (int)sizeof chunk) {
            uint32_t v = (uint32_t)src[i] << 16 | (n - i == 2 ? (uint32_t)src[i + 1] << 8 : 0);
            chunk[used] = b64digits[v >> 18];
            chunk[used + 1] = b64digits[v >> 12 & 63];
            chunk[used + 2] = n - i == 2 ? b64digits[v >> 6 & 63] : '=';
            chunk[used + 3] = '=';
            used += 4;
            i = n;
        }
        at = put_ascii(data, kind, at, chunk, used);
    }
    return at;
}

/* ------------------------------------------------------------------ values as ASCII text */

static inline char *two_digits(char *p, int v)
{
    p[0] = (char)('0' + v / 10);
    p[1] = (char)('0' + v % 10);
    return p + 2;
}

/* "%lld" */
static int ll_text(char *out, long long v)
{
    char tmp[24];
    int n = 0, len = 0;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        out[len++] = '-';
    while (n)
        out[len++] = tmp[--n];
    return len;
}

/* "%0*d" of a non-negative v, at least width digits */
static int padded(char *out, long long v, int width)
{
    char tmp[24];
    int n = 0, len = 0;
    unsigned long long u = (unsigned long long)v;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    while (n < width)
        tmp[n++] = '0';
    while (n)
        out[len++] = tmp[--n];
    return len;
}

static int date_text(char *p, int y, int mo, int d)
{
    padded(p, y, 4);  /* 1..9999: four digits */
    p[4] = '-';
    two_digits(p + 5, mo);
    p[7] = '-';
    two_digits(p + 8, d);
    return 10;
}

/* "YYYY-MM-DD HH:MM:SS.ffffff" cut to n characters */
static int datetime_text(char *p, PyObject *v, int n)
{
    date_text(p, PyDateTime_GET_YEAR(v), PyDateTime_GET_MONTH(v), PyDateTime_GET_DAY(v));
    p[10] = ' ';
    two_digits(p + 11, PyDateTime_DATE_GET_HOUR(v));
    p[13] = ':';
    two_digits(p + 14, PyDateTime_DATE_GET_MINUTE(v));
    p[16] = ':';
    two_digits(p + 17, PyDateTime_DATE_GET_SECOND(v));
    p[19] = '.';
    padded(p + 20, PyDateTime_DATE_GET_MICROSECOND(v), 6);
    return n;
}

/* jsonform._time_text: "[-]HH:MM:SS" and fsp fraction digits; -1 for a value out of range */
static int time_text(char *p, PyObject *v, int fsp)
{
    long long days = PyDateTime_DELTA_GET_DAYS(v);
    if (days > 1000000 || days < -1000000)
        return -1;  /* hours of more digits than the text has room for: the Python encoder */
    long long us = (days * 86400 + PyDateTime_DELTA_GET_SECONDS(v)) * 1000000LL
                   + PyDateTime_DELTA_GET_MICROSECONDS(v);
    int len = 0;
    if (us < 0) {
        p[len++] = '-';
        us = -us;
    }
    long long secs = us / 1000000;
    us %= 1000000;
    len += padded(p + len, secs / 3600, 2);
    p[len++] = ':';
    len += padded(p + len, secs / 60 % 60, 2);
    p[len++] = ':';
    len += padded(p + len, secs % 60, 2);
    if (fsp) {
        char frac[8];
        padded(frac, us, 6);
        p[len++] = '.';
        for (int i = 0; i < fsp && i < 6; i++)
            p[len++] = frac[i];
    }
    return len;
}

/* ------------------------------------------------------------------ the encoder */

/* p writes text (a new reference; NULL after an error: -1), between quote marks if quote */
static int str_piece(Piece *p, PyObject *text, int quote, Py_UCS4 *maxchar)
{
    if (text == NULL)
        return -1;
    p->type = P_STR;
    p->quote = (unsigned char)quote;
    p->obj = text;
    p->len = PyUnicode_GET_LENGTH(text) + (quote ? 2 : 0);
    if (PyUnicode_MAX_CHAR_VALUE(text) > *maxchar)
        *maxchar = PyUnicode_MAX_CHAR_VALUE(text);
    return 0;
}

static void release(Piece *pieces, Py_ssize_t n)
{
    for (Py_ssize_t k = 0; k < n; k++)
        Py_CLEAR(pieces[k].obj);
}

static PyObject *
encoder_vectorcall(PyObject *self_obj, PyObject *const *argv, size_t nargsf, PyObject *kwnames)
{
    Encoder *self = (Encoder *)self_obj;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != 1 || kwnames != NULL) {
        PyErr_SetString(PyExc_TypeError, "an encoder takes one row");
        return NULL;
    }
    PyObject *row = argv[0];
    Py_ssize_t n = self->n;
    if (!PyDict_CheckExact(row) || PyDict_GET_SIZE(row) != n)
        return PyObject_CallOneArg(self->otherwise, row);

    Piece stack_pieces[32];
    Piece *pieces = stack_pieces;
    if (n > 32) {
        pieces = PyMem_Malloc(sizeof(Piece) * (size_t)n);
        if (pieces == NULL)
            return PyErr_NoMemory();
    }
    for (Py_ssize_t k = 0; k < n; k++)
        pieces[k].obj = NULL;

    Py_ssize_t total = self->parts_len, pos = 0, k = 0;
    Py_UCS4 maxchar = self->parts_max;
    PyObject *key, *v;
    while (PyDict_Next(row, &pos, &key, &v)) {
        if (k == n)
            goto otherwise;  /* the dict grew under a K_CALL */
        Piece *p = &pieces[k];
        unsigned char kind = self->kinds[k] & ~K_NULLABLE;
        p->type = P_ASCII;
        p->quote = 0;
        if (kind == K_CALL) {
            PyObject *text = PyObject_CallOneArg(PyTuple_GET_ITEM(self->args, k), v);
            if (text == NULL)
                goto failed;
            if (!PyUnicode_CheckExact(text)) {
                Py_DECREF(text);
                goto otherwise;
            }
            str_piece(p, text, 0, &maxchar);
        } else if (v == Py_None) {
            if (!(self->kinds[k] & K_NULLABLE))
                goto otherwise;  /* the Python form raises: its row goes to the general path */
            memcpy(p->text, "null", 4);
            p->len = 4;
        } else if (PyUnicode_CheckExact(v)) {
            if (kind != K_STR && kind != K_TEXT && kind != K_DATETIME && kind != K_DATE && kind != K_TIME)
                goto otherwise;
#if PY_VERSION_HEX < 0x030C0000
            if (PyUnicode_READY(v) < 0)
                goto failed;
#endif
            p->type = P_ESCAPED;
            Py_INCREF(v);
            p->obj = v;
            p->len = escaped_len(v);
            if (PyUnicode_MAX_CHAR_VALUE(v) > maxchar)
                maxchar = PyUnicode_MAX_CHAR_VALUE(v);
        } else if (kind == K_INT) {
            if (!PyLong_CheckExact(v))
                goto otherwise;
            int overflow;
            long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
            if (overflow) {
                if (str_piece(p, PyObject_Str(v), 0, &maxchar) < 0)
                    goto failed;
            } else {
                p->len = ll_text(p->text, x);
            }
        } else if (kind == K_DECIMAL) {
            if ((PyObject *)Py_TYPE(v) != decimal_type)
                goto otherwise;
            PyObject *text = PyObject_Str(v);
            if (text == NULL)
                goto failed;
            if (PyUnicode_FindChar(text, 'E', 0, PyUnicode_GET_LENGTH(text), 1) >= 0) {
                Py_DECREF(text);
                text = PyObject_Format(v, str_f);
            }
            if (str_piece(p, text, 1, &maxchar) < 0)
                goto failed;
        } else if (kind == K_DATETIME) {
            if (!PyDateTime_CheckExact(v))
                goto otherwise;
            PyObject *tz = PyDateTime_DATE_GET_TZINFO(v);
            if (tz != Py_None && tz != PyDateTime_TimeZone_UTC)
                goto otherwise;  /* converted to UTC by the Python encoder */
            p->quote = 1;
            p->len = datetime_text(p->text, v, self->lengths[k]) + 2;
        } else if (kind == K_DATE) {
            if (!PyDate_CheckExact(v))
                goto otherwise;  /* a datetime in a DATE column: its isoformat() */
            p->quote = 1;
            p->len = date_text(p->text, PyDateTime_GET_YEAR(v), PyDateTime_GET_MONTH(v), PyDateTime_GET_DAY(v)) + 2;
        } else if (kind == K_TIME) {
            int len;
            if (!PyDelta_CheckExact(v)
                || (len = time_text(p->text, v, self->lengths[k])) < 0)
                goto otherwise;
            p->quote = 1;
            p->len = len + 2;
        } else if (kind == K_B64 || kind == K_TEXT) {
            if (!PyBytes_CheckExact(v))
                goto otherwise;
            p->type = P_B64;
            Py_INCREF(v);
            p->obj = v;
            p->len = b64_len(PyBytes_GET_SIZE(v)) + 2;
        } else if (kind == K_FLOAT) {
            if (!PyFloat_CheckExact(v))
                goto otherwise;
            double d = PyFloat_AS_DOUBLE(v);
            if (Py_IS_NAN(d)) {
                memcpy(p->text, "NaN", 3);
                p->len = 3;
            } else if (Py_IS_INFINITY(d)) {
                p->len = d > 0 ? 8 : 9;
                memcpy(p->text, d > 0 ? "Infinity" : "-Infinity", (size_t)p->len);
            } else if (str_piece(p, PyObject_Repr(v), 0, &maxchar) < 0) {
                goto failed;
            }
        } else {
            goto otherwise;
        }
        total += p->len;
        k++;
    }
    if (k != n || PyDict_GET_SIZE(row) != n)
        goto otherwise;  /* the dict changed size under a K_CALL */

    PyObject *out = PyUnicode_New(total, maxchar);
    if (out == NULL)
        goto failed;
    int okind = PyUnicode_KIND(out);
    void *data = PyUnicode_DATA(out);
    Py_ssize_t at = 0;
    for (k = 0; k < n; k++) {
        Piece *p = &pieces[k];
        at = put_str(data, okind, at, PyTuple_GET_ITEM(self->parts, k));
        switch (p->type) {
        case P_ASCII:
            if (p->quote) {
                put_char(data, okind, at++, '"');
                at = put_ascii(data, okind, at, p->text, p->len - 2);
                put_char(data, okind, at++, '"');
            } else {
                at = put_ascii(data, okind, at, p->text, p->len);
            }
            break;
        case P_STR:
            if (p->quote)
                put_char(data, okind, at++, '"');
            at = put_str(data, okind, at, p->obj);
            if (p->quote)
                put_char(data, okind, at++, '"');
            break;
        case P_ESCAPED:
            put_char(data, okind, at++, '"');
            if (p->len == PyUnicode_GET_LENGTH(p->obj) + 2)
                at = put_str(data, okind, at, p->obj);
            else
                at = put_escaped(data, okind, at, p->obj);
            put_char(data, okind, at++, '"');
            break;
        case P_B64:
            put_char(data, okind, at++, '"');
            at = put_b64(data, okind, at, (const unsigned char *)PyBytes_AS_STRING(p->obj),
                         PyBytes_GET_SIZE(p->obj));
            put_char(data, okind, at++, '"');
            break;
        }
    }
    at = put_str(data, okind, at, PyTuple_GET_ITEM(self->parts, n));
    release(pieces, n);
    if (pieces != stack_pieces)
        PyMem_Free(pieces);
    if (at != total) {  /* cannot happen: the lengths above are the ones written */
        Py_DECREF(out);
        PyErr_SetString(PyExc_SystemError, "_jsontext: row text of unexpected length");
        return NULL;
    }
    return out;

failed:
    if (!PyErr_ExceptionMatches(PyExc_Exception)) {  /* KeyboardInterrupt and the like */
        release(pieces, n);
        if (pieces != stack_pieces)
            PyMem_Free(pieces);
        return NULL;
    }
    PyErr_Clear();
otherwise:
    release(pieces, n);
    if (pieces != stack_pieces)
        PyMem_Free(pieces);
    return PyObject_CallOneArg(self->otherwise, row);
}

static PyObject *encoder_new(PyTypeObject *type, PyObject *argv, PyObject *kwargs)
{
    PyObject *parts, *kinds, *args, *otherwise;
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs)) {
        PyErr_SetString(PyExc_TypeError, "Encoder takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_ParseTuple(argv, "O!O!O!O:Encoder", &PyTuple_Type, &parts, &PyBytes_Type, &kinds,
                          &PyTuple_Type, &args, &otherwise))
        return NULL;
    Py_ssize_t n = PyBytes_GET_SIZE(kinds);
    if (PyTuple_GET_SIZE(parts) != n + 1 || PyTuple_GET_SIZE(args) != n) {
        PyErr_SetString(PyExc_ValueError, "Encoder: n + 1 parts and n args for n kinds");
        return NULL;
    }
    Py_ssize_t parts_len = 0;
    Py_UCS4 parts_max = 127;
    for (Py_ssize_t i = 0; i <= n; i++) {
        PyObject *part = PyTuple_GET_ITEM(parts, i);
        if (!PyUnicode_CheckExact(part)) {
            PyErr_SetString(PyExc_TypeError, "Encoder: parts must be str");
            return NULL;
        }
#if PY_VERSION_HEX < 0x030C0000
        if (PyUnicode_READY(part) < 0)
            return NULL;
#endif
        parts_len += PyUnicode_GET_LENGTH(part);
        if (PyUnicode_MAX_CHAR_VALUE(part) > parts_max)
            parts_max = PyUnicode_MAX_CHAR_VALUE(part);
    }
    const unsigned char *k = (const unsigned char *)PyBytes_AS_STRING(kinds);
    for (Py_ssize_t i = 0; i < n; i++) {
        int kind = k[i] & ~K_NULLABLE;
        PyObject *arg = PyTuple_GET_ITEM(args, i);
        if (kind < K_INT || kind >= K_KINDS) {
            PyErr_Format(PyExc_ValueError, "Encoder: column %zd has no kind %d", i, kind);
            return NULL;
        }
        if (kind == K_CALL && !PyCallable_Check(arg)) {
            PyErr_Format(PyExc_TypeError, "Encoder: column %zd needs a callable", i);
            return NULL;
        }
        if (kind == K_DATETIME || kind == K_TIME) {
            long limit = kind == K_DATETIME ? 26 : 6;
            long x = PyLong_Check(arg) ? PyLong_AsLong(arg) : -1;
            if (x < (kind == K_DATETIME ? 19 : 0) || x > limit || x == 20) {
                PyErr_Clear();
                PyErr_Format(PyExc_ValueError, "Encoder: column %zd has a bad text length", i);
                return NULL;
            }
        }
    }
    if (decimal_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_jsontext.setup(Decimal) was not called");
        return NULL;
    }
    Encoder *self = (Encoder *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->kinds = PyMem_Malloc((size_t)(n ? n : 1));
    self->lengths = PyMem_Calloc((size_t)(n ? n : 1), sizeof(int));
    if (self->kinds == NULL || self->lengths == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    memcpy(self->kinds, k, (size_t)n);
    for (Py_ssize_t i = 0; i < n; i++)
        if ((k[i] & ~K_NULLABLE) == K_DATETIME || (k[i] & ~K_NULLABLE) == K_TIME)
            self->lengths[i] = (int)PyLong_AsLong(PyTuple_GET_ITEM(args, i));
    self->n = n;
    self->parts = Py_NewRef(parts);
    self->args = Py_NewRef(args);
    self->otherwise = Py_NewRef(otherwise);
    self->parts_len = parts_len;
    self->parts_max = parts_max;
    self->vectorcall = encoder_vectorcall;
    return (PyObject *)self;
}

static int encoder_traverse(Encoder *self, visitproc visit, void *arg)
{
    Py_VISIT(self->parts);
    Py_VISIT(self->args);
    Py_VISIT(self->otherwise);
    return 0;
}

static int encoder_clear(Encoder *self)
{
    Py_CLEAR(self->parts);
    Py_CLEAR(self->args);
    Py_CLEAR(self->otherwise);
    return 0;
}

static void encoder_dealloc(Encoder *self)
{
    PyObject_GC_UnTrack(self);
    encoder_clear(self);
    PyMem_Free(self->kinds);
    PyMem_Free(self->lengths);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject EncoderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "relay.pipeline._jsontext.Encoder",
    .tp_basicsize = sizeof(Encoder),
    .tp_dealloc = (destructor)encoder_dealloc,
    .tp_vectorcall_offset = offsetof(Encoder, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Encoder(parts, kinds, args, otherwise): row -> its JSON text (see the module's source)",
    .tp_traverse = (traverseproc)encoder_traverse,
    .tp_clear = (inquiry)encoder_clear,
    .tp_new = encoder_new,
};

static PyObject *setup(PyObject *module, PyObject *decimal)
{
    (void)module;
    if (!PyType_Check(decimal)) {
        PyErr_SetString(PyExc_TypeError, "setup(Decimal): a type");
        return NULL;
    }
    Py_XSETREF(decimal_type, Py_NewRef(decimal));
    Py_RETURN_NONE;
}

static PyMethodDef jsontext_methods[] = {
    {"setup", setup, METH_O, "setup(Decimal): the Decimal type whose values K_DECIMAL columns write"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef jsontext_module = {
    PyModuleDef_HEAD_INIT, "relay.pipeline._jsontext",
    "The JSON text of row images in C (see relay/pipeline/jsonform.py).", -1, jsontext_methods,
};

PyMODINIT_FUNC PyInit__jsontext(void)
{
    PyDateTime_IMPORT;
    if (PyDateTimeAPI == NULL)
        return NULL;
    escape_init();
    str_f = PyUnicode_InternFromString("f");
    if (str_f == NULL || PyType_Ready(&EncoderType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&jsontext_module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&EncoderType);
    if (PyModule_AddObject(m, "Encoder", (PyObject *)&EncoderType) < 0) {
        Py_DECREF(&EncoderType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
