/*
 * relay.binlog._scan: the two per-event loops of the relay path in C.
 *
 * The relay must take events from the primary, and give them to replicas, at least as fast
 * as the primary does (docs/architecture.md, "Performance budget").  In Python the per-event work of
 * either loop costs about a microsecond or more; the primary spends less.  This module does
 * that work for the events that need no decision, and stops before any other, which the
 * Python code then handles: it stays the only place that decides, reports errors, follows
 * rotations and filters.  Without a C compiler the package installs without this module and
 * the same loops run in Python (relay/replication/stream.py, relay/replication/outbound.py).
 *
 * scan(buf, pos, seq, position, crc_on, kinds, counts, sizes) -> (pos, seq, position, events)
 *   Ingest (IngestStream.receive): takes the events inside an open group that cannot change
 *   the group state (table maps, rows events, annotations, ...), whose packet, position,
 *   flags and CRC32 are exactly as expected.
 *   buf       the bytes of the dump stream (packets: u24 length, u8 sequence id, payload)
 *   pos       offset of the next packet in buf
 *   seq       its expected sequence id
 *   position  the stored file's end, where the next event must start
 *   crc_on    whether events carry a CRC32 to verify
 *   kinds     256 bytes: per event type, 1 for the events this loop may take
 *   counts, sizes   lists of 256 ints (events and bytes per type), increased in place
 *   Returns where it stopped, and the events it took, concatenated (None if it took none).
 *
 * crc32(data, value=0) -> zlib.crc32's value, by carry-less multiplication where the CPU has it.
 *
 * frame(block, size, seq, stop_at_origin, group_starts, crc_on, leave_out, out) -> (length, used, events, last, seq)
 *   Serve (outbound.frame_block): the whole stored events at the start of block[:size] as
 *   dump packets (u24 length, sequence id, 00, event) written to the start of out (a writable
 *   buffer the dump reuses: a fresh object per block made the relay's heap grow with its
 *   clients), stopping before an event of 16 MB or more, a partial one, one whose packet would
 *   not fit in out, or a group start (group_starts: 256 bytes, 1 per type) written by server
 *   stop_at_origin (-1: none).  Events of the types marked in leave_out (256 bytes) are passed
 *   over, not framed: what a primary leaves out for this replica (annotations it did not ask
 *   for).  length: the bytes of out written; last: the offset of the last event framed.
 *
 * check(block, pos, size, offset, crc_on, kinds, state) -> (pos, state, group_end, group_last)
 *   Import and archive checks (storage/importer.check_file): passes over the whole events of
 *   block[pos:size] (the first stored at file offset `offset`) whose end position (log_pos) is
 *   their offset plus their length (mod 2^32) and, with crc_on, whose CRC32 is good, keeping
 *   binlog/groups.py's GroupTracker state as it goes, for the types whose kinds (256 bytes) say
 *   how: KIND_OTHER (leaves a group as it is; outside one, loose statement parts begin), an XID
 *   or other closer (ends the group), a MariaDB GTID (opens a transaction, or a standalone
 *   group by its FL_STANDALONE flag), a MySQL GTID.  Stops before any other event (KIND_STOP:
 *   queries, FORMAT_DESCRIPTION, ROTATE...), a partial one, or one failing a check, which the
 *   Python loop then checks and reports itself.  Returns where it stopped, the state, and the
 *   file offsets where the last group it saw end ends and where its last event starts (-1, -1:
 *   none ended).  The CRCs are computed without the GIL.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define PACKET_HEADER 4
#define EVENT_HEADER 19
#define TAKEN_MAX 2048                /* events per call; the caller simply calls again */
#define ARTIFICIAL_FLAG 0x20          /* LOG_EVENT_ARTIFICIAL_F */
#define CRC_RESIDUE 0x2144DF1Cu       /* CRC32 over data followed by its own CRC32 (LE) */

static uint32_t crc_table[8][256];

static void crc_table_init(void)
{
    for (uint32_t byte = 0; byte < 256; byte++) {
        uint32_t crc = byte;
        for (int bit = 0; bit < 8; bit++)
            crc = (crc & 1) ? 0xEDB88320u ^ (crc >> 1) : crc >> 1;
        crc_table[0][byte] = crc;
    }
    /* slicing-by-8: table k advances a byte that is followed by k more bytes */
    for (uint32_t byte = 0; byte < 256; byte++) {
        uint32_t crc = crc_table[0][byte];
        for (int k = 1; k < 8; k++) {
            crc = crc_table[0][crc & 0xFF] ^ (crc >> 8);
            crc_table[k][byte] = crc;
        }
    }
}

static inline uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_CLMUL_CRC 1
/*
 * CRC32 by carry-less multiplication (PCLMULQDQ), the folding method of Intel's "Fast CRC
 * Computation for Generic Polynomials Using PCLMULQDQ Instruction" (2009) for the reflected
 * polynomial 0xEDB88320: 64 bytes a step in four lanes, folded to one lane, then to 64 and 32
 * bits, and a Barrett reduction.  About ten times the speed of slicing-by-8: serving checks
 * the CRC32 of every stored event it sends, and at a gigabyte a second that check was half
 * the relay's CPU.  The constants are x^k mod P for the fold distances, and floor(x^64 / P)
 * with P itself for the reduction (the paper's k1..k6 and mu, bit-reflected).
 * Takes the running CRC state (not inverted at the ends) and n >= 16 bytes, n a multiple of 16.
 */
