/*
 * runs._chain: the hash chain's steps for a whole batch of events in one call.
 *
 * The definitions live in runs/verify.py (and docs/evidence.md); runs/canonical.py holds the same
 * functions in Python and uses them whenever this module is not built. Each hashlib call costs
 * about half a microsecond before it hashes a byte (OpenSSL's context set-up), one per event,
 * which is much of what the chain adds to a batch append or an import. Here the context is set
 * up once per call, and each event's canonical bytes are built in one allocation.
 *
 *   canonicals(raws, first_seq, tails) -> list[bytes]
 *       b'{"payload":' + raws[i] + b',"seq":' + str(first_seq + i) + tails[i]
 *   links(prev, canons) -> list[bytes]
 *       hash[i] = sha256(hash[i - 1] + canons[i]), hash[-1] = prev
 *   links_framed(prev, canons, prefix) -> bytes
 *       the same hashes as one text, each preceded by prefix (a length word of a binary array)
 *   links_parts(prev, raws, first_seq, tails, prefix) -> bytes
 *       links_framed(prev, canonicals(raws, first_seq, tails), prefix), each event's bytes hashed
 *       where they lie (a batch's common case: no bytes object per event)
 *   plain(text, needles) -> bool
 *       whether orjson's sorted text is certainly RFC 8785's (canonical.py's _orjson_exact) and
 *       contains none of needles (the sealed field names), in one pass and memmem each
 *   canonical_one(raw, seq, ts, type_tail, needles) -> bytes | None
 *       one event's canonical bytes when plain(raw, needles), else None: its frame's time written
 *       here from ts (a UTC datetime) as '2026-01-01T00:00:00.000000Z', the rest as canonicals does
 *   strict_proved(raw, value) -> bool
 *       whether the bytes of a JSON document prove that value, orjson's decoding of them, holds
 *       nothing runs.json_strict refuses (json_strict.py's _proved, which says why that is exact)
 */
#define PY_SSIZE_T_CLEAN
/* SHA256_Init/Update/Final: deprecated in OpenSSL 3 in favour of EVP, which costs a third more per
 * small message (its provider dispatch); the functions are still part of libcrypto 3. */
#define OPENSSL_SUPPRESS_DEPRECATED
#include <Python.h>
#include <datetime.h>
#include <openssl/sha.h>
#include <string.h>

#define DIGEST_LEN 32

static const char PAYLOAD_OPEN[] = "{\"payload\":";

static int
bytes_of(PyObject *obj, const char *what, Py_ssize_t i, const char **buf, Py_ssize_t *len)
{
    if (!PyBytes_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s[%zd] must be bytes, not %.100s", what, i, Py_TYPE(obj)->tp_name);
        return -1;
    }
    *buf = PyBytes_AS_STRING(obj);
    *len = PyBytes_GET_SIZE(obj);
    return 0;
}

/* sha256 of the k parts, one after another, into out: 0, or -1 with an exception set. */
static int
hash_parts(int k, const void *const parts[], const size_t lens[], unsigned char out[DIGEST_LEN])
{
    SHA256_CTX ctx;
    int ok = SHA256_Init(&ctx);
    for (int j = 0; ok && j < k; j++)
        ok = SHA256_Update(&ctx, parts[j], lens[j]);
    if (!ok || !SHA256_Final(out, &ctx)) {
        PyErr_SetString(PyExc_RuntimeError, "OpenSSL failed to compute a SHA-256");
        return -1;
    }
    return 0;
}

/* list[i] = the 32 bytes of digest: 0, or -1 with an exception set. */
static int
list_set_digest(PyObject *list, Py_ssize_t i, const unsigned char digest[DIGEST_LEN])
{
    PyObject *item = PyBytes_FromStringAndSize((const char *)digest, DIGEST_LEN);
    if (item == NULL)
        return -1;
    PyList_SET_ITEM(list, i, item);
    return 0;
}

/* ',"seq":N' into out, N in decimal as JSON writes an integer; returns its length. */
static int
seq_frame(char out[40], long long seq)
{
    static const char head[] = ",\"seq\":";
    memcpy(out, head, sizeof head - 1);
    char *w = out + sizeof head - 1;
    unsigned long long u = seq < 0 ? 0ULL - (unsigned long long)seq : (unsigned long long)seq;
    if (seq < 0)
        *w++ = '-';
    char digits[20];
    int k = 0;
    do {
        digits[k++] = (char)('0' + u % 10);
        u /= 10;
    } while (u != 0);
    while (k > 0)
        *w++ = digits[--k];
    return (int)(w - out);
}

