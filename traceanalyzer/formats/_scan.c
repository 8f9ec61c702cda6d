/* A field scanner for Kineto / Chrome-trace JSON: one pass over the bytes, filling the columns the
 * Kineto reader builds its Timeline from (kineto._Collector), with names and categories interned.
 *
 * It is strict and conservative: anything it is not sure to read exactly as the pure-Python reader
 * does (a value of an unexpected type, an escaped key, invalid UTF-8, a duplicate field, deep nesting,
 * a huge number, truncated or malformed JSON) makes it give up on the whole file and say why; the
 * Python reader then reads the file and owns every warning and error. Per event it reads ph, name,
 * cat, pid, tid, ts, dur and the integer args the analyses use; args it does not type (collective
 * fields, string ids) mark the event "complex": the Python side decodes those events' args itself.
 *
 * Every read is bounded by the buffer's end; nesting, event size and the number of distinct phases
 * are bounded. The scan holds no Python object and runs without the interpreter lock.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pythread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if !defined(_WIN32)
#include <sys/mman.h>
#include <unistd.h>
#endif

#define MAX_DEPTH 256             /* nesting inside a value; deeper: left to the Python reader */
#define MAX_NUMBER_CHARS 64       /* a longer number token: left to the Python reader */
#define MAX_PHASES 4096           /* distinct "ph" values */
#define MAX_HEADER_KEYS 4096      /* top-level keys */

typedef struct {
    const uint8_t *p, *end, *base;
    const char *fail; /* why the scan gave up (a static string) */
} Cur;

/* ---- growable arrays ------------------------------------------------------------------------ */
typedef struct { char *data; size_t n, cap, item; } Vec;

static int vec_extend(Vec *v, const void *x, size_t n) { /* items of one byte */
    if (v->n + n > v->cap) {
        size_t cap = v->cap ? v->cap : 4096;
        while (cap < v->n + n) cap *= 2;
        char *d = realloc(v->data, cap);
        if (!d) return -1;
        v->data = d;
        v->cap = cap;
    }
    memcpy(v->data + v->n, x, n);
    v->n += n;
    return 0;
}

static int vec_extend_items(Vec *a, const Vec *b) { /* b's items after a's (same item size) */
    if (a->n + b->n > a->cap) {
        size_t cap = a->cap ? a->cap : 4096;
        while (cap < a->n + b->n) cap *= 2;
        char *d = realloc(a->data, cap * a->item);
        if (!d) return -1;
        a->data = d;
        a->cap = cap;
    }
    memcpy(a->data + a->n * a->item, b->data, b->n * b->item);
    a->n += b->n;
    return 0;
}

static int vec_push(Vec *v, const void *x) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 4096;
        char *d = realloc(v->data, cap * v->item);
        if (!d) return -1;
        v->data = d;
        v->cap = cap;
    }
    memcpy(v->data + v->n * v->item, x, v->item);
    v->n++;
    return 0;
}

/* ---- interner: bytes -> code, in order of first appearance ----------------------------------- */
typedef struct { uint8_t *s; size_t len; uint64_t hash; } Entry;
typedef struct { Entry *items; size_t n, cap; int32_t *slots; size_t nslots; } Interner;

static uint64_t hash_bytes(const uint8_t *s, size_t n) {
    /* eight bytes at a time: kernel names run to hundreds of bytes, and every "X" event's name is hashed */
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDULL;
        h ^= h >> 32;
    }
    uint64_t w = 0;
    memcpy(&w, s + i, n - i);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ULL;
    return h ^ (h >> 29);
}

static int intern_grow(Interner *t) {
    size_t ns = t->nslots ? t->nslots * 2 : 1024;
    int32_t *slots = malloc(ns * sizeof(int32_t));
    if (!slots) return -1;
    for (size_t i = 0; i < ns; i++) slots[i] = -1;
    for (size_t i = 0; i < t->n; i++) {
        size_t j = (size_t)t->items[i].hash & (ns - 1);
        while (slots[j] >= 0) j = (j + 1) & (ns - 1);
        slots[j] = (int32_t)i;
    }
    free(t->slots);
    t->slots = slots;
    t->nslots = ns;
    return 0;
}

/* The code of s[0:n]; -1 on memory exhaustion. */
static int32_t intern(Interner *t, const uint8_t *s, size_t n) {
    if ((t->n + 1) * 2 > t->nslots && intern_grow(t) < 0) return -1;
    uint64_t h = hash_bytes(s, n);
    size_t j = (size_t)h & (t->nslots - 1);
    while (t->slots[j] >= 0) {
        Entry *e = &t->items[t->slots[j]];
        if (e->hash == h && e->len == n && memcmp(e->s, s, n) == 0) return t->slots[j];
        j = (j + 1) & (t->nslots - 1);
    }
    if (t->n >= INT32_MAX - 1) return -1;
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 256;
        Entry *items = realloc(t->items, cap * sizeof(Entry));
        if (!items) return -1;
        t->items = items;
        t->cap = cap;
    }
    uint8_t *copy = malloc(n ? n : 1);
    if (!copy) return -1;
    memcpy(copy, s, n);
    t->items[t->n].s = copy;
    t->items[t->n].len = n;
    t->items[t->n].hash = h;
    t->slots[j] = (int32_t)t->n;
    return (int32_t)t->n++;
}

static void intern_free(Interner *t) {
    for (size_t i = 0; i < t->n; i++) free(t->items[i].s);
    free(t->items);
    free(t->slots);
}

/* ---- JSON primitives ----------------------------------------------------------------------- */
static inline void skip_ws(Cur *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) c->p++;
}

static int hex4(const uint8_t *p, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        uint8_t ch = p[i];
        v <<= 4;
        if (ch >= '0' && ch <= '9') v |= (uint32_t)(ch - '0');
        else if (ch >= 'a' && ch <= 'f') v |= (uint32_t)(ch - 'a' + 10);
        else if (ch >= 'A' && ch <= 'F') v |= (uint32_t)(ch - 'A' + 10);
        else return -1;
    }
    *out = v;
    return 0;
}

typedef struct { const uint8_t *s; size_t len; int escaped; } Str;

/* PLAIN[b]: a byte that can stand for itself in a string and needs no check (printable ASCII but '"', '\\') */
static uint8_t PLAIN[256];


/* A string from c->p (at its opening quote): strict JSON, valid UTF-8. Sets out to the raw bytes
 * between the quotes. 0 on success, -1 (c->fail set) otherwise. */
