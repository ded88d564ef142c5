/* Unit tests of the reader of a response's rate-limit fields (src/_tokenbucket/quota.c), run without any framework:
 *
 *     cc -std=c11 -O2 -Isrc/_tokenbucket -Itests/c tests/c/test_quota.c src/_tokenbucket/quota.c
 *     ./a.out
 *
 * Prints one line per failed check and ends with "N passed, M failed"; exits non-zero if any test failed.
 * tests/test_follow_fast.py checks it against aiotb._signals, through the binding, on random headers. */
#include "quota.h"

#include <string.h>

#include "harness.h"

// A field of two C strings; text: a str's (else bytes').
static tb_field field(const char *name, const char *value, bool text)
{
    return (tb_field){.name = name, .name_len = strlen(name), .value = value, .value_len = value ? strlen(value) : 0,
                      .name_is_text = text};
}

// What the fields tell of kind: the status, and remaining and reset_after (-1 where not written).
static tb_quota_status read_quota(const tb_field *fields, size_t n, int kind, double *remaining, double *reset)
{
    *remaining = *reset = -1;
    return tb_quota_read(fields, n, kind, remaining, reset);
}

static void test_the_common_forms(void)
{
    double left, reset;
    tb_field x[] = {field("Date", "Sun, 29 Nov 2026 01:00:00 GMT", false), field("X-RateLimit-Limit", "100", false),
                    field("X-RateLimit-Remaining", "7", false), field("X-RateLimit-Reset", "30", false)};
    CHECK(read_quota(x, 4, TB_QUOTA_REQUESTS, &left, &reset) == TB_QUOTA_TOLD && left == 7 && reset == 30);
    CHECK(read_quota(x, 4, TB_QUOTA_TOKENS, &left, &reset) == TB_QUOTA_NONE && left == -1);
    tb_field padded[] = {field(" ratelimit-remaining\t", " 12 ", true), field("RATELIMIT-RESET", "2.5", true)};
    CHECK(read_quota(padded, 2, TB_QUOTA_REQUESTS, &left, &reset) == TB_QUOTA_TOLD && left == 12 && reset == 2.5);
    tb_field openai[] = {field("x-ratelimit-remaining-tokens", "149984", false),
                         field("x-ratelimit-reset-tokens", "1h2m3.5s", false),
                         field("x-ratelimit-remaining-requests", "59", false),
                         field("x-ratelimit-reset-requests", "20ms", false)};
    CHECK(read_quota(openai, 4, TB_QUOTA_TOKENS, &left, &reset) == TB_QUOTA_TOLD && left == 149984 &&
          reset == 3600.0 + 120.0 + 3.5);
    CHECK(read_quota(openai, 4, TB_QUOTA_REQUESTS, &left, &reset) == TB_QUOTA_TOLD && left == 59 && reset == 20e-3);
    tb_field no_reset[] = {field("x-ratelimit-remaining", "7", false)};
    CHECK(read_quota(no_reset, 1, TB_QUOTA_REQUESTS, &left, &reset) == TB_QUOTA_NONE);
    tb_field far[] = {field("x-ratelimit-remaining", "7", false), field("x-ratelimit-reset", "40000000", false)};
    CHECK(read_quota(far, 2, TB_QUOTA_REQUESTS, &left, &reset) == TB_QUOTA_NONE);  /* a reset past a year: none */
}

static void test_the_tightest_wins(void)
{
    double left, reset;
    tb_field two[] = {field("x-ratelimit-remaining", "3", false), field("x-ratelimit-reset", "1", false),
                      field("x-ratelimit-remaining-requests", "3", false),
                      field("x-ratelimit-reset-requests", "2s", false), field("ratelimit-remaining", "4", false),
                      field("ratelimit-reset", "9", false)};
    CHECK(read_quota(two, 6, TB_QUOTA_REQUESTS, &left, &reset) == TB_QUOTA_TOLD && left == 3 && reset == 2);
    tb_field first[] = {field("x-ratelimit-remaining", "3", false), field("x-ratelimit-remaining", "1", false),
                        field("x-ratelimit-reset", "5", false), field("x-ratelimit-reset", "6", false)};
    CHECK(read_quota(first, 4, TB_QUOTA_REQUESTS, &left, &reset) == TB_QUOTA_TOLD && left == 3 && reset == 5);
}

