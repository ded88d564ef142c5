/* libFuzzer harness for the shared segment's reader: arbitrary bytes as a mapped segment, read through every
 * entry point of shm.h while a hostile writer changes it between accesses.
 *
 *     clang -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
 *           -Isrc/_tokenbucket tests/fuzz/fuzz_segment.c src/_tokenbucket/limits.c src/_tokenbucket/window.c -lm -o fuzz_segment
 *     ./fuzz_segment -runs=1000000 tests/fuzz/segment_corpus
 *
 * Built with -DFUZZ_REPLAY (any C compiler, no libFuzzer) it replays the files named on its command line.
 *
 * The store is included with TB_SHM_STEP defined, so that the writer acts before every access to a shared
 * word. The input's first byte chooses the start: a segment published by tb_shm_create (of 1 to 4 rates from
 * the next bytes) with patches over it, or the input's bytes themselves as the segment (zero past their end).
 * The segment ends where a page that cannot be read begins, so that any read past it crashes, whether or not
 * the compiler's AddressSanitizer instruments atomic loads. Then each byte is an operation with its arguments in the bytes after it; each access to the segment
 * takes the next byte of a separate writer's stream, which may patch one word of the segment.
 *
 * What must hold: no crash, no undefined behaviour, no read outside the segment, no endless loop (libFuzzer's
 * timeout), and every status one the contract names. */
#define _DEFAULT_SOURCE  /* MAP_ANONYMOUS under -std=c11 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define TB_SHM_STEP fuzz_step
#include "shm.c"
#include "shm_grant.c"

#define OPERATIONS 64  /* at most, per input */

/* ---- input ---- */

typedef struct {
    const uint8_t *data;
    size_t size, at;
} input;

static uint8_t next_u8(input *in) { return in->at < in->size ? in->data[in->at++] : 0; }
static uint16_t next_u16(input *in) { return (uint16_t)(next_u8(in) << 8 | next_u8(in)); }
static uint64_t next_u64(input *in) { return (uint64_t)next_u16(in) << 48 | (uint64_t)next_u16(in) << 32 |
                                             (uint64_t)next_u16(in) << 16 | next_u16(in); }

/* ---- the writer ---- */

static tb_shm *seg;      /* the segment read, ending at an unreadable page */
static input writes;     /* the writer's stream: one byte a step, and a patch's bytes after it */

// Writes value at a word-aligned offset of the segment, within it.
static void patch(size_t offset, uint64_t value)
{
    offset = offset % (sizeof(tb_shm) / 8) * 8;
    memcpy((char *)seg + offset, &value, sizeof value);
}

void fuzz_step(void)
{
    uint8_t move = next_u8(&writes);
    if (move >= 0xf0)  /* one step in sixteen, where the stream says so */
        patch(next_u16(&writes), next_u64(&writes));
}

/* ---- the operations ---- */

// Aborts unless status is one of those a reader may be given.
static void expect(tb_shm_status status)
{
    if ((int)status < (int)TB_SHM_OK || (int)status > (int)TB_SHM_ESTALE)
        abort();
}

// A clock reading, mostly in the store's range (|now| < 2^58 ns), at times out of it.
static tb_ns instant(input *in) { return (tb_ns)(next_u64(in) >> (next_u8(in) % 8)); }

// An amount, mostly small, at times not a usable one.
static double amount(input *in)
{
    static const double odd[] = {0, -1, 1e300, 0.5};
    uint8_t pick = next_u8(in);
    return pick < 4 ? odd[pick] : (double)(pick - 3) / 8;
}

static void operate(input *in, tb_shm_reservation *last)
{
    tb_shm_params params[TB_MAX_RATES] = {{1e6, 10, 10}, {2e6, 10, 5}, {1e3, 100, 0}, {1e9, 1, 1}};
    double tokens;
    tb_ns at;
    switch (next_u8(in) % 15) {
    case 0: expect(tb_shm_validate(seg, sizeof *seg)); break;
    case 1: expect(tb_shm_join(seg, sizeof *seg, next_u8(in) % (TB_MAX_RATES + 1), params)); break;
    case 2: (void)tb_shm_check(seg); break;
    case 3: {
        tb_shm_reservation r;
        tb_shm_status status = tb_shm_reserve(seg, amount(in), instant(in), instant(in), &r);
        expect(status);
        if (status == TB_SHM_OK) {
            if (r.nrates < 1 || r.nrates > TB_MAX_RATES)
                abort();
            *last = r;
        }
        break;
    }
    case 4: expect(tb_shm_take_now(seg, amount(in), instant(in))); break;
    case 5:
        if (tb_shm_cancel(seg, last, instant(in)) > last->nrates)
            abort();
        break;
    case 6: expect(tb_shm_tokens(seg, instant(in), &tokens)); break;
    case 7: expect(tb_shm_fit_at(seg, amount(in), instant(in), &at)); break;
    case 8: expect(tb_shm_pause_until(seg, instant(in))); break;
    case 9: expect(tb_shm_set_rate(seg, next_u8(in) % (TB_MAX_RATES + 1), 1e3 * (1 + next_u8(in)),
                                   1 + next_u8(in) % 16, instant(in))); break;
    case 10: expect(tb_shm_rate_params(seg, next_u8(in) % (TB_MAX_RATES + 1), &params[0])); break;
    case 11: expect(tb_shm_settle(seg, amount(in), amount(in), instant(in))); break;
    case 12: expect(tb_shm_change_rate(seg, next_u8(in) % (TB_MAX_RATES + 1), &params[next_u8(in) % TB_MAX_RATES],
                                       1e3 * (1 + next_u8(in)), 1 + next_u8(in) % 16, instant(in))); break;
    case 13: expect(tb_shm_limit_until(seg, amount(in), instant(in), instant(in), instant(in))); break;
    default: expect(tb_shm_create(seg, sizeof *seg, 1, params)); break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

// The segment, mapped once: a page for it, then one that cannot be read.
static tb_shm *mapped_segment(void)
{
    static tb_shm *mapped;
    if (mapped == NULL) {
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        char *pages = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (pages == MAP_FAILED || sizeof(tb_shm) > page || mprotect(pages + page, page, PROT_NONE) != 0)
            abort();
        mapped = (tb_shm *)(pages + page - sizeof(tb_shm));
    }
    return mapped;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* Two streams: the operations from the front half, the writer's moves from the back half. */
    input in = {data, size / 2, 0};
    writes = (input){NULL, 0, 0};  /* no writer while the segment is set up */
    seg = mapped_segment();
    memset(seg, 0, sizeof *seg);
    uint8_t start = next_u8(&in);
    if (start & 1) {  /* the input's bytes as the segment */
        size_t n = in.size - in.at < sizeof *seg ? in.size - in.at : sizeof *seg;
        memcpy(seg, in.data + in.at, n);
        in.at += n;
    } else {           /* a published segment, then patches */
        const tb_shm_params params[TB_MAX_RATES] = {{1e6, 10, 10}, {2e6, 10, 5}, {1e3, 100, 0}, {1e9, 1, 1}};
        if (tb_shm_create(seg, sizeof *seg, 1 + (start >> 1) % TB_MAX_RATES, params) != TB_SHM_OK)
            abort();
        for (uint8_t patches = next_u8(&in) % 8; patches > 0; patches--)
            patch(next_u16(&in), next_u64(&in));
    }
    writes = (input){data + size / 2, size - size / 2, 0};
    tb_shm_reservation last = {0};
    for (int i = 0; i < OPERATIONS && in.at < in.size; i++)
        operate(&in, &last);
    return 0;
}

#ifdef FUZZ_REPLAY
#include "replay.h"
#endif
