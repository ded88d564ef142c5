#include "quota.h"

#include <string.h>

#define LONGEST_NAME 48                  /* longer than every name read here, once stripped */
#define MOST_DIGITS 15                   /* a number of at most this many digits is exact in a double */
#define EPOCH_FROM 1e9                   /* a reset this large is an epoch instant: left to the full reader */
#define LONGEST_WAIT (366 * 86400.0)     /* s: a reset further away is absurd, and read as not told */

typedef enum { IN_SECONDS, AS_DURATION } reset_form;

/* A style's fields for one quota: its remaining count, its reset and how that reads. */
typedef struct {
    int kind;
    const char *remaining, *reset;
    reset_form form;
} style;

static const style STYLES[] = {
    {TB_QUOTA_REQUESTS, "ratelimit-remaining", "ratelimit-reset", IN_SECONDS},
    {TB_QUOTA_REQUESTS, "x-ratelimit-remaining", "x-ratelimit-reset", IN_SECONDS},
    {TB_QUOTA_REQUESTS, "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests", AS_DURATION},
    {TB_QUOTA_TOKENS, "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens", AS_DURATION},
};
#define NSTYLES (sizeof STYLES / sizeof STYLES[0])

/* Fields whose presence leaves a quota to the full reader: the IETF draft's list, Anthropic's counts. */
static const struct {
    int kind;
    const char *name;
} UNREAD[] = {
    {TB_QUOTA_REQUESTS, "ratelimit"},
    {TB_QUOTA_REQUESTS, "anthropic-ratelimit-requests-remaining"},
    {TB_QUOTA_TOKENS, "anthropic-ratelimit-tokens-remaining"},
    {TB_QUOTA_INPUT_TOKENS, "anthropic-ratelimit-input-tokens-remaining"},
    {TB_QUOTA_OUTPUT_TOKENS, "anthropic-ratelimit-output-tokens-remaining"},
};
#define NUNREAD (sizeof UNREAD / sizeof UNREAD[0])

static const double TENS[MOST_DIGITS + 1] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7,
                                             1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15};

// Whether byte c is one that Python's str.strip removes (within ASCII: what str.isspace says).
static bool text_space(unsigned char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

// Whether byte c is one that Python's bytes.strip removes.
static bool bytes_space(unsigned char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r');
}

// Narrows [*p, *end) to the text without the spaces at either end (text_space, or bytes_space if not text).
static void strip(const char **p, const char **end, bool text)
{
    while (*p < *end && (text ? text_space((unsigned char)**p) : bytes_space((unsigned char)**p)))
        (*p)++;
    while (*end > *p && (text ? text_space((unsigned char)(*end)[-1]) : bytes_space((unsigned char)(*end)[-1])))
        (*end)--;
}

// Writes the lower-case name of field f, stripped, into key (LONGEST_NAME bytes); its length, or 0 if it is
// longer than any name read here (or empty).
static size_t key_of(const tb_field *f, char *key)
{
    const char *p = f->name, *end = f->name + f->name_len;
    strip(&p, &end, f->name_is_text);
    size_t len = (size_t)(end - p);
    if (len == 0 || len > LONGEST_NAME)
        return 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)p[i];
        key[i] = (char)(c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c);
    }
    return len;
}

// Whether key (len bytes) is name.
static bool named(const char *key, size_t len, const char *name)
{
    return strlen(name) == len && memcmp(key, name, len) == 0;
}

// Reads the digits [*p, end) from *p on (at most MOST_DIGITS in all with *count already read) into *value
// (times ten for each); advances *p past them and adds their number to *count. False past MOST_DIGITS.
static bool digits(const char **p, const char *end, double *value, int *count)
{
    for (; *p < end && **p >= '0' && **p <= '9'; (*p)++) {
        if (++*count > MOST_DIGITS)
            return false;
        *value = *value * 10 + (**p - '0');
    }
    return true;
}

// A number [p, end) of the form D+ or D+.D+ (dot: whether ".D*" and ".D+" after no digit may come too, as in a
// Go duration's amount), read exactly as Python's float reads it; false for any other form or more digits.
// The value is the integer of all its digits over a power of ten, both exact: one rounding, as float's.
static bool decimal(const char *p, const char *end, bool dot, double *value, const char **stop)
{
    double whole = 0;
    int count = 0, before;
    if (!digits(&p, end, &whole, &count))
        return false;
    before = count;
    if (before == 0 && !dot)  /* ".5": Go's, not a plain number's */
        return false;
    if (p < end && *p == '.') {
        p++;
        if (!digits(&p, end, &whole, &count))
            return false;
        if (count == before && !dot)  /* "5." : Go's, not a plain number's */
            return false;
    }
    if (count == 0)
        return false;
    *value = whole / TENS[count - before];
    *stop = p;
    return true;
}

// A plain number: the whole of [p, end) of the form D+ or D+.D+.
static bool plain_number(const char *p, const char *end, double *value)
{
    const char *stop;
    return decimal(p, end, false, value, &stop) && stop == end;
}

