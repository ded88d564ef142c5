/* One rate of a shared segment (shm.h) as the store's own files see it: the steps that touch the segment, the
 * layout of a state word, and a rate read at an instant. Not part of the store's interface. */
#ifndef AIOTB_SHM_RATE_H
#define AIOTB_SHM_RATE_H

#include <stdbool.h>

#include "shm.h"

/* Every access to the segment is one step. The model checker of the protocol (tests/c/test_shm_model.c)
 * defines TB_SHM_STEP as a function of its own, which may switch to another simulated process before each. */
#ifdef TB_SHM_STEP
void TB_SHM_STEP(void);
#else
#define TB_SHM_STEP() ((void)0)
#endif

#define GENERATIONS 3u     /* record slots: a generation's slot is written again three changes later */
#define UNANCHORED 3u      /* the low bits of a state word before the rate's first use */
#define DEBT_LIMIT ((int64_t)TB_SHM_HORIZON * TB_TICKS_PER_NS)  /* the furthest F may be ahead of now */

// The word's value (one step).
static inline uint64_t shm_load(const _Atomic uint64_t *word)
{
    TB_SHM_STEP();
    return atomic_load(word);
}

// Replaces *word by desired if it holds *expected and returns true; else writes what it holds into *expected
// (one step).
static inline bool shm_cas(_Atomic uint64_t *word, uint64_t *expected, uint64_t desired)
{
    TB_SHM_STEP();
    return atomic_compare_exchange_strong(word, expected, desired);
}

// The number of rates of a segment, read once, or 0 if its header says something impossible.
static inline uint32_t shm_nrates(const tb_shm *seg)
{
    uint32_t nrates = seg->nrates;
    return nrates >= 1 && nrates <= TB_MAX_RATES ? nrates : 0;
}

// Spends one of an operation's retries (TB_SHM_TRIES at its start): false once there are none left, when the
// operation gives up with TB_SHM_EFOREIGN.
static inline bool shm_retry(int *tries) { return --*tries >= 0; }

// Whether now is a clock reading the arithmetic can take: |now| < 2^58 ns.
static inline bool shm_clock_ok(tb_ns now) { return now > -TB_MAX_SPAN && now < TB_MAX_SPAN; }

// Whether a state word has been anchored (its high bits are F).
static inline bool state_anchored(uint64_t word) { return (word & 3) != UNANCHORED; }

// The generation (mod 3) of the parameters a state word goes with.
static inline unsigned state_generation(uint64_t word)
{
    return (unsigned)(state_anchored(word) ? word & 3 : (word >> 2) % GENERATIONS);
}

// The state word of F and generation.
static inline uint64_t state_word(tb_gcra f, unsigned generation) { return (uint64_t)f << 2 | generation; }

/* A rate as read at an instant. */
typedef struct {
    uint64_t word;        /* its state word: what a compare-and-swap expects */
    tb_gcra f;            /* the word's F, recovered relative to the instant */
    unsigned generation;  /* the word's generation (mod 3) */
    tb_rate rate;         /* the parameters of that generation */
} tb_shm_view;

// Reads rate index at now into *view, anchoring it first if no one has and publishing a complete change,
// spending *tries on retries: TB_SHM_OK, or TB_SHM_EFOREIGN if its words are corrupt or fought over.
tb_shm_status tb_shm_view_rate(tb_shm *seg, uint32_t index, tb_ns now, tb_shm_view *view, int *tries);

#endif