__attribute__((target("pclmul,sse4.1")))
static uint32_t crc32_clmul(uint32_t crc, const unsigned char *p, size_t n)
{
    const __m128i fold_64 = _mm_set_epi64x(0x1c6e41596LL, 0x154442bd4LL);   /* k2, k1 */
    const __m128i fold_16 = _mm_set_epi64x(0x0ccaa009eLL, 0x1751997d0LL);   /* k4, k3 */
    const __m128i fold_32 = _mm_set_epi64x(0, 0x163cd6124LL);               /* k5 */
    const __m128i barrett = _mm_set_epi64x(0x1f7011641LL, 0x1db710641LL);   /* mu, P */
    const __m128i low32 = _mm_set_epi32(0, 0, 0, -1);
#define FOLD(x, k, next) \
    _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11)), next)
    __m128i x = _mm_xor_si128(_mm_loadu_si128((const __m128i *)p), _mm_cvtsi32_si128((int)crc));
    if (n >= 64) {  /* four lanes, so that the multiplications of one step overlap */
        __m128i x1 = x;
        __m128i x2 = _mm_loadu_si128((const __m128i *)(p + 16));
        __m128i x3 = _mm_loadu_si128((const __m128i *)(p + 32));
        __m128i x4 = _mm_loadu_si128((const __m128i *)(p + 48));
        p += 64;
        n -= 64;
        while (n >= 64) {
            x1 = FOLD(x1, fold_64, _mm_loadu_si128((const __m128i *)p));
            x2 = FOLD(x2, fold_64, _mm_loadu_si128((const __m128i *)(p + 16)));
            x3 = FOLD(x3, fold_64, _mm_loadu_si128((const __m128i *)(p + 32)));
            x4 = FOLD(x4, fold_64, _mm_loadu_si128((const __m128i *)(p + 48)));
            p += 64;
            n -= 64;
        }
        x = FOLD(x1, fold_16, x2);
        x = FOLD(x, fold_16, x3);
        x = FOLD(x, fold_16, x4);
    } else {
        p += 16;
        n -= 16;
    }
    while (n >= 16) {
        x = FOLD(x, fold_16, _mm_loadu_si128((const __m128i *)p));
        p += 16;
        n -= 16;
    }
#undef FOLD
    /* 128 -> 64 bits (appending the 32 zero bits the CRC's definition adds), then -> 32 */
    x = _mm_xor_si128(_mm_srli_si128(x, 8), _mm_clmulepi64_si128(fold_16, x, 0x01));
    x = _mm_xor_si128(_mm_srli_si128(x, 4), _mm_clmulepi64_si128(_mm_and_si128(x, low32), fold_32, 0x00));
    __m128i t = _mm_and_si128(_mm_clmulepi64_si128(_mm_and_si128(x, low32), barrett, 0x10), low32);
    x = _mm_xor_si128(x, _mm_clmulepi64_si128(t, barrett, 0x00));
    return (uint32_t)_mm_extract_epi32(x, 1);
}

static int clmul_usable;  /* set once at import: the CPU has PCLMULQDQ and SSE4.1 */
#endif

/* The same value as zlib.crc32(data, start). */
static uint32_t crc32_from(uint32_t start, const unsigned char *p, size_t n)
{
    uint32_t crc = start ^ 0xFFFFFFFFu;
#ifdef HAVE_CLMUL_CRC
    if (clmul_usable && n >= 16) {
        size_t whole = n & ~(size_t)15;
        crc = crc32_clmul(crc, p, whole);
        p += whole;
        n -= whole;
    }
#endif
    while (n >= 8) {
        uint32_t low = le32(p) ^ crc, high = le32(p + 4);
        crc = crc_table[7][low & 0xFF] ^ crc_table[6][(low >> 8) & 0xFF]
            ^ crc_table[5][(low >> 16) & 0xFF] ^ crc_table[4][low >> 24]
            ^ crc_table[3][high & 0xFF] ^ crc_table[2][(high >> 8) & 0xFF]
            ^ crc_table[1][(high >> 16) & 0xFF] ^ crc_table[0][high >> 24];
        p += 8;
        n -= 8;
    }
    while (n--)
        crc = crc_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return crc ^ 0xFFFFFFFFu;
}

static inline uint32_t crc32_of(const unsigned char *p, size_t n)
{
    return crc32_from(0, p, n);
}

typedef struct {
    Py_ssize_t start;   /* of the event (after the packet header and status byte) */
    uint32_t length;
    unsigned char type;
} Taken;

/* list[t] += amount, for a list of Python ints. */
static int add_to_item(PyObject *list, int t, uint64_t amount)
{
    PyObject *added = PyLong_FromUnsignedLongLong(amount);
    if (added == NULL)
        return -1;
    PyObject *sum = PyNumber_Add(PyList_GET_ITEM(list, t), added);
    Py_DECREF(added);
    return sum == NULL ? -1 : PyList_SetItem(list, t, sum);
}

/* Adds the events taken to the caller's per-type counts and sizes, in one pass. */
static int add_counts(PyObject *counts, PyObject *sizes, const Taken *taken, int n)
{
    uint64_t events[256], bytes[256];
    unsigned char seen[256] = {0};
    for (int i = 0; i < n; i++) {
        unsigned char t = taken[i].type;
        if (!seen[t]) {
            seen[t] = 1;
            events[t] = bytes[t] = 0;
        }
        events[t]++;
        bytes[t] += taken[i].length;
    }
    for (int t = 0; t < 256; t++)
        if (seen[t] && (add_to_item(counts, t, events[t]) < 0 || add_to_item(sizes, t, bytes[t]) < 0))
            return -1;
    return 0;
}

/* METH_FASTCALL functions check their argument count themselves. */
static int takes(const char *name, Py_ssize_t expected, Py_ssize_t nargs)
{
    if (nargs == expected)
        return 1;
    PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments (%zd given)", name, expected, nargs);
    return 0;
}