/* The k parts, one after another, as one bytes object (NULL with an exception set). */
static PyObject *
joined(int k, const void *const parts[], const size_t lens[])
{
    size_t total = 0;
    for (int j = 0; j < k; j++)
        total += lens[j];
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (out == NULL)
        return NULL;
    char *w = PyBytes_AS_STRING(out);
    for (int j = 0; j < k; j++) {
        memcpy(w, parts[j], lens[j]);
        w += lens[j];
    }
    return out;
}

static PyObject *
chain_canonicals(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *raws, *tails;
    long long first_seq;
    if (!PyArg_ParseTuple(args, "O!LO!:canonicals", &PyList_Type, &raws, &first_seq, &PyList_Type, &tails))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(raws);
    if (PyList_GET_SIZE(tails) != n) {
        PyErr_SetString(PyExc_ValueError, "canonicals: raws and tails differ in length");
        return NULL;
    }
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    char seq_text[40];
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *raw, *tail;
        Py_ssize_t raw_len, tail_len;
        if (bytes_of(PyList_GET_ITEM(raws, i), "raws", i, &raw, &raw_len) < 0
            || bytes_of(PyList_GET_ITEM(tails, i), "tails", i, &tail, &tail_len) < 0)
            goto fail;
        int seq_len = seq_frame(seq_text, first_seq + (long long)i);
        const void *parts[] = {PAYLOAD_OPEN, raw, seq_text, tail};
        const size_t lens[] = {sizeof PAYLOAD_OPEN - 1, (size_t)raw_len, (size_t)seq_len, (size_t)tail_len};
        PyObject *item = joined(4, parts, lens);
        if (item == NULL)
            goto fail;
        PyList_SET_ITEM(out, i, item);
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* The chain's hashes after prev, one after another in one bytes object, each preceded by prefix;
 * fn names the caller in messages. The entries are canons' items, or, when canons is NULL, the
 * canonical bytes canonicals(raws, first_seq, tails) would build, hashed where their parts lie. */
static PyObject *
linked_text(const char *fn, const char *prev, Py_ssize_t prev_len, PyObject *canons, PyObject *raws, long long first_seq, PyObject *tails,
            const char *prefix, Py_ssize_t prefix_len)
{
    if (prev_len != DIGEST_LEN) {
        PyErr_Format(PyExc_ValueError, "%s: prev must be a 32-byte hash", fn);
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(canons != NULL ? canons : raws);
    if (canons == NULL && PyList_GET_SIZE(tails) != n) {
        PyErr_Format(PyExc_ValueError, "%s: raws and tails differ in length", fn);
        return NULL;
    }
    Py_ssize_t item = prefix_len + DIGEST_LEN;
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * item);
    if (out == NULL)
        return NULL;
    unsigned char *w = (unsigned char *)PyBytes_AS_STRING(out);
    const unsigned char *head = (const unsigned char *)prev;
    char seq_text[40];
    for (Py_ssize_t i = 0; i < n; i++, w += item) {
        const void *parts[5] = {head};
        size_t lens[5] = {DIGEST_LEN};
        int k;
        const char *a, *b;
        Py_ssize_t a_len, b_len;
        if (canons != NULL) {
            if (bytes_of(PyList_GET_ITEM(canons, i), "canons", i, &a, &a_len) < 0)
                goto fail;
            parts[1] = a, lens[1] = (size_t)a_len, k = 2;
        } else {
            if (bytes_of(PyList_GET_ITEM(raws, i), "raws", i, &a, &a_len) < 0 || bytes_of(PyList_GET_ITEM(tails, i), "tails", i, &b, &b_len) < 0)
                goto fail;
            parts[1] = PAYLOAD_OPEN, lens[1] = sizeof PAYLOAD_OPEN - 1;
            parts[2] = a, lens[2] = (size_t)a_len;
            parts[3] = seq_text, lens[3] = (size_t)seq_frame(seq_text, first_seq + (long long)i);
            parts[4] = b, lens[4] = (size_t)b_len, k = 5;
        }
        memcpy(w, prefix, (size_t)prefix_len);
        if (hash_parts(k, parts, lens, w + prefix_len) < 0)
            goto fail;
        head = w + prefix_len;
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* links_framed's text for canonical bytes given as their parts (canonicals' arguments): no bytes
 * object per event. */
static PyObject *
chain_links_parts(PyObject *Py_UNUSED(self), PyObject *args)
{
    const char *prev, *prefix;
    Py_ssize_t prev_len, prefix_len;
    PyObject *raws, *tails;
    long long first_seq;
    if (!PyArg_ParseTuple(args, "y#O!LO!y#:links_parts", &prev, &prev_len, &PyList_Type, &raws, &first_seq, &PyList_Type, &tails, &prefix, &prefix_len))
        return NULL;
    return linked_text("links_parts", prev, prev_len, NULL, raws, first_seq, tails, prefix, prefix_len);
}

static PyObject *
chain_links(PyObject *Py_UNUSED(self), PyObject *args)
{
    const char *prev;
    Py_ssize_t prev_len;
    PyObject *canons;
    if (!PyArg_ParseTuple(args, "y#O!:links", &prev, &prev_len, &PyList_Type, &canons))
        return NULL;
    PyObject *text = linked_text("links", prev, prev_len, canons, NULL, 0, NULL, "", 0);
    if (text == NULL)
        return NULL;
    Py_ssize_t n = PyBytes_GET_SIZE(text) / DIGEST_LEN;
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
        if (list_set_digest(out, i, (const unsigned char *)PyBytes_AS_STRING(text) + i * DIGEST_LEN) < 0)
            Py_CLEAR(out);
    }
    Py_DECREF(text);
    return out;
}

static PyObject *
chain_links_framed(PyObject *Py_UNUSED(self), PyObject *args)
{
    const char *prev, *prefix;
    Py_ssize_t prev_len, prefix_len;
    PyObject *canons;
    if (!PyArg_ParseTuple(args, "y#O!y#:links_framed", &prev, &prev_len, &PyList_Type, &canons, &prefix, &prefix_len))
        return NULL;
    return linked_text("links_framed", prev, prev_len, canons, NULL, 0, NULL, prefix, prefix_len);
}

/* Whether the candidate byte at p[i] (one of + - . or a lead byte F0-FF) marks a text that
 * orjson and RFC 8785 may write differently. */
static int
mark_at(const unsigned char *p, Py_ssize_t n, Py_ssize_t i)
{
    unsigned char c = p[i];
    switch (c) {
    case '+':
    case '-':  /* an exponent follows a digit ("1e-7", "1e+16"); "one-time" is text */
        return i > 1 && p[i - 1] == 'e' && p[i - 2] >= '0' && p[i - 2] <= '9';
    case '.':  /* a whole double "N.0" ends before a comma, a bracket or the text's end */
        if (i + 1 < n && p[i + 1] == '0') {
            if (i + 2 == n)
                return 1;
            unsigned char after = p[i + 2];
            return after == ',' || after == '}' || after == ']' || after == 0;
        }
        return 0;
    default:  /* a character beyond U+FFFF (lead bytes F0-F4) sorts differently by UTF-16 unit */
        return c >= 0xF0 && c <= 0xF4;
    }
}

#if defined(__SSE2__) && defined(__GNUC__)
#include <emmintrin.h>
/* A bit for each of the 16 bytes at p that is one of + - . or a lead byte F0-FF. */
static inline unsigned
block_candidates(const unsigned char *p)
{
    __m128i c = _mm_loadu_si128((const __m128i *)p);
    __m128i punct = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(c, _mm_set1_epi8('+')), _mm_cmpeq_epi8(c, _mm_set1_epi8('-'))),
                                 _mm_cmpeq_epi8(c, _mm_set1_epi8('.')));
    __m128i high = _mm_cmpeq_epi8(_mm_max_epu8(c, _mm_set1_epi8((char)0xF0)), c);
    return (unsigned)_mm_movemask_epi8(_mm_or_si128(punct, high));
}
#endif