static int scan_string(Cur *c, Str *out) {
    const uint8_t *p = c->p + 1, *end = c->end;
    int escaped = 0;
    while (1) {
        while (p < end && PLAIN[*p]) p++;
        if (p >= end) { c->fail = "truncated string"; return -1; }
        uint8_t ch = *p;
        if (ch == '"') break;
        if (ch == '\\') {
            escaped = 1;
            if (p + 1 >= end) { c->fail = "truncated string"; return -1; }
            uint8_t e = p[1];
            if (e == 'u') {
                uint32_t u, lo;
                if (end - p < 6 || hex4(p + 2, &u) < 0) { c->fail = "bad escape"; return -1; }
                p += 6;
                if (u >= 0xDC00 && u <= 0xDFFF) { c->fail = "lone surrogate escape"; return -1; }
                if (u >= 0xD800 && u <= 0xDBFF) {
                    if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || hex4(p + 2, &lo) < 0 || lo < 0xDC00 ||
                        lo > 0xDFFF) { c->fail = "lone surrogate escape"; return -1; }
                    p += 6;
                }
                continue;
            }
            if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't') {
                p += 2;
                continue;
            }
            c->fail = "bad escape";
            return -1;
        }
        if (ch < 0x20) { c->fail = "control character in a string"; return -1; }
        /* UTF-8, strictly: no overlong forms, no surrogates, nothing beyond U+10FFFF */
        size_t left = (size_t)(end - p);
        if (ch >= 0xC2 && ch <= 0xDF) {
            if (left < 2 || (p[1] & 0xC0) != 0x80) goto bad_utf8;
            p += 2;
        } else if (ch >= 0xE0 && ch <= 0xEF) {
            if (left < 3 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) goto bad_utf8;
            if (ch == 0xE0 && p[1] < 0xA0) goto bad_utf8;
            if (ch == 0xED && p[1] >= 0xA0) goto bad_utf8;
            p += 3;
        } else if (ch >= 0xF0 && ch <= 0xF4) {
            if (left < 4 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80) goto bad_utf8;
            if (ch == 0xF0 && p[1] < 0x90) goto bad_utf8;
            if (ch == 0xF4 && p[1] >= 0x90) goto bad_utf8;
            p += 4;
        } else {
            goto bad_utf8;
        }
    }
    out->s = c->p + 1;
    out->len = (size_t)(p - (c->p + 1));
    out->escaped = escaped;
    c->p = p + 1;
    return 0;
bad_utf8:
    c->fail = "invalid UTF-8";
    return -1;
}

/* The unescaped bytes of a string scanned by scan_string (valid by then) into buf (len bytes at most). */
static size_t unescape(const Str *s, uint8_t *buf) {
    const uint8_t *p = s->s, *end = s->s + s->len;
    size_t n = 0;
    while (p < end) {
        if (*p != '\\') { buf[n++] = *p++; continue; }
        uint8_t e = p[1];
        if (e != 'u') {
            buf[n++] = e == 'b' ? 8 : e == 'f' ? 12 : e == 'n' ? 10 : e == 'r' ? 13 : e == 't' ? 9 : e;
            p += 2;
            continue;
        }
        uint32_t u, lo;
        hex4(p + 2, &u);
        p += 6;
        if (u >= 0xD800 && u <= 0xDBFF) {
            hex4(p + 2, &lo);
            p += 6;
            u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
        }
        if (u < 0x80) buf[n++] = (uint8_t)u;
        else if (u < 0x800) { buf[n++] = (uint8_t)(0xC0 | (u >> 6)); buf[n++] = (uint8_t)(0x80 | (u & 0x3F)); }
        else if (u < 0x10000) {
            buf[n++] = (uint8_t)(0xE0 | (u >> 12)); buf[n++] = (uint8_t)(0x80 | ((u >> 6) & 0x3F));
            buf[n++] = (uint8_t)(0x80 | (u & 0x3F));
        } else {
            buf[n++] = (uint8_t)(0xF0 | (u >> 18)); buf[n++] = (uint8_t)(0x80 | ((u >> 12) & 0x3F));
            buf[n++] = (uint8_t)(0x80 | ((u >> 6) & 0x3F)); buf[n++] = (uint8_t)(0x80 | (u & 0x3F));
        }
    }
    return n;
}

/* A number token (strict JSON grammar). is_int: no fraction or exponent. */
static int scan_number(Cur *c, const uint8_t **start, size_t *len, int *is_int) {
    const uint8_t *p = c->p, *end = c->end;
    *start = p;
    *is_int = 1;
    if (p < end && *p == '-') p++;
    if (p >= end) goto bad;
    if (*p == '0') p++;
    else if (*p >= '1' && *p <= '9') { while (p < end && *p >= '0' && *p <= '9') p++; }
    else goto bad;
    if (p < end && *p == '.') {
        *is_int = 0;
        p++;
        if (p >= end || *p < '0' || *p > '9') goto bad;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        *is_int = 0;
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || *p < '0' || *p > '9') goto bad;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    if (p >= end) { c->fail = "truncated number"; return -1; } /* a document never ends in a number here */
    *len = (size_t)(p - *start);
    if (*len > MAX_NUMBER_CHARS) { c->fail = "number too long"; return -1; }
    c->p = p;
    return 0;
bad:
    c->fail = "malformed number";
    return -1;
}

static int scan_value(Cur *c, int depth);

static int expect_literal(Cur *c, const char *lit, size_t n) {
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, lit, n) != 0) { c->fail = "malformed value"; return -1; }
    c->p += n;
    return 0;
}