// A Go duration ("6m0s", "1h2.5m", "20ms", ".5s"): the sum, in order, of each amount times its unit in seconds.
static bool duration(const char *p, const char *end, double *value)
{
    double sum = 0;
    if (p == end)
        return false;
    while (p < end) {
        double amount, unit;
        if (!decimal(p, end, true, &amount, &p) || p == end)
            return false;
        switch (*p++) {
        case 'h': unit = 3600.0; break;
        case 'm':
            if (p < end && *p == 's') {
                p++;
                unit = 1e-3;
            } else {
                unit = 60.0;
            }
            break;
        case 's': unit = 1.0; break;
        case 'u': unit = 1e-6; goto second;
        case 'n': unit = 1e-9; goto second;
        default: return false;
        second:
            if (p == end || *p++ != 's')
                return false;
        }
        sum += amount * unit;
    }
    *value = sum;
    return true;
}

// The stripped value of f as text (Python's str.strip of it, bytes read as Latin-1); false if it is neither
// bytes nor str or holds a byte outside ASCII (whose stripping, \x85 and \xa0, is left to the full reader).
static bool value_of(const tb_field *f, const char **p, const char **end)
{
    if (f->value == NULL)
        return false;
    for (size_t i = 0; i < f->value_len; i++)
        if ((unsigned char)f->value[i] >= 0x80)
            return false;
    *p = f->value;
    *end = f->value + f->value_len;
    strip(p, end, true);
    return true;
}

// A style's quota from its fields: its remaining count and its reset (*told false if not told or too far);
// false for a form left to the full reader.
static bool quota_of(const style *s, const tb_field *remaining_field, const tb_field *reset_field,
                     double *remaining, double *reset, bool *told)
{
    const char *p, *end, *stop;
    int count = 0;
    double value = 0;
    *reset = 0;
    *told = false;
    if (!value_of(remaining_field, &p, &end) || p == end)
        return false;
    stop = p;
    if (!digits(&stop, end, &value, &count) || stop != end)  /* a whole number alone, as the full reader's */
        return false;                                        /* first reading of it */
    *remaining = value;
    if (reset_field == NULL)
        return true;
    if (!value_of(reset_field, &p, &end))
        return false;
    if (s->form == IN_SECONDS) {
        if (!plain_number(p, end, &value) || value >= EPOCH_FROM)
            return false;
    } else if (!plain_number(p, end, &value) && !duration(p, end, &value)) {
        return false;
    }
    *told = value <= LONGEST_WAIT;
    *reset = *told ? value : 0;
    return true;
}

tb_quota_status tb_quota_read(const tb_field *fields, size_t n, int kind, double *remaining, double *reset_after)
{
    const tb_field *remaining_of[NSTYLES] = {NULL}, *reset_of[NSTYLES] = {NULL};
    size_t first_at[NSTYLES] = {0};
    if (kind < 0 || kind >= TB_QUOTA_KINDS)
        return TB_QUOTA_UNSURE;
    for (size_t i = 0; i < n; i++) {
        char key[LONGEST_NAME];
        size_t len = key_of(&fields[i], key);
        if (len == 0)
            continue;
        for (size_t u = 0; u < NUNREAD; u++)
            if (UNREAD[u].kind == kind && named(key, len, UNREAD[u].name))
                return TB_QUOTA_UNSURE;
        for (size_t s = 0; s < NSTYLES; s++) {
            if (STYLES[s].kind != kind)
                continue;
            bool is_remaining = named(key, len, STYLES[s].remaining), is_reset = named(key, len, STYLES[s].reset);
            if ((is_remaining || is_reset) && fields[i].value == NULL)
                return TB_QUOTA_UNSURE;  /* the full reader skips it, and reads the next one of its name */
            if (is_remaining && remaining_of[s] == NULL) {
                remaining_of[s] = &fields[i];
                first_at[s] = i;
            } else if (is_reset && reset_of[s] == NULL) {
                reset_of[s] = &fields[i];
            }
        }
    }
    bool found = false, best_told = false;
    double best_remaining = 0, best_reset = 0;
    size_t after = 0;  /* the styles in the order their remaining fields came, as the full reader meets them */
    for (size_t round = 0; round < NSTYLES; round++) {
        size_t next = NSTYLES;
        for (size_t s = 0; s < NSTYLES; s++)
            if (remaining_of[s] != NULL && first_at[s] >= after && (next == NSTYLES || first_at[s] < first_at[next]))
                next = s;
        if (next == NSTYLES)
            break;
        after = first_at[next] + 1;
        double left, reset;
        bool told;
        if (!quota_of(&STYLES[next], remaining_of[next], reset_of[next], &left, &reset, &told))
            return TB_QUOTA_UNSURE;
        if (!found || left < best_remaining || (left == best_remaining && reset > best_reset)) {
            found = true;
            best_remaining = left;
            best_reset = reset;
            best_told = told;
        }
    }
    if (!found || !best_told)
        return TB_QUOTA_NONE;
    *remaining = best_remaining;
    *reset_after = best_reset;
    return TB_QUOTA_TOLD;
}