static void test_what_is_left_to_the_full_reader(void)
{
    double left, reset;
    const char *unsure[][2] = {{"x-ratelimit-remaining", "7, 9"}, {"x-ratelimit-remaining", "1.5"},
                               {"x-ratelimit-remaining", ""}, {"x-ratelimit-remaining", "1234567890123456"},
                               {"x-ratelimit-remaining", "\xa0" "7"}, {"x-ratelimit-reset", "1795950000"},
                               {"x-ratelimit-reset", "30;w=1"}, {"x-ratelimit-reset", ".5"}, {"ratelimit", "x"},
                               {"anthropic-ratelimit-requests-remaining", "5"}};
    for (size_t i = 0; i < sizeof unsure / sizeof unsure[0]; i++) {
        tb_field fields[] = {field("x-ratelimit-remaining", "7", false), field("x-ratelimit-reset", "30", false),
                             field(unsure[i][0], unsure[i][1], false)};
        bool remaining_field = strcmp(unsure[i][0], "x-ratelimit-remaining") == 0;
        bool reset_field = strcmp(unsure[i][0], "x-ratelimit-reset") == 0;
        if (remaining_field)  /* the first of a name is read: put the odd one first */
            fields[0] = fields[2];
        if (reset_field)
            fields[1] = fields[2];
        CHECK(read_quota(fields, 3, TB_QUOTA_REQUESTS, &left, &reset) == TB_QUOTA_UNSURE);
    }
    tb_field go[] = {field("x-ratelimit-remaining-tokens", "5", false), field("x-ratelimit-reset-tokens", "6\xc2\xb5s", false)};
    CHECK(read_quota(go, 2, TB_QUOTA_TOKENS, &left, &reset) == TB_QUOTA_UNSURE);
    tb_field odd_value[] = {field("x-ratelimit-remaining", NULL, false)};
    CHECK(read_quota(odd_value, 1, TB_QUOTA_REQUESTS, &left, &reset) == TB_QUOTA_UNSURE);
    CHECK(read_quota(odd_value, 1, TB_QUOTA_TOKENS, &left, &reset) == TB_QUOTA_NONE);  /* not a field of tokens */
    CHECK(read_quota(NULL, 0, TB_QUOTA_KINDS, &left, &reset) == TB_QUOTA_UNSURE);
}

static void test_strip_as_python_does(void)
{
    double left, reset;
    /* bytes.strip leaves \x1c; str.strip takes it: a name of bytes with it is another name */
    tb_field bytes_name[] = {field("\x1cx-ratelimit-remaining", "7", false), field("x-ratelimit-reset", "3", false)};
    CHECK(read_quota(bytes_name, 2, TB_QUOTA_REQUESTS, &left, &reset) == TB_QUOTA_NONE);
    tb_field text_name[] = {field("\x1cx-ratelimit-remaining", "7", true), field("x-ratelimit-reset", "3", false)};
    CHECK(read_quota(text_name, 2, TB_QUOTA_REQUESTS, &left, &reset) == TB_QUOTA_TOLD && left == 7 && reset == 3);
    tb_field values[] = {field("x-ratelimit-remaining", "\x0b" "7\x1f", false), field("x-ratelimit-reset", "\t3 ", false)};
    CHECK(read_quota(values, 2, TB_QUOTA_REQUESTS, &left, &reset) == TB_QUOTA_TOLD && left == 7 && reset == 3);
}

static void test_numbers_read_as_float_reads_them(void)
{
    double left, reset;
    const char *resets[][2] = {{"0.1", "0.1"}, {"30.25", "30.25"}, {"1.5m", "90"}, {"5.s", "5"}, {".5s", "0.5"},
                               {"1ms500us", "0.0015"}, {"999999999", "999999999"}};
    for (size_t i = 0; i < sizeof resets / sizeof resets[0]; i++) {
        tb_field fields[] = {field("x-ratelimit-remaining-requests", "007", false),
                             field("x-ratelimit-reset-requests", resets[i][0], false)};
        tb_quota_status status = read_quota(fields, 2, TB_QUOTA_REQUESTS, &left, &reset);
        double expected = strcmp(resets[i][0], "1ms500us") == 0 ? 1 * 1e-3 + 500 * 1e-6
                        : strcmp(resets[i][0], "1.5m") == 0 ? 1.5 * 60.0 : 0;
        if (expected == 0) {
            char *end;
            expected = strtod(resets[i][1], &end);
        }
        CHECK(status == (strcmp(resets[i][0], "999999999") == 0 ? TB_QUOTA_NONE : TB_QUOTA_TOLD));
        CHECK(status != TB_QUOTA_TOLD || (left == 7 && reset == expected));
    }
}

int main(void)
{
    RUN(test_the_common_forms);
    RUN(test_the_tightest_wins);
    RUN(test_what_is_left_to_the_full_reader);
    RUN(test_strip_as_python_does);
    RUN(test_numbers_read_as_float_reads_them);
    return tests_summary();
}