/* Whether orjson's sorted text may differ from RFC 8785's here: the marks runs/canonical.py's
 * _orjson_exact looks for (an exponent after a digit, a whole double "N.0", a character beyond
 * U+FFFF), in one pass. Texts joined by NUL count as ends of text. */
static int
marks_found(const unsigned char *p, Py_ssize_t n)
{
    Py_ssize_t i = 0;
#if defined(__SSE2__) && defined(__GNUC__)
    /* Sixteen bytes at a time, looking only at the candidates among them. */
    for (; i + 16 <= n; i += 16) {
        for (unsigned m = block_candidates(p + i); m != 0; m &= m - 1)
            if (mark_at(p, n, i + __builtin_ctz(m)))
                return 1;
    }
#endif
    for (; i < n; i++) {
        unsigned char c = p[i];
        if ((c == '+' || c == '-' || c == '.' || c >= 0xF0) && mark_at(p, n, i))
            return 1;
    }
    return 0;
}

/* 1 when the text has a mark (marks_found) or holds one of needles (a tuple of bytes), 0 when it
 * is plain, -1 with an exception set when a needle is not bytes. */
static int
plain_found(const unsigned char *text, Py_ssize_t len, PyObject *needles)
{
    if (marks_found(text, len))
        return 1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(needles); i++) {
        const char *needle;
        Py_ssize_t needle_len;
        if (bytes_of(PyTuple_GET_ITEM(needles, i), "needles", i, &needle, &needle_len) < 0)
            return -1;
        if (memmem(text, (size_t)len, needle, (size_t)needle_len) != NULL)
            return 1;
    }
    return 0;
}