/* Any JSON value, validated and skipped. */
static int scan_value(Cur *c, int depth) {
    if (depth > MAX_DEPTH) { c->fail = "nested too deeply"; return -1; }
    skip_ws(c);
    if (c->p >= c->end) { c->fail = "truncated"; return -1; }
    uint8_t ch = *c->p;
    if (ch == '"') { Str s; return scan_string(c, &s); }
    if (ch == '{') {
        c->p++;
        skip_ws(c);
        if (c->p < c->end && *c->p == '}') { c->p++; return 0; }
        while (1) {
            skip_ws(c);
            if (c->p >= c->end || *c->p != '"') { c->fail = "malformed object"; return -1; }
            Str k;
            if (scan_string(c, &k) < 0) return -1;
            skip_ws(c);
            if (c->p >= c->end || *c->p != ':') { c->fail = "malformed object"; return -1; }
            c->p++;
            if (scan_value(c, depth + 1) < 0) return -1;
            skip_ws(c);
            if (c->p >= c->end) { c->fail = "truncated"; return -1; }
            if (*c->p == ',') { c->p++; continue; }
            if (*c->p == '}') { c->p++; return 0; }
            c->fail = "malformed object";
            return -1;
        }
    }
    if (ch == '[') {
        c->p++;
        skip_ws(c);
        if (c->p < c->end && *c->p == ']') { c->p++; return 0; }
        while (1) {
            if (scan_value(c, depth + 1) < 0) return -1;
            skip_ws(c);
            if (c->p >= c->end) { c->fail = "truncated"; return -1; }
            if (*c->p == ',') { c->p++; continue; }
            if (*c->p == ']') { c->p++; return 0; }
            c->fail = "malformed array";
            return -1;
        }
    }
    if (ch == 't') return expect_literal(c, "true", 4);
    if (ch == 'f') return expect_literal(c, "false", 5);
    if (ch == 'n') return expect_literal(c, "null", 4);
    if (ch == '-' || (ch >= '0' && ch <= '9')) {
        const uint8_t *s; size_t n; int is_int;
        return scan_number(c, &s, &n, &is_int);
    }
    c->fail = "malformed value";
    return -1;
}

/* ---- ids, as kineto._ids / _columns.to_int_id read them ------------------------------------ */
#define ID_OUT_OF_RANGE (-(INT64_C(1) << 62))

/* An id from a sign and magnitude (overflow: beyond 2^64). ok=0: not one this scanner reads exactly. */
static int64_t id_from(int neg, uint64_t mag, int overflow, int unsigned64, int strict, int *ok) {
    *ok = 1;
    if (overflow) { if (strict) *ok = 0; return ID_OUT_OF_RANGE; }
    if (neg) {
        if (mag < (UINT64_C(1) << 63)) return -(int64_t)mag;
        *ok = 0; /* -2^63 and below: the typed and loose paths disagree; left to Python */
        return 0;
    }
    if (mag <= (uint64_t)INT64_MAX) return (int64_t)mag;
    if (unsigned64) return (int64_t)(mag - (UINT64_C(1) << 63)) + INT64_MIN; /* same 64 bits */
    return ID_OUT_OF_RANGE;
}

/* An integer token as an id (ok=0 for tokens the typed decoder would refuse: beyond uint64). */
static int64_t int_token_id(const uint8_t *s, size_t n, int unsigned64, int *ok) {
    int neg = 0, overflow = 0;
    uint64_t mag = 0;
    size_t i = 0;
    if (s[0] == '-') { neg = 1; i = 1; }
    for (; i < n; i++) {
        uint64_t d = (uint64_t)(s[i] - '0');
        if (mag > (UINT64_MAX - d) / 10) { overflow = 1; break; }
        mag = mag * 10 + d;
    }
    return id_from(neg, mag, overflow, unsigned64, 1, ok);
}

/* Whether int() reads s as a number with '_' separators ("1_000"), where the trailing-number rule reads
 * something else: spaces, a sign, then digits with single underscores between them. */
static int int_with_underscores(const Str *s) {
    size_t i = 0, e = s->len;
    int under = 0;
    while (i < e && s->s[i] == ' ') i++;
    while (e > i && s->s[e - 1] == ' ') e--;
    if (i < e && (s->s[i] == '+' || s->s[i] == '-')) i++;
    if (i >= e || s->s[i] < '0' || s->s[i] > '9') return 0;
    for (; i < e; i++) {
        uint8_t ch = s->s[i];
        if (ch == '_') {
            if (i + 1 >= e || s->s[i + 1] < '0' || s->s[i + 1] > '9') return 0;
            under = 1;
        } else if (ch < '0' || ch > '9') return 0;
    }
    return under;
}

/* A string id: its trailing number ("stream 7" -> 7), as _columns._parse_id. Only plain ASCII strings
 * that int() does not read otherwise ("1_0") are read here: ok=0 for the others. */
static int64_t string_id(const Str *s, int unsigned64, int *ok) {
    *ok = 1;
    if (s->escaped) { *ok = 0; return 0; }
    for (size_t i = 0; i < s->len; i++) {
        uint8_t ch = s->s[i];
        if (ch >= 0x80 || ch < 0x20) { *ok = 0; return 0; }
    }
    if (int_with_underscores(s)) { *ok = 0; return 0; }
    size_t e = s->len;
    while (e > 0 && s->s[e - 1] == ' ') e--;
    size_t b = e;
    while (b > 0 && s->s[b - 1] >= '0' && s->s[b - 1] <= '9') b--;
    if (b == e) return -1; /* no trailing number: missing */
    int neg = b > 0 && s->s[b - 1] == '-';
    size_t group = e - b + (size_t)neg;
    if (group >= 30) return ID_OUT_OF_RANGE; /* read as 2^64: out of range */
    uint64_t mag = 0;
    int overflow = 0;
    for (size_t i = b; i < e; i++) {
        uint64_t d = (uint64_t)(s->s[i] - '0');
        if (mag > (UINT64_MAX - d) / 10) { overflow = 1; break; }
        mag = mag * 10 + d;
    }
    int64_t v = id_from(neg, mag, overflow, unsigned64, 0, ok);
    return v;
}

/* ---- the scan ------------------------------------------------------------------------------ */
/* The columns of "X" events. stream: args.original_stream where it is a stream (>= 0), else args.stream
 * (kineto._real_stream). */
enum { C_TS, C_DUR, C_NAME, C_CAT, C_PID, C_TID, C_DEVICE, C_STREAM, C_CORR, C_BYTES, C_GRAPH, C_SEQ, N_COLS };
static const char *COL_NAMES[N_COLS] = {"ts", "dur", "name", "cat", "pid", "tid", "device", "stream",
                                        "correlation", "bytes", "graph", "seq"};
static const size_t COL_SIZE[N_COLS] = {8, 8, 4, 4, 8, 8, 8, 8, 8, 8, 8, 8};

typedef struct {
    Vec cols[N_COLS];
    Vec special;         /* int64 pairs: spans in special_text of the instant and counter events */
    Vec special_text;    /* those events' text, one after the other */
    Vec complex;         /* int64 triples: row, span in complex_text of the args of "X" events Python reads */
    Vec complex_text;    /* those args' text: copied, so that the mapped file is not read again */
    Interner names, cats, phases;
    Vec phase_counts;    /* int64 per phase code; index phases.n: null ph */
    int64_t null_phase;
    Vec header;          /* int64 triples: key start, key end, value start, value end (4) */
    int64_t events;
    int64_t events_at, events_end;
    uint8_t *scratch;
    size_t scratch_cap;
    size_t max_name;
    size_t max_event;
    int drop_behind;     /* the buffer maps a file: give its pages back once scanned (see drop_scanned) */
    int threads;         /* 2: the second half of the events scanned by a second thread (see Part) */
    size_t min_split;    /* ... when each half is at least this many bytes */
    int split;           /* the second thread's events were taken */
    const uint8_t *dropped;
} Scan;

