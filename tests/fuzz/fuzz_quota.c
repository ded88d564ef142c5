/* libFuzzer harness for the reader of a response's rate-limit fields (src/_tokenbucket/quota.c): arbitrary bytes
 * as the fields of a response, every quota asked of them.
 *
 *     clang -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
 *           -Isrc/_tokenbucket tests/fuzz/fuzz_quota.c src/_tokenbucket/quota.c -lm -o fuzz_quota
 *     ./fuzz_quota -runs=1000000 tests/fuzz/quota_corpus
 *
 * Built with -DFUZZ_REPLAY (any C compiler, no libFuzzer) it replays the files named on its command line.
 *
 * The input is lines ("\n"), each a field: the name up to the first ":", the value after it; a line that starts
 * with "~" has a name of text (a str's), one without ":" no value (neither bytes nor str). Each field is copied
 * to a buffer of its own size, so that a read past its end is AddressSanitizer's to find.
 *
 * What must hold: no crash, no undefined behaviour, no read outside a field, and for a quota told, counts and
 * resets the contract allows: a count of at most 15 digits, a reset within a year, both finite and >= 0. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quota.h"

#define MOST_FIELDS 64

static void require(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "violated: %s\n", what);
        abort();
    }
}

// A copy of [p, p + len) in memory of exactly len bytes (one byte for none), for the caller to free.
static char *copy(const uint8_t *p, size_t len)
{
    char *out = malloc(len ? len : 1);
    require(out != NULL, "memory");
    if (len)
        memcpy(out, p, len);
    return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tb_field fields[MOST_FIELDS];
    char *owned[2 * MOST_FIELDS];
    size_t n = 0, kept = 0, at = 0;
    while (at <= size && n < MOST_FIELDS) {
        const uint8_t *line = data + at, *end = memchr(line, '\n', size - at);
        size_t len = end ? (size_t)(end - line) : size - at;
        bool text = len > 0 && line[0] == '~';
        const uint8_t *name = line + text, *colon = memchr(name, ':', len - text);
        size_t name_len = colon ? (size_t)(colon - name) : len - text;
        fields[n] = (tb_field){.name = owned[kept++] = copy(name, name_len), .name_len = name_len, .name_is_text = text};
        if (colon) {
            size_t value_len = len - text - name_len - 1;
            fields[n].value = owned[kept++] = copy(colon + 1, value_len);
            fields[n].value_len = value_len;
        }
        n++;
        at += len + 1;
    }
    for (int kind = -1; kind <= TB_QUOTA_KINDS; kind++) {
        double remaining = -1, reset = -1;
        tb_quota_status status = tb_quota_read(fields, n, kind, &remaining, &reset);
        require(status == TB_QUOTA_NONE || status == TB_QUOTA_TOLD || status == TB_QUOTA_UNSURE, "a status named");
        if (kind < 0 || kind >= TB_QUOTA_KINDS)
            require(status == TB_QUOTA_UNSURE, "a kind out of range is left to the full reader");
        if (status == TB_QUOTA_TOLD) {
            require(isfinite(remaining) && remaining >= 0 && remaining < 1e15, "a count of at most 15 digits");
            require(isfinite(reset) && reset >= 0 && reset <= 366 * 86400.0, "a reset within a year");
        } else {
            require(remaining == -1 && reset == -1, "nothing written unless told");
        }
    }
    for (size_t i = 0; i < kept; i++)
        free(owned[i]);
    return 0;
}

#ifdef FUZZ_REPLAY
#include "replay.h"
#endif
