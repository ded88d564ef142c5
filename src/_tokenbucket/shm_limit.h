/* The limit of a server's quota in a shared segment (shm.h), as the store's own files see it: before an instant,
 * grants take at most so many tokens in all (limits.h's limited_until and limited_left, for every process). It is
 * one word, changed by compare-and-swap: the instant in its high 39 bits, in units of 2^20 ns after -2^58 ns
 * (rounded up: a limit ends up to 1.05 ms later, never earlier), and the tokens left in its low 25, a float of a
 * 20-bit mantissa and a 5-bit exponent (m * 2^(e - 8): whole counts up to 2^20 exact, at most ~8.8e12; rounded
 * down: a limit leaves at most as many as it was told, never more). The word 0 is no limit (its instant is
 * -2^58, before any clock reading). Every value of the word is a valid limit, so a hostile writer can make one
 * stricter or looser, as it could any word, but never make a reader misbehave. Not part of the store's interface. */
#ifndef AIOTB_SHM_LIMIT_H
#define AIOTB_SHM_LIMIT_H

#include <math.h>

#include "shm_rate.h"

#define LIMIT_UNIT_SHIFT 20                        /* the instant's unit: 2^20 ns */
#define LIMIT_LEFT_BITS 25                         /* the tokens left: the word's low bits */
#define LIMIT_MANTISSA_BITS 20
#define LIMIT_EXPONENT_BIAS 8
#define LIMIT_LEFT_MOST ((UINT64_C(1) << LIMIT_LEFT_BITS) - 1)
#define LIMIT_LATEST (TB_MAX_SPAN - ((tb_ns)1 << LIMIT_UNIT_SHIFT))  /* the latest instant a limit may end at */

// The instant a limit word's limit ends at, ns (-2^58 for the word 0: no limit).
static inline tb_ns limit_until_of(uint64_t word)
{
    return (tb_ns)((word >> LIMIT_LEFT_BITS) << LIMIT_UNIT_SHIFT) - TB_MAX_SPAN;
}

// The tokens a limit word leaves until its end.
static inline double limit_left_of(uint64_t word)
{
    uint64_t left = word & LIMIT_LEFT_MOST;
    return ldexp((double)(left & ((UINT64_C(1) << LIMIT_MANTISSA_BITS) - 1)),
                 (int)(left >> LIMIT_MANTISSA_BITS) - LIMIT_EXPONENT_BIAS);
}

// The low bits of tokens left (>= 0, finite), rounded down to what they can hold.
static inline uint64_t limit_left_bits(double tokens)
{
    if (!(tokens > 0))
        return 0;
    int k;
    frexp(tokens, &k);  /* tokens < 2^k */
    int e = k - (LIMIT_MANTISSA_BITS - LIMIT_EXPONENT_BIAS);
    if (e < 0)
        e = 0;
    if (e >= 1 << (LIMIT_LEFT_BITS - LIMIT_MANTISSA_BITS))
        return LIMIT_LEFT_MOST;  /* more than the most: the most, fewer */
    uint64_t m = (uint64_t)ldexp(tokens, LIMIT_EXPONENT_BIAS - e);  /* < 2^20, the scaling exact */
    return (uint64_t)e << LIMIT_MANTISSA_BITS | m;
}

// The word of a limit of tokens (>= 0, finite) left until until (at most LIMIT_LATEST, after -2^58).
static inline uint64_t limit_word(tb_ns until, double tokens)
{
    uint64_t units = ((uint64_t)(until + TB_MAX_SPAN) + ((UINT64_C(1) << LIMIT_UNIT_SHIFT) - 1)) >> LIMIT_UNIT_SHIFT;
    return units << LIMIT_LEFT_BITS | limit_left_bits(tokens);
}

// The first instant from t on at which the limit of word lets a grant of amount through.
static inline tb_ns limited_from(uint64_t word, double amount, tb_ns t)
{
    tb_ns until = limit_until_of(word);
    return t < until && amount > limit_left_of(word) ? until : t;
}

// The limit word (one step).
static inline uint64_t limit_load(const tb_shm *seg)
{
    TB_SHM_STEP();
    return atomic_load(&seg->limit);
}

#endif