static int want_scratch(Scan *S, size_t n) {
    if (n <= S->scratch_cap) return 0;
    uint8_t *b = realloc(S->scratch, n);
    if (!b) return -1;
    S->scratch = b;
    S->scratch_cap = n;
    return 0;
}

static int32_t intern_str(Scan *S, Interner *t, const Str *s) {
    if (!s->escaped) return intern(t, s->s, s->len);
    if (want_scratch(S, s->len + 1) < 0) return -1;
    size_t n = unescape(s, S->scratch);
    return intern(t, S->scratch, n);
}

static int key_is(const Str *k, const char *name) {
    size_t n = strlen(name);
    return k->len == n && memcmp(k->s, name, n) == 0;
}

/* The index of k in names (lens: their lengths), or -1. */
static inline int key_index(const Str *k, const char *const *names, const size_t *lens, int n) {
    for (int i = 0; i < n; i++)
        if (lens[i] == k->len && memcmp(k->s, names[i], k->len) == 0) return i;
    return -1;
}

/* Args keys the scanner types (integers), and those whose presence makes the event "complex". */
enum { A_DEVICE, A_STREAM, A_ORIG, A_CORR, A_BYTES, A_GRAPH, A_GRAPH_CAMEL, A_SEQ, A_SEQ_LOWER, N_INT_ARGS };
static const char *INT_ARGS[N_INT_ARGS] = {"device", "stream", "original_stream", "correlation", "bytes",
                                           "graph id", "graphId", "Seq", "seq"};
#define N_COMPLEX_ARGS 10
static const char *COMPLEX_ARGS[N_COMPLEX_ARGS] = {"kind", "Collective name", "In msg nelems", "Out msg nelems",
                                                   "dtype", "Process Group Name", "Process Group Description",
                                                   "Process Group Ranks", "wait_on_cuda_event_record_corr_id",
                                                   "wait_on_stream"};
static size_t INT_ARG_LENS[N_INT_ARGS], COMPLEX_ARG_LENS[N_COMPLEX_ARGS];

typedef struct { int64_t v[N_INT_ARGS]; uint8_t seen[N_INT_ARGS], isnull[N_INT_ARGS]; int complex; } Args;

static int scan_args(Scan *S, Cur *c, Args *a) {
    for (int i = 0; i < N_INT_ARGS; i++) { a->v[i] = -1; a->seen[i] = 0; a->isnull[i] = 0; }
    a->complex = 0;
    /* at '{' */
    c->p++;
    skip_ws(c);
    if (c->p < c->end && *c->p == '}') { c->p++; return 0; }
    while (1) {
        skip_ws(c);
        if (c->p >= c->end || *c->p != '"') { c->fail = "malformed object"; return -1; }
        Str k;
        if (scan_string(c, &k) < 0) return -1;
        skip_ws(c);
        if (c->p >= c->end || *c->p != ':') { c->fail = "malformed object"; return -1; }
        c->p++;
        skip_ws(c);
        if (c->p >= c->end) { c->fail = "truncated"; return -1; }
        if (k.escaped) { c->fail = "escaped key in args"; return -1; }
        int which = key_index(&k, INT_ARGS, INT_ARG_LENS, N_INT_ARGS);
        if (which >= 0) {
            if (a->seen[which]) a->complex = 1; /* a duplicate key: Python decides which value counts */
            a->seen[which] = 1;
            uint8_t ch = *c->p;
            int unsigned64 = which == A_CORR || which == A_GRAPH || which == A_GRAPH_CAMEL;
            if (ch == '-' || (ch >= '0' && ch <= '9')) {
                const uint8_t *s; size_t n; int is_int, ok = 1;
                if (scan_number(c, &s, &n, &is_int) < 0) return -1;
                if (!is_int) a->complex = 1;
                else {
                    a->v[which] = int_token_id(s, n, unsigned64, &ok);
                    if (!ok) a->complex = 1;
                }
            } else if (ch == 'n') {
                if (expect_literal(c, "null", 4) < 0) return -1;
                a->isnull[which] = 1; /* null reads as absent (the loose path's None: -1) */
            } else {
                a->complex = 1;
                if (scan_value(c, 2) < 0) return -1;
            }
        } else {
            if (key_index(&k, COMPLEX_ARGS, COMPLEX_ARG_LENS, N_COMPLEX_ARGS) >= 0) a->complex = 1;
            if (scan_value(c, 2) < 0) return -1;
        }
        skip_ws(c);
        if (c->p >= c->end) { c->fail = "truncated"; return -1; }
        if (*c->p == ',') { c->p++; continue; }
        if (*c->p == '}') { c->p++; return 0; }
        c->fail = "malformed object";
        return -1;
    }
}

static const double POW10[23] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14,
                                 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* A number token as a double, correctly rounded (as msgspec reads it). Tokens of at most 15 significant
 * digits and a small exponent are exact in one multiplication or division of two exact doubles (Clinger's
 * fast path); the rest go through strtod. ok=0: a value this scanner leaves to Python. */
static double number_value(const uint8_t *s, size_t n, int *ok) {
    *ok = 1;
    size_t i = 0;
    int neg = 0, digits = 0, frac = 0, is_int = 1;
    uint64_t mant = 0;
    if (s[0] == '-') { neg = 1; i = 1; }
    for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
        if (mant || s[i] != '0') digits++;
        mant = mant * 10 + (uint64_t)(s[i] - '0');
        if (digits > 15) break;
    }
    if (digits <= 15 && i < n && s[i] == '.') {
        is_int = 0;
        for (i++; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
            if (mant || s[i] != '0') digits++;
            mant = mant * 10 + (uint64_t)(s[i] - '0');
            frac++;
            if (digits > 15) break;
        }
    }
    if (i == n && digits <= 15 && frac <= 22) {
        double v = (double)mant;
        if (frac) v /= POW10[frac];
        return neg ? -v : v;
    }
    (void)is_int;
    char buf[MAX_NUMBER_CHARS + 1];
    memcpy(buf, s, n);
    buf[n] = 0;
    if (n > 18 && memchr(buf, '.', n) == NULL && memchr(buf, 'e', n) == NULL && memchr(buf, 'E', n) == NULL) {
        *ok = 0; /* an integer beyond 64 bits into a float field: left to Python */
        return 0;
    }
    char *stop;
    double v = strtod(buf, &stop);
    if (stop != buf + n || !(v == v) || v > 1.7976931348623157e308 || v < -1.7976931348623157e308) *ok = 0;
    if (v == 0.0) { /* underflow to zero of a nonzero literal: left to Python */
        for (size_t j = 0; j < n && buf[j] != 'e' && buf[j] != 'E'; j++)
            if (buf[j] >= '1' && buf[j] <= '9') { *ok = 0; break; }
    }
    return v;
}

