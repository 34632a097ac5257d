/*
 * pretok.c — what happens to text before BPE: UTF-8 decoding, the Unicode
 * classes of GPT-2's pattern (letters and numbers from the generated
 * unicode_table.inc, White_Space by hand), the pattern itself as a
 * hand-written scanner (no regex library), and GPT-2's mapping of bytes
 * to printable characters, in which vocab.json and merges.txt spell tokens.
 */
#include <stddef.h>
#include <stdint.h>

#include "text/text.h"

#include "text/unicode_table.inc"

enum { OTHER = 0, LETTER = 1, NUMBER = 2, SPACE = 3 };
#define INVALID_CP 0xFFFFFFFFu

/* White_Space (Oniguruma's and Rust's \s): TAB..CR, space, NEL, NBSP,
 * OGHAM SPACE MARK, EN QUAD..HAIR SPACE, LINE/PARAGRAPH SEPARATOR, NNBSP,
 * MMSP, IDEOGRAPHIC SPACE. Not U+001C..U+001F (Python's str.isspace
 * counts those; the `tokenizers` package does not). */
static int is_space(uint32_t c) {
    return (c >= 0x9 && c <= 0xD) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
           c == 0x3000;
}

static int char_class(uint32_t c) {
    if (is_space(c)) return SPACE;
    if (c < 0x80) {
        if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return LETTER;
        return c >= '0' && c <= '9' ? NUMBER : OTHER;
    }
    if (c == INVALID_CP) return OTHER;
    size_t lo = 0, hi = sizeof UNICODE_RANGES / sizeof UNICODE_RANGES[0];
    while (lo < hi) { /* the first range whose end is >= c */
        size_t mid = lo + (hi - lo) / 2;
        if (UNICODE_RANGES[mid].hi < c) lo = mid + 1;
        else hi = mid;
    }
    if (lo < sizeof UNICODE_RANGES / sizeof UNICODE_RANGES[0] && UNICODE_RANGES[lo].lo <= c)
        return UNICODE_RANGES[lo].cls;
    return OTHER;
}

int pipit__utf8_next(const uint8_t *s, size_t n, uint32_t *cp) {
    uint8_t b = s[0];
    if (b < 0x80) {
        *cp = b;
        return 1;
    }
    int len = b >= 0xF0 && b <= 0xF4 ? 4 : b >= 0xE0 ? 3 : b >= 0xC2 && b <= 0xDF ? 2 : 0;
    if (b >= 0xF5) len = 0;
    if (len == 0 || (size_t)len > n) {
        *cp = INVALID_CP;
        return 1;
    }
    uint32_t c = b & (0x7F >> len);
    for (int k = 1; k < len; k++) {
        if ((s[k] & 0xC0) != 0x80) {
            *cp = INVALID_CP;
            return 1;
        }
        c = c << 6 | (s[k] & 0x3F);
    }
    /* overlong forms, surrogates and code points past U+10FFFF are invalid */
    if ((len == 3 && c < 0x800) || (len == 4 && (c < 0x10000 || c > 0x10FFFF)) || (c >= 0xD800 && c <= 0xDFFF)) {
        *cp = INVALID_CP;
        return 1;
    }
    *cp = c;
    return len;
}

int pipit__utf8_put(uint32_t cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18);
    out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Printable Latin-1 bytes, which GPT-2 shows as themselves. */
static int shows_itself(unsigned b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE; }

uint32_t pipit__byte_char(uint8_t b) {
    if (shows_itself(b)) return b;
    unsigned rank = 0; /* among the bytes that do not show themselves, in byte order */
    for (unsigned x = 0; x < b; x++) rank += !shows_itself(x);
    return 0x100 + rank;
}

int pipit__char_byte(uint32_t cp) {
    if (cp < 0x100) return shows_itself(cp) ? (int)cp : -1;
    if (cp >= 0x100 + 68) return -1;
    unsigned rank = cp - 0x100;
    for (unsigned x = 0; x < 256; x++)
        if (!shows_itself(x) && rank-- == 0) return (int)x;
    return -1;
}

/* The class of the character at byte i (and its length in *len); i < n. */
static int class_at(const uint8_t *s, size_t n, size_t i, int *len) {
    uint32_t cp;
    *len = pipit__utf8_next(s + i, n - i, &cp);
    return char_class(cp);
}

/* End of the run of characters of class `cls` from byte i. */
static size_t run_of(const uint8_t *s, size_t n, size_t i, int cls) {
    int len;
    while (i < n && class_at(s, n, i, &len) == cls) i += (size_t)len;
    return i;
}

/* 's 't 're 've 'm 'll 'd at byte i (s[i] is the apostrophe): its length, or 0. */
static size_t contraction(const uint8_t *s, size_t n, size_t i) {
    if (i + 1 >= n) return 0;
    uint8_t a = s[i + 1], b = i + 2 < n ? s[i + 2] : 0;
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

/* The alternatives are tried in the pattern's order; the first that
 * matches wins (not the longest). */
size_t pipit__pretok_next(const uint8_t *s, size_t n, size_t i) {
    int len;
    if (s[i] == '\'') {
        size_t k = contraction(s, n, i);
        if (k) return i + k;
    }
    /* ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+': an optional space, then a run of one class */
    size_t j = s[i] == ' ' && i + 1 < n ? i + 1 : i;
    int cls = class_at(s, n, j, &len);
    if (cls != SPACE) return run_of(s, n, j, cls);
    /* '\s+(?!\S)' then '\s+': a run of white space that leaves its last
     * character to the next piece when something else follows it */
    size_t end = i, last = i;
    while (end < n && class_at(s, n, end, &len) == SPACE) {
        last = end;
        end += (size_t)len;
    }
    if (end < n && last > i) return last;
    return end;
}
