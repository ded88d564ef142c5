/* The bound a shared segment must keep, checked over a log of grants (tests of src/_tokenbucket/shm*.c).
 *
 * For one rate of burst_ticks, in any interval [a, b] of grant instants the ticks of tokens granted may not
 * exceed burst_ticks + 16 (b - a) + slack per grant: GCRA's bound, with room for what limits.h allows a grant
 * (a rate full for less than a nanosecond keeps its F, so a grant may be taken as of up to 15 ticks before
 * its instant). Checked as GCRA's virtual scheduling over the grants in instant order, each needing slack less:
 * F = max(F, t) + need - slack must stay within burst_ticks of every t. */
#ifndef AIOTB_TESTS_SHM_BOUND_H
#define AIOTB_TESTS_SHM_BOUND_H

#include <stdlib.h>

#include "limits.h"

#define GRANT_SLACK TB_TICKS_PER_NS  /* ticks a grant may be taken early by (see above) */

/* A grant as logged: its instant and its need in ticks of one rate. */
typedef struct {
    tb_ns at;
    int64_t need;
} logged_grant;

static int by_instant(const void *a, const void *b)
{
    tb_ns x = ((const logged_grant *)a)->at, y = ((const logged_grant *)b)->at;
    return (x > y) - (x < y);
}

// Sorts the n grants by instant; returns the most ticks by which an interval exceeds the bound (<= 0: kept).
static int64_t bound_excess(logged_grant *grants, size_t n, int64_t burst_ticks)
{
    qsort(grants, n, sizeof *grants, by_instant);
    int64_t f = INT64_MIN, worst = INT64_MIN;
    for (size_t i = 0; i < n; i++) {
        int64_t t = grants[i].at * TB_TICKS_PER_NS;
        f = (f > t ? f : t) + grants[i].need - GRANT_SLACK;
        if (f - t - burst_ticks > worst)
            worst = f - t - burst_ticks;
    }
    return worst;
}

#endif