enum { F_PH, F_NAME, F_CAT, F_PID, F_TID, F_TS, F_DUR, F_ARGS, N_FIELDS };
static const char *FIELDS[N_FIELDS] = {"ph", "name", "cat", "pid", "tid", "ts", "dur", "args"};
static size_t FIELD_LENS[N_FIELDS];

/* Append the value x of `size` bytes (the column's item size, a constant at each call) to column col. */
static inline int push_sized(Scan *S, int col, const void *x, size_t size) {
    Vec *v = &S->cols[col];
    if (v->n == v->cap) return vec_push(v, x);
    memcpy(v->data + v->n * size, x, size);
    v->n++;
    return 0;
}
#define push_col(S, col, x) push_sized((S), (col), (x), sizeof *(x))

static int scan_event(Scan *S, Cur *c) {
    const uint8_t *start = c->p;
    if (c->p >= c->end || *c->p != '{') { c->fail = "an event that is no object"; return -1; }
    c->p++;
    uint8_t seen[N_FIELDS] = {0};
    Str ph = {0}, name = {0}, cat = {0};
    int ph_null = 1;
    double ts = NAN, dur = NAN;
    int64_t pid = -1, tid = -1;
    int complex = 0;
    Args a;
    for (int i = 0; i < N_INT_ARGS; i++) { a.v[i] = -1; a.seen[i] = 0; a.isnull[i] = 0; }
    a.complex = 0;
    const uint8_t *args_at = NULL, *args_end = NULL;
    skip_ws(c);
    if (c->p < c->end && *c->p == '}') {
        c->p++;
    } else {
        while (1) {
            skip_ws(c);
            if (c->p >= c->end || *c->p != '"') { c->fail = "malformed event"; return -1; }
            Str k;
            if (scan_string(c, &k) < 0) return -1;
            if (k.escaped) { c->fail = "escaped key in an event"; return -1; }
            skip_ws(c);
            if (c->p >= c->end || *c->p != ':') { c->fail = "malformed event"; return -1; }
            c->p++;
            skip_ws(c);
            if (c->p >= c->end) { c->fail = "truncated"; return -1; }
            int f = key_index(&k, FIELDS, FIELD_LENS, N_FIELDS);
            if (f >= 0) {
                if (seen[f]) { c->fail = "duplicate field in an event"; return -1; }
                seen[f] = 1;
            }
            uint8_t ch = *c->p;
            if (f == F_PH || f == F_NAME || f == F_CAT) {
                if (ch == '"') {
                    Str s;
                    if (scan_string(c, &s) < 0) return -1;
                    if (f == F_PH) { ph = s; ph_null = 0; }
                    else if (f == F_NAME) name = s;
                    else cat = s;
                } else if (f == F_PH && ch == 'n') {
                    if (expect_literal(c, "null", 4) < 0) return -1;
                } else { c->fail = "ph, name or cat of another type"; return -1; }
            } else if (f == F_PID || f == F_TID) {
                int ok = 1;
                int64_t v;
                if (ch == '"') {
                    Str s;
                    if (scan_string(c, &s) < 0) return -1;
                    v = string_id(&s, 0, &ok);
                } else if (ch == '-' || (ch >= '0' && ch <= '9')) {
                    const uint8_t *s; size_t n; int is_int;
                    if (scan_number(c, &s, &n, &is_int) < 0) return -1;
                    if (!is_int) { c->fail = "pid or tid not an integer"; return -1; }
                    v = int_token_id(s, n, 0, &ok);
                } else { c->fail = "pid or tid of another type"; return -1; }
                if (!ok) { c->fail = "pid or tid not read exactly here"; return -1; }
                if (f == F_PID) pid = v; else tid = v;
            } else if (f == F_TS || f == F_DUR) {
                if (!(ch == '-' || (ch >= '0' && ch <= '9'))) { c->fail = "ts or dur not a number"; return -1; }
                const uint8_t *s; size_t n; int is_int, ok;
                if (scan_number(c, &s, &n, &is_int) < 0) return -1;
                double v = number_value(s, n, &ok);
                if (!ok) { c->fail = "ts or dur not read exactly here"; return -1; }
                if (f == F_TS) ts = v; else dur = v;
            } else if (f == F_ARGS) {
                if (ch == '{') {
                    args_at = c->p;
                    if (scan_args(S, c, &a) < 0) return -1;
                    args_end = c->p;
                } else if (ch == 'n') {
                    if (expect_literal(c, "null", 4) < 0) return -1;
                } else { c->fail = "args of another type"; return -1; }
            } else {
                if (scan_value(c, 1) < 0) return -1;
            }
            skip_ws(c);
            if (c->p >= c->end) { c->fail = "truncated"; return -1; }
            if (*c->p == ',') { c->p++; continue; }
            if (*c->p == '}') { c->p++; break; }
            c->fail = "malformed event";
            return -1;
        }
    }
    if ((size_t)(c->p - start) > S->max_event) { c->fail = "an event too large"; return -1; }
    S->events++;
    if (!ph_null && ph.escaped) { c->fail = "escaped ph"; return -1; }
    int is_x = !ph_null && ph.len == 1 && ph.s[0] == 'X';
    if (!is_x) {
        if (ph_null) { S->null_phase++; }
        else {
            int32_t code = intern_str(S, &S->phases, &ph);
            if (code < 0) { c->fail = "out of memory"; return -1; }
            if (S->phases.n > MAX_PHASES) { c->fail = "too many distinct phases"; return -1; }
            while (S->phase_counts.n <= (size_t)code) { int64_t z = 0; if (vec_push(&S->phase_counts, &z)) return -1; }
            ((int64_t *)S->phase_counts.data)[code]++;
            const uint8_t *u = S->phases.items[code].s;
            size_t un = S->phases.items[code].len;
            if (un == 1 && (u[0] == 'i' || u[0] == 'I' || u[0] == 'C')) {
                int64_t span[2] = {(int64_t)S->special_text.n, (int64_t)S->special_text.n + (int64_t)(c->p - start)};
                if (vec_push(&S->special, span) || vec_extend(&S->special_text, start, (size_t)(c->p - start))) {
                    c->fail = "out of memory";
                    return -1;
                }
            }
        }
        return 0;
    }
    if ((seen[F_NAME] && name.len > S->max_name) || (seen[F_CAT] && cat.len > S->max_name)) {
        c->fail = "a name longer than the name limit";
        return -1;
    }
    Str empty = {(const uint8_t *)"", 0, 0};
    int32_t nc = intern_str(S, &S->names, seen[F_NAME] ? &name : &empty);
    int32_t cc = intern_str(S, &S->cats, seen[F_CAT] ? &cat : &empty);
    if (nc < 0 || cc < 0) { c->fail = "out of memory"; return -1; }
    complex = a.complex;
    /* kineto._graph_and_seq: the first key's value unless absent or null, else the second's */
    int64_t graph = a.seen[A_GRAPH] && !a.isnull[A_GRAPH] ? a.v[A_GRAPH] : a.v[A_GRAPH_CAMEL];
    int64_t seq = a.seen[A_SEQ] && !a.isnull[A_SEQ] ? a.v[A_SEQ] : a.v[A_SEQ_LOWER];
    int64_t stream = a.v[A_ORIG] >= 0 ? a.v[A_ORIG] : a.v[A_STREAM];
    if (complex) {
        int64_t rec[3] = {(int64_t)S->cols[C_TS].n, (int64_t)S->complex_text.n,
                          (int64_t)S->complex_text.n + (int64_t)(args_end - args_at)};
        if (vec_push(&S->complex, rec) || vec_extend(&S->complex_text, args_at, (size_t)(args_end - args_at))) {
            c->fail = "out of memory";
            return -1;
        }
    }
    if (push_col(S, C_TS, &ts) || push_col(S, C_DUR, &dur) || push_col(S, C_NAME, &nc) || push_col(S, C_CAT, &cc) ||
        push_col(S, C_PID, &pid) || push_col(S, C_TID, &tid) || push_col(S, C_DEVICE, &a.v[A_DEVICE]) ||
        push_col(S, C_STREAM, &stream) || push_col(S, C_CORR, &a.v[A_CORR]) || push_col(S, C_BYTES, &a.v[A_BYTES]) ||
        push_col(S, C_GRAPH, &graph) || push_col(S, C_SEQ, &seq)) {
        c->fail = "out of memory";
        return -1;
    }
    return 0;
}