static PyObject *
chain_plain(PyObject *Py_UNUSED(self), PyObject *args)
{
    const char *text;
    Py_ssize_t len;
    PyObject *needles;
    if (!PyArg_ParseTuple(args, "y#O!:plain", &text, &len, &PyTuple_Type, &needles))
        return NULL;
    int found = plain_found((const unsigned char *)text, len, needles);
    if (found < 0)
        return NULL;
    return PyBool_FromLong(!found);
}

/* One event's canonical bytes, for the single append: plain's check, the time's text and the
 * frame built here, in one allocation. None when the text is not plain (the caller then takes the
 * exact path). The caller passes a UTC time of year 1000 or later (runs.canonical._ts_text
 * writes other times). */
static PyObject *
chain_canonical_one(PyObject *Py_UNUSED(self), PyObject *args)
{
    const char *raw, *type_tail;
    Py_ssize_t raw_len, type_tail_len;
    long long seq;
    PyObject *ts, *needles;
    if (!PyArg_ParseTuple(args, "y#LOy#O!:canonical_one", &raw, &raw_len, &seq, &ts, &type_tail, &type_tail_len, &PyTuple_Type, &needles))
        return NULL;
    if (!PyDateTime_Check(ts)) {
        PyErr_Format(PyExc_TypeError, "canonical_one: ts must be a datetime, not %.100s", Py_TYPE(ts)->tp_name);
        return NULL;
    }
    int year = PyDateTime_GET_YEAR(ts);
    if (year < 1000 || year > 9999) {
        PyErr_SetString(PyExc_ValueError, "canonical_one: ts's year must be 1000 to 9999");
        return NULL;
    }
    int found = plain_found((const unsigned char *)raw, raw_len, needles);
    if (found < 0)
        return NULL;
    if (found)
        Py_RETURN_NONE;
    char seq_text[40];
    int seq_len = seq_frame(seq_text, seq);
    /* ',"ts":"YYYY-MM-DDTHH:MM:SS.ffffffZ"' */
    char ts_text[40];
    int n = snprintf(ts_text, sizeof ts_text, ",\"ts\":\"%04d-%02d-%02dT%02d:%02d:%02d.%06dZ\"", year, PyDateTime_GET_MONTH(ts),
                     PyDateTime_GET_DAY(ts), PyDateTime_DATE_GET_HOUR(ts), PyDateTime_DATE_GET_MINUTE(ts), PyDateTime_DATE_GET_SECOND(ts),
                     PyDateTime_DATE_GET_MICROSECOND(ts));
    if (n < 0 || n >= (int)sizeof ts_text) {
        PyErr_SetString(PyExc_ValueError, "canonical_one: ts does not fit its text");
        return NULL;
    }
    const void *parts[] = {PAYLOAD_OPEN, raw, seq_text, ts_text, type_tail};
    const size_t lens[] = {sizeof PAYLOAD_OPEN - 1, (size_t)raw_len, (size_t)seq_len, (size_t)n, (size_t)type_tail_len};
    return joined(5, parts, lens);
}


/* The number of keys of every object in value (a decoded JSON document: dicts, lists and leaves),
 * or -1 with an exception set. orjson nests at most 1024 deep, far inside the C stack. */
