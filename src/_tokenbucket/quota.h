/* What a response's rate-limit fields say is left of one quota: the HTTP adapters' fast path to following a
 * server's headers. It reads the common forms only, each exactly as aiotb._signals (the full reader) reads it:
 * RateLimit-Remaining / -Reset and X-RateLimit-Remaining / -Reset with whole numbers and resets in delta
 * seconds, OpenAI's x-ratelimit-remaining-{requests,tokens} with resets as Go durations. What it does not read
 * (the IETF draft's structured RateLimit field, Anthropic's RFC 3339 resets, epoch resets, which need the
 * server's Date, numbers of more than 15 digits, values of another form or with bytes outside ASCII) it
 * leaves to that reader (TB_QUOTA_UNSURE), so a caller gets the same answer either way.
 *
 * Pure C: names and values are byte strings the caller keeps alive; nothing is allocated, no locale read. */
#ifndef AIOTB_QUOTA_H
#define AIOTB_QUOTA_H

#include <stdbool.h>
#include <stddef.h>

/* The quotas, in aiotb._signals.QUOTAS' order. */
enum { TB_QUOTA_REQUESTS, TB_QUOTA_TOKENS, TB_QUOTA_INPUT_TOKENS, TB_QUOTA_OUTPUT_TOKENS, TB_QUOTA_KINDS };

typedef enum {
    TB_QUOTA_NONE,    /* the fields tell of no such quota with a reset: nothing to follow */
    TB_QUOTA_TOLD,    /* remaining and reset_after hold what they tell */
    TB_QUOTA_UNSURE,  /* a form this reader leaves to the full one */
} tb_quota_status;

/* One header field as sent: its name (text: a str, whose strip is Python's str.strip; else bytes, whose strip
 * is bytes.strip) and its value (NULL: neither bytes nor str). */
typedef struct {
    const char *name, *value;
    size_t name_len, value_len;
    bool name_is_text;
} tb_field;

/* Reads the n fields for quota kind: the most restrictive quota they tell of (the least remaining, the later
 * reset breaking a tie, the first told on a full tie), with its requests or tokens left and the seconds until
 * it resets: TB_QUOTA_TOLD, TB_QUOTA_NONE when there is none or its reset is not told, TB_QUOTA_UNSURE for a
 * form left to aiotb._signals or a kind out of range. */
tb_quota_status tb_quota_read(const tb_field *fields, size_t n, int kind, double *remaining, double *reset_after);

#endif