static PyObject *scan(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (!takes("scan", 8, nargs))
        return NULL;
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    long seq = PyLong_AsLong(args[2]);
    long long position = PyLong_AsLongLong(args[3]);
    int crc_on = PyObject_IsTrue(args[4]);
    if (PyErr_Occurred() || crc_on < 0)
        return NULL;
    PyObject *counts = args[6], *sizes = args[7];
    if (!PyBytes_Check(args[5]) || PyBytes_GET_SIZE(args[5]) != 256
            || !PyList_Check(counts) || PyList_GET_SIZE(counts) != 256
            || !PyList_Check(sizes) || PyList_GET_SIZE(sizes) != 256) {
        PyErr_SetString(PyExc_TypeError, "scan(): kinds must be 256 bytes, counts and sizes lists of 256");
        return NULL;
    }
    const unsigned char *kinds = (const unsigned char *)PyBytes_AS_STRING(args[5]);
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *buf = view.buf;
    Py_ssize_t size = view.len;

    Taken taken[TAKEN_MAX];
    int n = 0;
    Py_ssize_t total = 0;
    /* 24 bytes: the packet header, the status byte and the event header */
    while (n < TAKEN_MAX && pos >= 0 && size - pos >= PACKET_HEADER + 1 + EVENT_HEADER) {
        const unsigned char *packet = buf + pos;
        uint32_t length = packet[0] | packet[1] << 8 | packet[2] << 16;
        const unsigned char *event = packet + PACKET_HEADER + 1;
        /* the packet must be whole, in sequence, and hold a status byte and an event header */
        if (length == 0xFFFFFF || length > (uint64_t)(size - pos - PACKET_HEADER)
                || length < 1 + EVENT_HEADER || packet[3] != seq || packet[4] != 0 || !kinds[event[4]])
            break;
        uint32_t event_length = le32(event + 9), log_pos = le32(event + 13);
        uint32_t flags = event[17] | event[18] << 8;
        /* so the event ends where its packet ends: every byte read below is inside buf */
        if (event_length != length - 1
                || (long long)log_pos - (long long)event_length != position
                || (flags & ARTIFICIAL_FLAG)
                || (crc_on && crc32_of(event, event_length) != CRC_RESIDUE))
            break;
        taken[n].start = pos + PACKET_HEADER + 1;
        taken[n].length = event_length;
        taken[n].type = event[4];
        n++;
        total += event_length;
        position += event_length;
        seq = (seq + 1) & 0xFF;
        pos += PACKET_HEADER + length;
    }

    PyObject *events = NULL, *result = NULL;
    if (n > 0) {
        events = PyBytes_FromStringAndSize(NULL, total);
        if (events == NULL)
            goto done;
        char *out = PyBytes_AS_STRING(events);
        for (int i = 0; i < n; i++) {
            memcpy(out, buf + taken[i].start, taken[i].length);
            out += taken[i].length;
        }
        if (add_counts(counts, sizes, taken, n) < 0)
            goto done;
    }
    result = Py_BuildValue("(nlLO)", pos, seq, position, events ? events : Py_None);
done:
    Py_XDECREF(events);
    PyBuffer_Release(&view);
    return result;
}

static PyObject *frame(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (!takes("frame", 8, nargs))
        return NULL;
    Py_ssize_t size = PyLong_AsSsize_t(args[1]);
    long seq = PyLong_AsLong(args[2]);
    long long stop_at_origin = PyLong_AsLongLong(args[3]);
    if (PyErr_Occurred())
        return NULL;
    if (!PyBytes_Check(args[4]) || PyBytes_GET_SIZE(args[4]) != 256) {
        PyErr_SetString(PyExc_TypeError, "frame(): group_starts must be 256 bytes");
        return NULL;
    }
    const unsigned char *group_starts = (const unsigned char *)PyBytes_AS_STRING(args[4]);
    if (!PyBytes_Check(args[6]) || PyBytes_GET_SIZE(args[6]) != 256) {
        PyErr_SetString(PyExc_TypeError, "frame(): leave_out must be 256 bytes");
        return NULL;
    }
    const unsigned char *leave_out = (const unsigned char *)PyBytes_AS_STRING(args[6]);
    int crc_on = PyObject_IsTrue(args[5]);
    if (crc_on < 0)
        return NULL;
    Py_buffer view, target;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[7], &target, PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    const unsigned char *block = view.buf;
    unsigned char *out = target.buf;
    if (size > view.len || size < 0)
        size = view.len;

    Py_ssize_t pos = 0, last = 0, written = 0;
    long events = 0;
    while (size - pos >= EVENT_HEADER) {
        uint32_t length = le32(block + pos + 9), payload = length + 1;
        if (length < EVENT_HEADER || length > (uint64_t)(size - pos) || length + 1 >= 0xFFFFFF)
            break;
        if (stop_at_origin >= 0 && group_starts[block[pos + 4]]
                && le32(block + pos + 5) == (uint64_t)stop_at_origin)
            break;
        /* a stored event that fails its CRC is left to the general path, which reports it */
        if (crc_on && crc32_of(block + pos, length) != CRC_RESIDUE)
            break;
        if (!leave_out[block[pos + 4]]) {
            if (target.len - written < PACKET_HEADER + 1 + (Py_ssize_t)length)
                break;
            unsigned char *packet = out + written;
            packet[0] = payload & 0xFF;
            packet[1] = (payload >> 8) & 0xFF;
            packet[2] = (payload >> 16) & 0xFF;
            packet[3] = (unsigned char)seq;
            packet[4] = 0;
            memcpy(packet + PACKET_HEADER + 1, block + pos, length);
            written += PACKET_HEADER + 1 + length;
            seq = (seq + 1) & 0xFF;
            last = pos;
            events++;
        }
        pos += length;
    }
    PyBuffer_Release(&target);
    PyBuffer_Release(&view);
    return Py_BuildValue("(nnlnl)", written, pos, events, last, seq);
}