static Py_ssize_t
keys_count(PyObject *value, int depth)
{
    if (depth > 2048) {
        PyErr_SetString(PyExc_RecursionError, "strict_proved: nested too deeply");
        return -1;
    }
    Py_ssize_t count = 0;
    if (PyDict_CheckExact(value)) {
        count = PyDict_GET_SIZE(value);
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        while (PyDict_Next(value, &pos, &k, &v)) {
            if (PyDict_CheckExact(v) || PyList_CheckExact(v)) {
                Py_ssize_t n = keys_count(v, depth + 1);
                if (n < 0)
                    return -1;
                count += n;
            }
        }
    } else if (PyList_CheckExact(value)) {
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(value); i++) {
            PyObject *v = PyList_GET_ITEM(value, i);
            if (PyDict_CheckExact(v) || PyList_CheckExact(v)) {
                Py_ssize_t n = keys_count(v, depth + 1);
                if (n < 0)
                    return -1;
                count += n;
            }
        }
    }
    return count;
}

static PyObject *
chain_strict_proved(PyObject *Py_UNUSED(self), PyObject *args)
{
    const unsigned char *raw;
    Py_ssize_t len;
    PyObject *value;
    if (!PyArg_ParseTuple(args, "y#O:strict_proved", &raw, &len, &value))
        return NULL;
    /* One pass: a quote followed by white space, a run of 19 digits, and the counts of '":' and of
     * '\":'; then, only where there is a backslash, '\u0000' and '\\"'. */
    Py_ssize_t colons = 0, escaped_colons = 0, digits = 0;
    int backslash = 0;
    for (Py_ssize_t i = 0; i < len; i++) {
        unsigned char c = raw[i];
        if (c >= '0' && c <= '9') {
            if (++digits >= 19)
                Py_RETURN_FALSE;
            continue;
        }
        digits = 0;
        if (c == '"' && i + 1 < len) {
            unsigned char d = raw[i + 1];
            if (d == ' ' || d == '\t' || d == '\r' || d == '\n')
                Py_RETURN_FALSE;
            if (d == ':') {
                colons++;
                if (i > 0 && raw[i - 1] == '\\')
                    escaped_colons++;
            }
        } else if (c == '\\') {
            backslash = 1;
        }
    }
    if (backslash) {
        if (memmem(raw, (size_t)len, "\\u0000", 6) != NULL || memmem(raw, (size_t)len, "\\\\\"", 3) != NULL)
            Py_RETURN_FALSE;
    }
    Py_ssize_t keys = keys_count(value, 0);
    if (keys < 0)
        return NULL;
    return PyBool_FromLong(colons - escaped_colons == keys);
}

static PyMethodDef chain_methods[] = {
    {"links_framed", chain_links_framed, METH_VARARGS,
     "links_framed(prev, canons, prefix): links' hashes as one text, each preceded by prefix."},
    {"plain", chain_plain, METH_VARARGS,
     "plain(text, needles): whether orjson's sorted text is certainly RFC 8785's and holds none of needles."},
    {"canonicals", chain_canonicals, METH_VARARGS,
     "canonicals(raws, first_seq, tails): each event's canonical bytes, "
     "b'{\"payload\":' + raw + b',\"seq\":N' + tail."},
    {"canonical_one", chain_canonical_one, METH_VARARGS,
     "canonical_one(raw, seq, ts, type_tail, needles): one event's canonical bytes when plain(raw, needles), else None."},
    {"strict_proved", chain_strict_proved, METH_VARARGS,
     "strict_proved(raw, value): whether raw's bytes prove that value, its decoding, holds nothing the strict reader refuses."},
    {"links_parts", chain_links_parts, METH_VARARGS,
     "links_parts(prev, raws, first_seq, tails, prefix): links_framed of canonicals(raws, first_seq, tails), built in place."},
    {"links", chain_links, METH_VARARGS,
     "links(prev, canons): the chain's hashes after prev, sha256(previous hash + canonical bytes) each."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef chain_module = {
    PyModuleDef_HEAD_INIT, "runs._chain",
    "The hash chain's steps for a batch of events (runs/canonical.py has the same in Python).",
    -1, chain_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__chain(void)
{
    PyDateTime_IMPORT;
    if (PyDateTimeAPI == NULL)
        return NULL;
    return PyModule_Create(&chain_module);
}