#define DROP_STRIDE ((size_t)16 << 20)

/* A mapped file's pages before the scan position given back (they would count in the process's resident
 * memory until the end of the read); the few bytes read again later (args, instants) fault back in from
 * the page cache. Whole pages only, a stride at a time. */
static void drop_scanned(Scan *S, Cur *c, int all) {
#if defined(MADV_DONTNEED) && !defined(_WIN32)
    if (!S->drop_behind || (!all && (size_t)(c->p - S->dropped) < 2 * DROP_STRIDE)) return;
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0) return;
    uintptr_t lo = ((uintptr_t)S->dropped + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
    uintptr_t hi = ((uintptr_t)c->p - (all ? 0 : DROP_STRIDE)) & ~((uintptr_t)page - 1);
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
    S->dropped = (const uint8_t *)hi;
#else
    (void)S; (void)c; (void)all;
#endif
}

/* ---- a second thread over the second half of the events ------------------------------------- */
/* The events list is cut at a "}, {" after its middle; a second thread scans the events from that '{' to the
 * list's ']' into a Scan of its own, while the first scans from the start. The cut is used only when the first
 * thread lands exactly on it as the start of an event (a cut inside a string or a nested value never is one);
 * the second thread's columns are then appended to the first's, its names and categories coded in order of
 * first appearance after the first's, as one pass would have coded them. Otherwise, or when the second
 * thread failed, its work is dropped and the first thread reads on by itself. */
typedef struct {
    Scan S;
    Cur c;
    const uint8_t *start;
    int rc;
    PyThread_type_lock done;
} Part;

static void scan_init(Scan *S, size_t max_name, size_t max_event, int drop_behind, const uint8_t *from);
static void scan_free(Scan *S);

static int event_loop(Scan *S, Cur *c, Part *part);

static void part_run(void *arg) {
    Part *P = (Part *)arg;
    P->rc = event_loop(&P->S, &P->c, NULL);
    PyThread_release_lock(P->done);
}