/* find() and split(): block[:size] from pos, clamped to the buffer, whose view the caller releases. */
static int block_span(PyObject *const *args, Py_buffer *view, Py_ssize_t *pos, Py_ssize_t *size)
{
    *pos = PyLong_AsSsize_t(args[1]);
    *size = PyLong_AsSsize_t(args[2]);
    if (PyErr_Occurred() || PyObject_GetBuffer(args[0], view, PyBUF_SIMPLE) < 0)
        return 0;
    if (*size > view->len)
        *size = view->len;
    if (*pos < 0)
        *pos = 0;
    return 1;
}

/* The length of the whole event at pos in block[:size]; 0 when it is cut short or its length is
 * below a header's. */
static inline uint32_t whole_event_at(const unsigned char *block, Py_ssize_t pos, Py_ssize_t size)
{
    if (size - pos < EVENT_HEADER)
        return 0;
    uint32_t length = le32(block + pos + 9);
    return length < EVENT_HEADER || length > (uint64_t)(size - pos) ? 0 : length;
}

/* Walking a stored file for a few event types (the GTIDs of a file): only the headers are read. */
static PyObject *find(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (!takes("find", 4, nargs))
        return NULL;
    if (!PyBytes_Check(args[3]) || PyBytes_GET_SIZE(args[3]) != 256) {
        PyErr_SetString(PyExc_TypeError, "find(): types must be 256 bytes");
        return NULL;
    }
    const unsigned char *types = (const unsigned char *)PyBytes_AS_STRING(args[3]);
    Py_buffer view;
    Py_ssize_t pos, size;
    if (!block_span(args, &view, &pos, &size))
        return NULL;
    const unsigned char *block = view.buf;
    int found = 0;
    uint32_t length;
    while ((length = whole_event_at(block, pos, size)) != 0) {
        if (types[block[pos + 4]]) {
            found = 1;
            break;
        }
        pos += length;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(nO)", pos, found ? Py_True : Py_False);
}

/*
 * split(buf, pos, size, base) -> (events, pos): the whole events from pos in buf[:size], each as
 * (base + its offset, a copy of its bytes), and where they end: at a partial event, or at a header
 * whose length cannot be right (below 19; the caller tells the two apart).  For readers that take
 * every event (the pipeline's decoders): finding and slicing them was a quarter of their time.
 */
static PyObject *split(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (!takes("split", 4, nargs))
        return NULL;
    long long base = PyLong_AsLongLong(args[3]);
    if (PyErr_Occurred())
        return NULL;
    Py_buffer view;
    Py_ssize_t pos, size;
    if (!block_span(args, &view, &pos, &size))
        return NULL;
    const unsigned char *block = view.buf;
    PyObject *events = PyList_New(0);
    uint32_t length;
    while (events != NULL && (length = whole_event_at(block, pos, size)) != 0) {
        PyObject *event = PyBytes_FromStringAndSize((const char *)block + pos, length);
        PyObject *item = event != NULL ? Py_BuildValue("(LN)", base + pos, event) : NULL;
        if (item == NULL || PyList_Append(events, item) < 0)
            Py_CLEAR(events);
        Py_XDECREF(item);
        pos += length;
    }
    PyBuffer_Release(&view);
    if (events == NULL)
        return NULL;
    return Py_BuildValue("(Nn)", events, pos);
}

/* check()'s kinds, and binlog/groups.py's states (storage/importer.py passes both as they are here) */
enum { KIND_STOP, KIND_OTHER, KIND_CLOSER, KIND_MARIADB_GTID, KIND_MYSQL_GTID };
enum { STATE_OUTSIDE, STATE_AFTER_MYSQL_GTID, STATE_IN_TRANSACTION, STATE_STANDALONE, STATE_LOOSE };
#define GTID_FLAGS2 (EVENT_HEADER + 12)  /* a MariaDB GTID event's flags byte */
#define FL_STANDALONE 1

static PyObject *check(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (!takes("check", 7, nargs))
        return NULL;
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]), size = PyLong_AsSsize_t(args[2]);
    long long offset = PyLong_AsLongLong(args[3]);
    int crc_on = PyObject_IsTrue(args[4]);
    long state = PyLong_AsLong(args[6]);
    if (PyErr_Occurred() || crc_on < 0)
        return NULL;
    if (!PyBytes_Check(args[5]) || PyBytes_GET_SIZE(args[5]) != 256) {
        PyErr_SetString(PyExc_TypeError, "check(): kinds must be 256 bytes");
        return NULL;
    }
    const unsigned char *kinds = (const unsigned char *)PyBytes_AS_STRING(args[5]);
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *block = view.buf;
    if (size > view.len)
        size = view.len;
    if (pos < 0)
        pos = 0;
    long long file_at = offset, group_end = -1, group_last = -1;
    uint32_t at = (uint32_t)offset;  /* the file offset of block[pos], mod 2^32 as log_pos is */
    Py_BEGIN_ALLOW_THREADS
    while (size - pos >= EVENT_HEADER) {
        const unsigned char *event = block + pos;
        uint32_t length = le32(event + 9);
        int kind = kinds[event[4]];
        if (length < EVENT_HEADER || length > (uint64_t)(size - pos) || kind == KIND_STOP
                || (kind == KIND_MARIADB_GTID && length <= GTID_FLAGS2)
                || (uint32_t)(le32(event + 13) - length) != at
                || (crc_on && (length < EVENT_HEADER + 4 || crc32_from(0, event, length) != CRC_RESIDUE)))
            break;
        switch (kind) {
        case KIND_CLOSER:
            state = STATE_OUTSIDE;
            group_last = file_at;
            group_end = file_at + length;
            break;
        case KIND_MARIADB_GTID:
            state = event[GTID_FLAGS2] & FL_STANDALONE ? STATE_STANDALONE : STATE_IN_TRANSACTION;
            break;
        case KIND_MYSQL_GTID:
            state = STATE_AFTER_MYSQL_GTID;
            break;
        default:
            if (state == STATE_OUTSIDE)
                state = STATE_LOOSE;
        }
        pos += length;
        at += length;
        file_at += length;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return Py_BuildValue("(nlLL)", pos, state, group_end, group_last);
}