/* The '{' after the first "}, {" at or after `from` (and before `end`), or NULL. */
static const uint8_t *find_cut(const uint8_t *from, const uint8_t *end) {
    const uint8_t *p = from;
    while (p < end) {
        p = memchr(p, '}', (size_t)(end - p));
        if (!p) return NULL;
        const uint8_t *q = p + 1;
        while (q < end && (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r')) q++;
        if (q < end && *q == ',') {
            q++;
            while (q < end && (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r')) q++;
            if (q < end && *q == '{') return q;
        }
        p++;
    }
    return NULL;
}

/* Append the second part's results to the first's. */
static int merge(Scan *A, Scan *B) {
    int32_t *map_names = malloc((B->names.n ? B->names.n : 1) * sizeof(int32_t));
    int32_t *map_cats = malloc((B->cats.n ? B->cats.n : 1) * sizeof(int32_t));
    int rc = -1;
    if (!map_names || !map_cats) goto out;
    for (size_t i = 0; i < B->names.n; i++)
        if ((map_names[i] = intern(&A->names, B->names.items[i].s, B->names.items[i].len)) < 0) goto out;
    for (size_t i = 0; i < B->cats.n; i++)
        if ((map_cats[i] = intern(&A->cats, B->cats.items[i].s, B->cats.items[i].len)) < 0) goto out;
    int64_t rows = (int64_t)A->cols[C_TS].n;
    int32_t *bn = (int32_t *)B->cols[C_NAME].data, *bc = (int32_t *)B->cols[C_CAT].data;
    for (size_t i = 0; i < B->cols[C_NAME].n; i++) bn[i] = map_names[bn[i]];
    for (size_t i = 0; i < B->cols[C_CAT].n; i++) bc[i] = map_cats[bc[i]];
    for (int k = 0; k < N_COLS; k++) {
        Vec *va = &A->cols[k], *vb = &B->cols[k];
        if (vb->n && vec_extend_items(va, vb)) goto out;
    }
    int64_t *sp = (int64_t *)B->special.data;
    for (size_t i = 0; i < 2 * B->special.n; i++) sp[i] += (int64_t)A->special_text.n;
    int64_t *cx = (int64_t *)B->complex.data;
    for (size_t i = 0; i < B->complex.n; i++) {
        cx[3 * i] += rows;
        cx[3 * i + 1] += (int64_t)A->complex_text.n;
        cx[3 * i + 2] += (int64_t)A->complex_text.n;
    }
    if ((B->special.n && vec_extend_items(&A->special, &B->special)) ||
        (B->special_text.n && vec_extend_items(&A->special_text, &B->special_text)) ||
        (B->complex.n && vec_extend_items(&A->complex, &B->complex)) ||
        (B->complex_text.n && vec_extend_items(&A->complex_text, &B->complex_text))) goto out;
    for (size_t i = 0; i < B->phases.n; i++) {
        int32_t code = intern(&A->phases, B->phases.items[i].s, B->phases.items[i].len);
        if (code < 0) goto out;
        while (A->phase_counts.n <= (size_t)code) { int64_t z = 0; if (vec_push(&A->phase_counts, &z)) goto out; }
        ((int64_t *)A->phase_counts.data)[code] += ((int64_t *)B->phase_counts.data)[i];
    }
    if (A->phases.n > MAX_PHASES) goto out;
    A->null_phase += B->null_phase;
    A->events += B->events;
    rc = 0;
out:
    free(map_names);
    free(map_cats);
    return rc;
}

/* Events from an event's start to the list's ']' (consumed). With `part`: the first thread, which hands over
 * to the second when it lands on the second's start (then 1 is returned, c->p after the list's ']'). */
static int event_loop(Scan *S, Cur *c, Part *part) {
    while (1) {
        skip_ws(c);
        if (part && c->p >= part->start) {
            if (c->p == part->start) {
                PyThread_acquire_lock(part->done, WAIT_LOCK);
                PyThread_release_lock(part->done);
                if (part->rc == 0) {
                    if (merge(S, &part->S) < 0) { c->fail = "out of memory"; return -1; }
                    c->p = part->c.p;
                    S->split = 1;
                    return 0;
                }
            }
            part = NULL; /* the cut was no event boundary, or the second thread failed: read on alone */
        }
        drop_scanned(S, c, 0);
        if (scan_event(S, c) < 0) return -1;
        skip_ws(c);
        if (c->p >= c->end) { c->fail = "truncated"; return -1; }
        if (*c->p == ',') { c->p++; continue; }
        if (*c->p == ']') { c->p++; return 0; }
        c->fail = "malformed event list";
        return -1;
    }
}

static int scan_events(Scan *S, Cur *c) {
    /* at '[' */
    c->p++;
    skip_ws(c);
    if (c->p < c->end && *c->p == ']') { c->p++; return 0; }
    Part *part = NULL;
    if (S->threads > 1 && (size_t)(c->end - c->p) >= 2 * S->min_split) {
        const uint8_t *cut = find_cut(c->p + (c->end - c->p) / 2, c->end);
        part = cut ? calloc(1, sizeof(Part)) : NULL;
        if (part) {
            part->start = cut;
            scan_init(&part->S, S->max_name, S->max_event, S->drop_behind, cut);
            part->c = (Cur){cut, c->end, c->base, NULL};
            part->done = PyThread_allocate_lock();
            if (!part->done) { free(part); part = NULL; }
            else {
                PyThread_acquire_lock(part->done, WAIT_LOCK);
                if (PyThread_start_new_thread(part_run, part) == PYTHREAD_INVALID_THREAD_ID) {
                    PyThread_release_lock(part->done);
                    PyThread_free_lock(part->done);
                    scan_free(&part->S);
                    free(part);
                    part = NULL;
                }
            }
        }
    }
    int rc = event_loop(S, c, part);
    if (part) { /* never leave the second thread running over a buffer about to be let go of */
        PyThread_acquire_lock(part->done, WAIT_LOCK);
        PyThread_release_lock(part->done);
        PyThread_free_lock(part->done);
        scan_free(&part->S);
        free(part);
    }
    return rc;
}

static int scan_document(Scan *S, Cur *c) {
    skip_ws(c);
    if (c->p >= c->end || *c->p != '{') { c->fail = "not a JSON object"; return -1; }
    c->p++;
    int found = 0;
    skip_ws(c);
    if (c->p < c->end && *c->p == '}') { c->fail = "no traceEvents"; return -1; }
    while (1) {
        skip_ws(c);
        if (c->p >= c->end || *c->p != '"') { c->fail = "malformed document"; return -1; }
        Str k;
        if (scan_string(c, &k) < 0) return -1;
        if (k.escaped) { c->fail = "escaped top-level key"; return -1; }
        skip_ws(c);
        if (c->p >= c->end || *c->p != ':') { c->fail = "malformed document"; return -1; }
        c->p++;
        skip_ws(c);
        if (c->p >= c->end) { c->fail = "truncated"; return -1; }
        int64_t *h = (int64_t *)S->header.data;
        for (size_t i = 0; i < S->header.n; i++) {
            if ((size_t)(h[4 * i + 1] - h[4 * i]) == k.len && memcmp(c->base + h[4 * i], k.s, k.len) == 0) {
                c->fail = "duplicate top-level key";
                return -1;
            }
        }
        if (S->header.n >= MAX_HEADER_KEYS) { c->fail = "too many top-level keys"; return -1; }
        const uint8_t *v = c->p;
        if (key_is(&k, "traceEvents")) {
            if (found) { c->fail = "duplicate traceEvents"; return -1; }
            found = 1;
            if (*c->p != '[') { c->fail = "traceEvents is no list"; return -1; }
            S->events_at = (int64_t)(c->p - c->base);
            if (scan_events(S, c) < 0) return -1;
            S->events_end = (int64_t)(c->p - c->base);
            drop_scanned(S, c, 1);
        } else {
            if (scan_value(c, 1) < 0) return -1;
        }
        int64_t rec[4] = {(int64_t)(k.s - c->base), (int64_t)(k.s + k.len - c->base), (int64_t)(v - c->base),
                          (int64_t)(c->p - c->base)};
        if (vec_push(&S->header, rec)) { c->fail = "out of memory"; return -1; }
        skip_ws(c);
        if (c->p >= c->end) { c->fail = "truncated"; return -1; }
        if (*c->p == ',') { c->p++; continue; }
        if (*c->p == '}') { c->p++; break; }
        c->fail = "malformed document";
        return -1;
    }
    skip_ws(c);
    if (c->p != c->end) { c->fail = "content after the document"; return -1; }
    if (!found) { c->fail = "no traceEvents"; return -1; }
    return 0;
}

static void scan_free(Scan *S) {
    for (int i = 0; i < N_COLS; i++) free(S->cols[i].data);
    free(S->special.data);
    free(S->complex.data);
    free(S->special_text.data);
    free(S->complex_text.data);
    free(S->phase_counts.data);
    free(S->header.data);
    free(S->scratch);
    intern_free(&S->names);
    intern_free(&S->cats);
    intern_free(&S->phases);
}

static PyObject *strings_of(Interner *t) {
    PyObject *list = PyList_New((Py_ssize_t)t->n);
    if (!list) return NULL;
    for (size_t i = 0; i < t->n; i++) {
        PyObject *s = PyUnicode_DecodeUTF8((const char *)t->items[i].s, (Py_ssize_t)t->items[i].len, "strict");
        if (!s) { Py_DECREF(list); return NULL; }
        PyList_SET_ITEM(list, (Py_ssize_t)i, s);
    }
    return list;
}

/* The column as a list of bytearrays of `rows` items each (the last one shorter): the reader builds the
 * Timeline piece by piece, each piece let go of once used. The column itself is freed. */
static PyObject *as_pieces(Vec *v, size_t rows) {
    size_t n = v->n ? (v->n + rows - 1) / rows : 0;
    PyObject *list = PyList_New((Py_ssize_t)n);
    if (!list) return NULL;
    for (size_t i = 0; i < n; i++) {
        size_t lo = i * rows, hi = lo + rows < v->n ? lo + rows : v->n;
        PyObject *b = PyByteArray_FromStringAndSize(v->data + lo * v->item, (Py_ssize_t)((hi - lo) * v->item));
        if (!b) { Py_DECREF(list); return NULL; }
        PyList_SET_ITEM(list, (Py_ssize_t)i, b);
    }
    free(v->data);
    v->data = NULL;
    v->n = v->cap = 0;
    return list;
}

static PyObject *as_bytearray(Vec *v) {
    PyObject *b = PyByteArray_FromStringAndSize(v->data ? v->data : "", (Py_ssize_t)(v->n * v->item));
    free(v->data);
    v->data = NULL;
    v->n = v->cap = 0;
    return b;
}

PyDoc_STRVAR(scan_doc,
"scan(buffer, max_name_bytes, max_event_bytes, drop_behind=False, threads=1, min_split=0, piece_rows=2**20)\n"
"-> dict | str\n\n"
"Scan a Chrome-trace JSON document. A dict of columns (bytearrays) and interned strings, or a str\n"
"saying why the document is left to the pure-Python reader.");

static void scan_init(Scan *S, size_t max_name, size_t max_event, int drop_behind, const uint8_t *from) {
    memset(S, 0, sizeof *S);
    for (int i = 0; i < N_COLS; i++) S->cols[i].item = COL_SIZE[i];
    S->special.item = 16;
    S->complex.item = 24;
    S->special_text.item = S->complex_text.item = 1;
    S->phase_counts.item = 8;
    S->header.item = 32;
    S->max_name = max_name;
    S->max_event = max_event;
    S->drop_behind = drop_behind;
    S->dropped = from;
}

static PyObject *py_scan(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t max_name, max_event, min_split = 0, piece_rows = (Py_ssize_t)1 << 20;
    int drop_behind = 0, threads = 1;
    if (!PyArg_ParseTuple(args, "y*nn|pinn", &view, &max_name, &max_event, &drop_behind, &threads, &min_split,
                          &piece_rows))
        return NULL;
    if (piece_rows < 1) piece_rows = 1;
    Scan S;
    scan_init(&S, (size_t)(max_name < 0 ? 0 : max_name), (size_t)(max_event < 0 ? 0 : max_event), drop_behind,
              (const uint8_t *)view.buf);
    S.threads = threads;
    S.min_split = (size_t)(min_split < 0 ? 0 : min_split);
    Cur c = {(const uint8_t *)view.buf, (const uint8_t *)view.buf + view.len, (const uint8_t *)view.buf, NULL};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = scan_document(&S, &c);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (rc < 0) {
        scan_free(&S);
        return PyUnicode_FromString(c.fail ? c.fail : "unknown");
    }
    PyObject *out = PyDict_New();
    if (!out) { scan_free(&S); return NULL; }
    PyObject *x;
#define PUT(key, expr) do { x = (expr); if (!x || PyDict_SetItemString(out, key, x) < 0) { Py_XDECREF(x); goto error; } \
                            Py_DECREF(x); } while (0)
    for (int i = 0; i < N_COLS; i++) PUT(COL_NAMES[i], as_pieces(&S.cols[i], (size_t)piece_rows));
    PUT("special", as_bytearray(&S.special));
    PUT("complex", as_bytearray(&S.complex));
    PUT("special_text", as_bytearray(&S.special_text));
    PUT("complex_text", as_bytearray(&S.complex_text));
    PUT("header", as_bytearray(&S.header));
    PUT("names", strings_of(&S.names));
    PUT("cats", strings_of(&S.cats));
    PUT("phases", strings_of(&S.phases));
    PUT("phase_counts", as_bytearray(&S.phase_counts));
    PUT("null_phase", PyLong_FromLongLong(S.null_phase));
    PUT("events", PyLong_FromLongLong(S.events));
    PUT("split", PyBool_FromLong(S.split));
#undef PUT
    scan_free(&S);
    return out;
error:
    scan_free(&S);
    Py_DECREF(out);
    return NULL;
}

static PyMethodDef methods[] = {
    {"scan", py_scan, METH_VARARGS, scan_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_scan", "Compiled field scanner for Chrome-trace JSON.",
                                    -1, methods};

static void init_tables(void) {
    for (int b = 0; b < 256; b++) PLAIN[b] = b >= 0x20 && b < 0x80 && b != '"' && b != '\\';
    for (int i = 0; i < N_INT_ARGS; i++) INT_ARG_LENS[i] = strlen(INT_ARGS[i]);
    for (int i = 0; i < N_COMPLEX_ARGS; i++) COMPLEX_ARG_LENS[i] = strlen(COMPLEX_ARGS[i]);
    for (int i = 0; i < N_FIELDS; i++) FIELD_LENS[i] = strlen(FIELDS[i]);
}

PyMODINIT_FUNC PyInit__scan(void) {
    init_tables();
    return PyModule_Create(&module);
}