static PyObject *crc32_py(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs < 1 || nargs > 2) {
        PyErr_Format(PyExc_TypeError, "crc32() takes 1 or 2 arguments (%zd given)", nargs);
        return NULL;
    }
    uint32_t start = 0;
    if (nargs == 2) {
        start = (uint32_t)PyLong_AsUnsignedLongMask(args[1]);
        if (PyErr_Occurred())
            return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    uint32_t crc;
    if (view.len < (1 << 20)) {
        crc = crc32_from(start, view.buf, (size_t)view.len);
    } else {  /* a large event's megabytes: other threads (an fsync's hand-back) go on meanwhile */
        Py_BEGIN_ALLOW_THREADS
        crc = crc32_from(start, view.buf, (size_t)view.len);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}


/*
 * Spans of the index of the stored history (relay/gtid/spans.py, where the walk is written
 * in Python too: PySpanWalker, the reference).  Ingest tells the walker every event it stores,
 * so the walk must cost next to nothing: per event it reads the type, and per group the GTID.
 * Its state lives in a bytearray (span_walker()) that only this file reads.
 *
 * span_walker() -> bytearray;  span_reset(ctx, offset, crc);  span_position(ctx) -> (offset,
 * clean_end, span_start, broken);  span_walk(ctx, chunks, offset, sink);  span_walk_block(ctx,
 * block, size, sink, interval) -> bytes used (stopping at the first clean point interval bytes
 * past the span's start, when interval > 0);  span_take(ctx, reset) -> the span's fields.
 * sink: a list the MySQL GTID events walked are appended to (copies), closed groups' first.
 */
#define SPAN_PAIRS 8   /* to begin with: the bytearray grows for more (domain, server_id) pairs */
#define SPAN_LOOSE 64
#define SPAN_MAGIC 0x5350414eu

enum { M_NONE, M_STANDALONE, M_TRANSACTION, M_MYSQL_GROUP, M_MYSQL_TRANSACTION };
enum { K_NONE, K_MARIADB, K_MYSQL, K_ANONYMOUS };
enum { T_QUERY = 2, T_INTVAR = 5, T_RAND = 13, T_USER_VAR = 14, T_FDE = 15, T_XID = 16, T_TABLE_MAP = 19,
       T_MYSQL_GTID = 33, T_ANONYMOUS_GTID = 34, T_XA_PREPARE = 38, T_PAYLOAD = 40, T_TAGGED_GTID = 42,
       T_ANNOTATE_ROWS = 160, T_GTID = 162 };

typedef struct {
    uint32_t domain, server;
    uint64_t count, lo, hi, last, ordinal;
} SpanPair;

typedef struct {
    uint32_t magic;
    int32_t crc, broken, mode;
    int64_t offset;
    int32_t open_kind;
    uint32_t open_domain, open_server, open_ts;
    uint64_t open_seq;
    int64_t open_at;
    int64_t start, clean_end, last_event_at, last_commit_at, last_gtid_at;
    uint64_t groups, anonymous, ordinal;
    int32_t has_ts;
    uint32_t first_ts, commit_lo, commit_hi, last_commit_ts;
    int32_t npairs, capacity, nloose, barrier;
    int64_t mysql_closed;
    int64_t loose[SPAN_LOOSE];
    SpanPair pairs[];  /* capacity of them */
} SpanWalker;

static void span_new(SpanWalker *w, int64_t start)
{
    w->start = w->clean_end = start;
    w->last_event_at = -1;
    w->last_commit_at = w->last_gtid_at = -1;
    w->groups = w->anonymous = w->ordinal = 0;
    w->has_ts = 0;
    w->first_ts = w->commit_lo = w->commit_hi = w->last_commit_ts = 0;
    w->npairs = w->nloose = w->barrier = 0;
    w->mysql_closed = 0;
}

static SpanWalker *span_ctx(PyObject *ctx)
{
    SpanWalker *w = PyByteArray_Check(ctx) && PyByteArray_GET_SIZE(ctx) >= (Py_ssize_t)sizeof(SpanWalker)
        ? (SpanWalker *)PyByteArray_AS_STRING(ctx) : NULL;
    if (w == NULL || w->magic != SPAN_MAGIC
            || PyByteArray_GET_SIZE(ctx) != (Py_ssize_t)(sizeof(SpanWalker) + w->capacity * sizeof(SpanPair))) {
        PyErr_SetString(PyExc_TypeError, "not a span walker (span_walker())");
        return NULL;
    }
    return w;
}

/* Room for one more pair: the bytearray grows (so the walker's address may change). */
static SpanWalker *span_grow(PyObject *ctx)
{
    SpanWalker *w = (SpanWalker *)PyByteArray_AS_STRING(ctx);
    int32_t capacity = w->capacity * 2;
    if (PyByteArray_Resize(ctx, (Py_ssize_t)(sizeof(SpanWalker) + capacity * sizeof(SpanPair))) < 0)
        return NULL;
    w = (SpanWalker *)PyByteArray_AS_STRING(ctx);
    w->capacity = capacity;
    return w;
}

static int part_of_group(unsigned char t)
{
    return t == T_GTID || t == T_INTVAR || t == T_RAND || t == T_USER_VAR || t == T_TABLE_MAP || t == T_ANNOTATE_ROWS;
}

/* Query_log_event::peek_is_commit_rollback, as gtidstart.py reads it. */
static int commits_or_rolls_back(const unsigned char *e, uint32_t len, int crc)
{
    int64_t end = (int64_t)len - (crc ? 4 : 0);
    if (end >= 7 && memcmp(e + end - 7, "\0COMMIT", 7) == 0)
        return 1;
    return end >= 9 && memcmp(e + end - 9, "\0ROLLBACK", 9) == 0;
}

/* The first 12 bytes of a QUERY event's statement, upper-cased (spans.query_head). */
static size_t query_head(const unsigned char *e, uint32_t len, char *head)
{
    if (len < EVENT_HEADER + 13)
        return 0;
    size_t start = EVENT_HEADER + 13 + (e[EVENT_HEADER + 11] | e[EVENT_HEADER + 12] << 8) + e[EVENT_HEADER + 8] + 1;
    size_t n = 0;
    for (; n < 12 && start + n < len; n++) {
        unsigned char c = e[start + n];
        head[n] = (char)(c >= 'a' && c <= 'z' ? c - 32 : c);
    }
    return n;
}

static int starts(const char *head, size_t n, const char *word)
{
    size_t k = strlen(word);
    return n >= k && memcmp(head, word, k) == 0;
}

static int span_ends_group(SpanWalker *w, const unsigned char *e, uint32_t len)
{
    unsigned char t = e[4];
    if (w->mode == M_TRANSACTION)
        return t == T_XID || t == T_XA_PREPARE || (t == T_QUERY && commits_or_rolls_back(e, len, w->crc));
    if (w->mode == M_STANDALONE)
        return !part_of_group(t);
    if (t == T_XID || t == T_XA_PREPARE || t == T_PAYLOAD)
        return 1;
    if (t != T_QUERY)
        return 0;
    char head[12];
    size_t n = query_head(e, len, head);
    if (w->mode == M_MYSQL_GROUP && (starts(head, n, "BEGIN") || starts(head, n, "XA START")
                                      || starts(head, n, "XA BEGIN"))) {
        w->mode = M_MYSQL_TRANSACTION;
        return 0;
    }
    return w->mode == M_MYSQL_GROUP || ((starts(head, n, "COMMIT") || starts(head, n, "ROLLBACK")
                                        || starts(head, n, "XA COMMIT") || starts(head, n, "XA ROLLBACK"))
                                       && !starts(head, n, "ROLLBACK TO"));
}

/* The open group ends (at the event at ``at``); returns the walker (which may have moved), or NULL. */
static SpanWalker *span_close(PyObject *ctx, SpanWalker *w, int64_t at, uint32_t len, uint32_t commit_ts,
                              int unended, Py_ssize_t sunk)
{
    w->ordinal++;
    if (w->open_kind == K_MARIADB) {
        int i = 0;
        while (i < w->npairs && !(w->pairs[i].domain == w->open_domain && w->pairs[i].server == w->open_server))
            i++;
        if (i == w->npairs) {
            if (w->npairs == w->capacity && (w = span_grow(ctx)) == NULL)
                return NULL;
            SpanPair *p = &w->pairs[w->npairs++];
            p->domain = w->open_domain;
            p->server = w->open_server;
            p->count = 0;
            p->lo = p->hi = w->open_seq;
        }
        SpanPair *p = &w->pairs[i];
        p->count++;
        if (w->open_seq < p->lo)
            p->lo = w->open_seq;
        if (w->open_seq > p->hi)
            p->hi = w->open_seq;
        p->last = w->open_seq;
        p->ordinal = w->ordinal;
    } else if (w->open_kind == K_MYSQL) {
        w->mysql_closed = sunk;
    } else {
        w->anonymous++;
    }
    w->groups++;
    if (!w->has_ts) {
        w->has_ts = 1;
        w->first_ts = w->open_ts;
        w->commit_lo = w->commit_hi = commit_ts;
    } else {
        if (commit_ts < w->commit_lo)
            w->commit_lo = commit_ts;
        if (commit_ts > w->commit_hi)
            w->commit_hi = commit_ts;
    }
    w->last_commit_ts = commit_ts;
    w->last_gtid_at = w->open_at;
    w->mode = M_NONE;
    w->open_kind = K_NONE;
    if (!unended) {
        w->last_commit_at = at;
        w->clean_end = at + len;
        w->last_event_at = at;
    }
    return w;
}

/* One event; returns the walker (which may have moved), or NULL with a Python error set. */
static SpanWalker *span_event(PyObject *ctx, SpanWalker *w, const unsigned char *e, uint32_t len, int64_t at,
                              PyObject *sink)
{
    unsigned char t = e[4];
    if (t == T_GTID) {
        if (len < EVENT_HEADER + 13) {
            w->broken = 1;
            return w;
        }
        if (w->open_kind != K_NONE && (w = span_close(ctx, w, w->open_at, 0, w->open_ts, 1, PyList_GET_SIZE(sink))) == NULL)
            return NULL;
        w->open_kind = K_MARIADB;
        w->open_seq = (uint64_t)le32(e + EVENT_HEADER) | (uint64_t)le32(e + EVENT_HEADER + 4) << 32;
        w->open_domain = le32(e + EVENT_HEADER + 8);
        w->open_server = le32(e + 5);
        w->open_ts = le32(e);
        w->open_at = at;
        w->mode = (e[EVENT_HEADER + 12] & 1) ? M_STANDALONE : M_TRANSACTION;
    } else if (t == T_MYSQL_GTID || t == T_TAGGED_GTID || t == T_ANONYMOUS_GTID) {
        if (w->open_kind != K_NONE && (w = span_close(ctx, w, w->open_at, 0, w->open_ts, 1, PyList_GET_SIZE(sink))) == NULL)
            return NULL;
        w->open_kind = t == T_ANONYMOUS_GTID ? K_ANONYMOUS : K_MYSQL;
        w->open_ts = le32(e);
        w->open_at = at;
        if (w->open_kind == K_MYSQL) {
            PyObject *copy = PyBytes_FromStringAndSize((const char *)e, len);
            if (copy == NULL || PyList_Append(sink, copy) < 0) {
                Py_XDECREF(copy);
                return NULL;
            }
            Py_DECREF(copy);
        }
        w->mode = M_MYSQL_GROUP;
    } else if (w->mode == M_NONE) {
        if (t == T_FDE)
            w->crc = len >= EVENT_HEADER + 57 + 5 && e[len - 5] == 1;
        if (w->nloose < SPAN_LOOSE)
            w->loose[w->nloose++] = at;
        else
            w->barrier = 1;
        w->clean_end = at + len;
        w->last_event_at = at;
    } else if (span_ends_group(w, e, len)) {
        return span_close(ctx, w, at, len, le32(e), 0, PyList_GET_SIZE(sink));
    }
    return w;
}

/* The whole events at the start of buf[:size], or (interval > 0) up to the first clean point
   interval bytes or more past the span's start; returns the bytes used, or -1 on error. */
static Py_ssize_t span_events(PyObject *ctx, const unsigned char *buf, Py_ssize_t size, PyObject *sink,
                              long long interval)
{
    SpanWalker *w = (SpanWalker *)PyByteArray_AS_STRING(ctx);
    Py_ssize_t pos = 0;
    while (!w->broken && size - pos >= EVENT_HEADER) {
        uint32_t len = le32(buf + pos + 9);
        if (len < EVENT_HEADER || len > (uint64_t)(size - pos))
            break;
        if ((w = span_event(ctx, w, buf + pos, len, w->offset, sink)) == NULL)
            return -1;
        w->offset += len;
        pos += len;
        if (interval > 0 && w->clean_end == w->offset && w->clean_end - w->start >= interval)
            break;
    }
    return pos;
}

static PyObject *span_walker_new(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    Py_ssize_t size = (Py_ssize_t)(sizeof(SpanWalker) + SPAN_PAIRS * sizeof(SpanPair));
    PyObject *ctx = PyByteArray_FromStringAndSize(NULL, size);
    if (ctx == NULL)
        return NULL;
    SpanWalker *w = (SpanWalker *)PyByteArray_AS_STRING(ctx);
    memset(w, 0, size);
    w->magic = SPAN_MAGIC;
    w->capacity = SPAN_PAIRS;
    w->offset = 4;
    span_new(w, 4);
    return ctx;
}

static PyObject *span_reset(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (!takes("span_reset", 3, nargs))
        return NULL;
    SpanWalker *w = span_ctx(args[0]);
    long long offset = PyLong_AsLongLong(args[1]);
    int crc = PyObject_IsTrue(args[2]);
    if (w == NULL || PyErr_Occurred() || crc < 0)
        return NULL;
    w->offset = offset;
    w->crc = crc;
    w->broken = 0;
    w->mode = M_NONE;
    w->open_kind = K_NONE;
    span_new(w, offset);
    Py_RETURN_NONE;
}

static PyObject *span_position(PyObject *module, PyObject *ctx)
{
    (void)module;
    SpanWalker *w = span_ctx(ctx);
    if (w == NULL)
        return NULL;
    return Py_BuildValue("(LLLi)", (long long)w->offset, (long long)w->clean_end, (long long)w->start, w->broken);
}

/* A chunk's bytes without acquiring a buffer where the type allows (ingest passes many). */
static int chunk_bytes(PyObject *chunk, const unsigned char **data, Py_ssize_t *size, Py_buffer *view, int *held)
{
    *held = 0;
    if (PyBytes_Check(chunk)) {
        *data = (const unsigned char *)PyBytes_AS_STRING(chunk);
        *size = PyBytes_GET_SIZE(chunk);
        return 0;
    }
    if (PyMemoryView_Check(chunk) && PyBuffer_IsContiguous(PyMemoryView_GET_BUFFER(chunk), 'C')) {
        Py_buffer *b = PyMemoryView_GET_BUFFER(chunk);
        *data = b->buf;
        *size = b->len;
        return 0;
    }
    if (PyObject_GetBuffer(chunk, view, PyBUF_SIMPLE) < 0)
        return -1;
    *held = 1;
    *data = view->buf;
    *size = view->len;
    return 0;
}

static PyObject *span_walk(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (!takes("span_walk", 4, nargs))
        return NULL;
    SpanWalker *w = span_ctx(args[0]);
    long long offset = PyLong_AsLongLong(args[2]);
    if (w == NULL || PyErr_Occurred())
        return NULL;
    if (!PyList_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "span_walk(): sink must be a list");
        return NULL;
    }
    if (offset != w->offset) {
        PyErr_Format(PyExc_ValueError, "the walk is at %lld, not %lld", (long long)w->offset, offset);
        return NULL;
    }
    PyObject *chunks = PySequence_Fast(args[1], "span_walk(): chunks must be a sequence");
    if (chunks == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(chunks);
    PyObject **items = PySequence_Fast_ITEMS(chunks);
    for (Py_ssize_t i = 0; i < n; i++) {
        const unsigned char *data;
        Py_ssize_t size;
        Py_buffer view;
        int held;
        if (chunk_bytes(items[i], &data, &size, &view, &held) < 0) {
            Py_DECREF(chunks);
            return NULL;
        }
        Py_ssize_t used = span_events(args[0], data, size, args[3], 0);
        if (held)
            PyBuffer_Release(&view);
        if (used < 0) {
            Py_DECREF(chunks);
            return NULL;
        }
        if (used != size)  /* ingest's chunks are whole events: anything else is not a binlog */
            ((SpanWalker *)PyByteArray_AS_STRING(args[0]))->broken = 1;
    }
    Py_DECREF(chunks);
    Py_RETURN_NONE;
}

static PyObject *span_walk_block(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (!takes("span_walk_block", 5, nargs))
        return NULL;
    SpanWalker *w = span_ctx(args[0]);
    Py_ssize_t size = PyLong_AsSsize_t(args[2]);
    long long interval = PyLong_AsLongLong(args[4]);
    if (w == NULL || PyErr_Occurred())
        return NULL;
    if (!PyList_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "span_walk_block(): sink must be a list");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[1], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (size > view.len || size < 0)
        size = view.len;
    Py_ssize_t used = span_events(args[0], view.buf, size, args[3], interval);
    PyBuffer_Release(&view);
    return used < 0 ? NULL : PyLong_FromSsize_t(used);
}

static PyObject *optional_offset(int64_t value)
{
    if (value < 0)
        Py_RETURN_NONE;
    return PyLong_FromLongLong(value);
}

static PyObject *optional_ts(int has, uint32_t value)
{
    if (!has)
        Py_RETURN_NONE;
    return PyLong_FromUnsignedLong(value);
}

static PyObject *span_take(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (!takes("span_take", 2, nargs))
        return NULL;
    SpanWalker *w = span_ctx(args[0]);
    int reset = PyObject_IsTrue(args[1]);
    if (w == NULL || reset < 0)
        return NULL;
    PyObject *pairs = PyTuple_New(w->npairs), *loose = PyTuple_New(w->nloose), *result = NULL;
    if (pairs == NULL || loose == NULL)
        goto done;
    for (int i = 0; i < w->npairs; i++) {
        SpanPair *p = &w->pairs[i];
        PyObject *pair = Py_BuildValue("(kkKKKKK)", (unsigned long)p->domain, (unsigned long)p->server,
                                       (unsigned long long)p->count, (unsigned long long)p->lo,
                                       (unsigned long long)p->hi, (unsigned long long)p->last,
                                       (unsigned long long)p->ordinal);
        if (pair == NULL)
            goto done;
        PyTuple_SET_ITEM(pairs, i, pair);
    }
    for (int i = 0; i < w->nloose; i++) {
        PyObject *at = PyLong_FromLongLong(w->loose[i]);
        if (at == NULL)
            goto done;
        PyTuple_SET_ITEM(loose, i, at);
    }
    result = Py_BuildValue("(LLLKKNNNNNNOOiL)", (long long)w->start, (long long)w->clean_end,
                           (long long)w->last_event_at, (unsigned long long)w->groups,
                           (unsigned long long)w->anonymous, optional_ts(w->has_ts, w->first_ts),
                           optional_ts(w->has_ts, w->commit_lo), optional_ts(w->has_ts, w->commit_hi),
                           optional_ts(w->has_ts, w->last_commit_ts), optional_offset(w->last_commit_at),
                           optional_offset(w->last_gtid_at), pairs, loose, w->barrier,
                           (long long)w->mysql_closed);
    if (result != NULL && reset) {
        int32_t mode = w->mode, kind = w->open_kind;
        span_new(w, w->clean_end);
        w->mode = mode;
        w->open_kind = kind;
    }
done:
    Py_XDECREF(pairs);
    Py_XDECREF(loose);
    return result;
}

static PyMethodDef scan_methods[] = {
    {"scan", (PyCFunction)(void (*)(void))scan, METH_FASTCALL,
     "scan(buf, pos, seq, position, crc_on, kinds, counts, sizes) -> (pos, seq, position, events)"},
    {"frame", (PyCFunction)(void (*)(void))frame, METH_FASTCALL,
     "frame(block, size, seq, stop_at_origin, group_starts, crc_on, leave_out, out) -> (length, used, events, last, seq)"},
    {"split", (PyCFunction)(void (*)(void))split, METH_FASTCALL,
     "split(buf, pos, size, base) -> (events, pos): the whole events, (offset, bytes) each"},
    {"find", (PyCFunction)(void (*)(void))find, METH_FASTCALL,
     "find(block, pos, size, types) -> (offset, found): the first whole event from pos of a type marked in types"},
    {"check", (PyCFunction)(void (*)(void))check, METH_FASTCALL,
     "check(block, pos, size, offset, crc_on, kinds, state) -> (pos, state, group_end, group_last): past the "
     "whole, sound events whose kind it knows, keeping the group state"},
    {"crc32", (PyCFunction)(void (*)(void))crc32_py, METH_FASTCALL,
     "crc32(data, value=0) -> int, the same value as zlib.crc32(data, value)"},
    {"span_walker", (PyCFunction)span_walker_new, METH_NOARGS, "span_walker() -> a new span walker (bytearray)"},
    {"span_reset", (PyCFunction)(void (*)(void))span_reset, METH_FASTCALL, "span_reset(ctx, offset, crc)"},
    {"span_position", (PyCFunction)span_position, METH_O, "span_position(ctx) -> (offset, clean_end, start, broken)"},
    {"span_walk", (PyCFunction)(void (*)(void))span_walk, METH_FASTCALL, "span_walk(ctx, chunks, offset, sink)"},
    {"span_walk_block", (PyCFunction)(void (*)(void))span_walk_block, METH_FASTCALL,
     "span_walk_block(ctx, block, size, sink, interval) -> bytes of whole events walked"},
    {"span_take", (PyCFunction)(void (*)(void))span_take, METH_FASTCALL, "span_take(ctx, reset) -> the span's fields"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef scan_module = {
    PyModuleDef_HEAD_INIT, "relay.binlog._scan",
    "The per-event loops of the relay path in C (see stream.py and outbound.py).", -1, scan_methods,
};

PyMODINIT_FUNC PyInit__scan(void)
{
    crc_table_init();
    int clmul = 0;
#ifdef HAVE_CLMUL_CRC
    __builtin_cpu_init();
    clmul = clmul_usable = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1")
        && getenv("BINLOG_RELAY_NO_CLMUL") == NULL;
#endif
    PyObject *m = PyModule_Create(&scan_module);
    /* which CRC32 loop runs (the tests check that the choice is made) */
    if (m != NULL && PyModule_AddIntConstant(m, "CLMUL", clmul) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
