/* A limiter shared by the processes of one host: the rates of limits.h in one segment of shared memory that
 * every process maps (a fixed struct, no pointers), changed by compare-and-swap on 64-bit words only. No
 * locks: a process killed at any instruction leaves the segment usable by the others. Every operation takes
 * now in nanoseconds on CLOCK_MONOTONIC, which the processes share; nothing here reads a clock or maps memory.
 *
 * Publication. The creator fills a segment and then stores magic (the bytes "aiotbshm"): a joiner that reads
 * 0 there is early (TB_SHM_ENOTREADY), one that reads anything else but magic has a foreign segment. The
 * header never changes once published; a joiner checks all of it (tb_shm_check), as the segment is untrusted
 * input, and every word read later is checked before use: one that cannot be right gives TB_SHM_EFOREIGN, and
 * none, whatever it holds, makes the code crash or overflow.
 *
 * A rate's state is one word: F (the instant it is full again, in ticks as in limits.h) modulo 2^62, and the
 * generation of its parameters modulo 3; before the rate's first use, a sentinel that counts the generations
 * in full. F is read back relative to now: up to TB_SHM_HORIZON (2^60 ticks) ahead or 2^61 behind; further
 * behind reads as full, so a rate left idle for more than ~6.8 years may read as owing up to TB_SHM_HORIZON:
 * stricter, never looser. The first use anchors each rate (it holds its initial tokens then) by
 * compare-and-swap from the sentinel, so racing first users agree.
 *
 * Reservations (Go's x/time/rate reserveN, governor): the grant instant is the latest over the rates of the
 * first instant each fits, and not before the pause; each rate is then taken as of that instant, rate by
 * rate, each by one compare-and-swap; should a later rate have changed so that the grant no longer fits it
 * then, the earlier ones are given back (by the cancel rule) and it starts again. A pause set after a
 * reservation does not move it. A limit of a server's quota (at most so many tokens before an instant, as
 * limits.h's limit_until) is one more word, taken from first, before the rates, and never given back (as in
 * process: a cancelled grant does not come back to it); a reservation that fails after taking it gives it back
 * by the cancel rule.
 *
 * Cancel gives a rate back only when its word is still exactly what this reservation left there (nobody
 * reserved after it, or all who did cancelled first): the word before it is then restored. Otherwise nothing
 * comes back: what is lost is the whole need of a cancel that is not the latest on its rate, or that comes at
 * or after its grant instant, or after a change of the rate. Go's rule (give back the need less what was
 * reserved after) is not used: with cancels out of order it exceeds the bound (tests/c/test_shm.c has the
 * case), while an exact restore keeps it. A killed process loses at most what it had in flight.
 *
 * set_rate publishes new parameters together with F converted to them, in one compare-and-swap of the state
 * word, so no reader pairs a word with other parameters: F must be published with the generation, as no unit
 * of F stays valid across a change of refill. The conversion keeps the tokens held at now, at most the new
 * burst, below 0 for tokens reserved ahead, and moves F by one tick more (a full rate a tick further into the
 * past, just as full; a rate in debt owing a tick more), so that changes of bursts alone, which shift F back
 * and forth by as much, never bring a state word back to a value it had. The parameters are too wide for the
 * word: each generation has a record of four words in one of three slots, each word tagged with its writer's
 * ticket, and a change word per rate orders the writers. A writer claims the next generation with a ticket
 * (WRITING), writes its record (each word only over words of older tickets), marks it COMPLETE, and publishes;
 * anyone finding a COMPLETE change publishes it, so a writer killed after that loses nothing. The next writer
 * overtakes a WRITING one, whose late writes then fail the ticket order and which returns TB_SHM_EAGAIN: a
 * writer killed mid-record blocks no one. A live record is not written again until three changes later.
 * set_rate is obstruction-free (two of one rate at once may make one return TB_SHM_EAGAIN; one to the live
 * parameters publishes nothing) and never blocks a reservation.
 *
 * Ranges and wraps: |now| < TB_MAX_SPAN (2^58 ns), a full refill (burst * ns_per_token) up to TB_SHM_MAX_SPAN,
 * no grant TB_SHM_HORIZON or more ahead (TB_SHM_ETOOLATE). Generations count modulo 3 in an anchored word and
 * tickets modulo 2^32. A process that read a state word and stalled across three changes of that rate, by
 * the end of which the word had come back to the very same value, would apply its reservation, cancel or
 * conversion to the wrong generation: the changes that would do that naturally cannot (the same parameters
 * publish nothing; bursts alone, and a full rate's changes at one instant, move F a tick each), which leaves
 * an exact coincidence of arithmetic, or several changes with debt within one nanosecond. A writer stalled
 * across 2^31 tickets would write over a newer record.
 *
 * Hostile writers. Any process that can map the segment can write any word of it at any time. Every field is
 * read once into a local and checked before use (the header's nrates bounds every loop over the rates), and
 * every loop that retries after a word changed under it retries at most TB_SHM_TRIES times in one operation:
 * past that, the segment counts as corrupt (TB_SHM_EFOREIGN) rather than let a writer spin a reader forever.
 * Honest processes fail a compare-and-swap only when another one succeeded in between, far fewer times. */
#ifndef AIOTB_SHM_H
#define AIOTB_SHM_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "limits.h"

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2 && ATOMIC_LONG_LOCK_FREE == 2, "64-bit atomics must be lock-free");

#define TB_SHM_MAGIC UINT64_C(0x6d687362746f6961)  /* the bytes "aiotbshm" in a little-endian word */
#define TB_SHM_VERSION 2u
#define TB_SHM_MAX_SPAN ((tb_ns)1 << 55)     /* longest full refill of a rate in a segment: ~1.14 years */
#define TB_SHM_HORIZON ((tb_ns)1 << 56)      /* how far ahead of now a reservation may reach: ~2.28 years */
#define TB_SHM_TRIES 10000                   /* retries of one operation after words changed under it */

typedef enum {
    TB_SHM_OK = TB_OK,
    TB_SHM_EINVAL = TB_EINVAL,        /* a parameter is out of range */
    TB_SHM_ETOOLATE = TB_ETOOLATE,    /* the grant could not come by the deadline: nothing was taken */
    TB_SHM_ENOTREADY,                 /* the creator has not published the segment yet: ask again later */
    TB_SHM_EMISMATCH,                 /* a good segment, created with other parameters (tb_shm.created) */
    TB_SHM_EFOREIGN,                  /* not a segment of this layout, a corrupt one, or one fought over */
    TB_SHM_EAGAIN,                    /* set_rate overtaken by another set_rate of the same rate: nothing changed */
    TB_SHM_ESTALE,                    /* change_rate from parameters that are no longer the live ones: nothing changed */
} tb_shm_status;

/* One rate as given to create and join. */
typedef struct {
    double ns_per_token;  /* time to refill one token */
    double burst;         /* capacity, in tokens */
    double initial;       /* tokens at the first use */
} tb_shm_params;

/* One rate in the segment. */
typedef struct {
    _Atomic uint64_t state;         /* F mod 2^62 << 2 | generation mod 3; before the first use, generation << 2 | 3 */
    _Atomic uint64_t change;        /* the latest set_rate: ticket << 32 | target generation << 2 | phase */
    _Atomic uint64_t record[3][4];  /* parameters by generation mod 3: the halves of ns_per_token and burst,
                                     * each under its writer's ticket in the high 32 bits */
} tb_shm_rate;

/* The segment. */
typedef struct {
    _Atomic uint64_t magic;          /* TB_SHM_MAGIC once the creator has filled the rest; 0 until then */
    uint32_t version;                /* TB_SHM_VERSION */
    uint32_t size;                   /* sizeof(tb_shm) */
    uint32_t nrates;                 /* 1..TB_MAX_RATES */
    uint32_t ticks_per_ns;           /* TB_TICKS_PER_NS: the unit of F */
    tb_shm_params created[TB_MAX_RATES];  /* as created: every joiner must agree */
    _Atomic int64_t paused_until;    /* no grant before this instant (INT64_MIN: none) */
    _Atomic uint64_t limit;          /* a server's quota: tokens left until an instant (shm_limit.h; 0: none) */
    tb_shm_rate rates[TB_MAX_RATES];
} tb_shm;

/* What a reservation took, for its cancel. */
typedef struct {
    tb_ns at;                        /* the grant instant */
    uint32_t nrates;                 /* rates taken from (0: none) */
    uint64_t before[TB_MAX_RATES];   /* each rate's state word before it */
    uint64_t after[TB_MAX_RATES];    /* and after it */
} tb_shm_reservation;

/* Fills a segment of len bytes that its creator has just made (and no one has seen published), then publishes
 * it: TB_SHM_OK, TB_SHM_EINVAL for parameters out of range or len too short, TB_SHM_EFOREIGN if it was
 * published already. */
tb_shm_status tb_shm_create(tb_shm *seg, size_t len, uint32_t nrates, const tb_shm_params *params);
/* Whether a segment of len bytes is published and intact: TB_SHM_OK, TB_SHM_ENOTREADY or TB_SHM_EFOREIGN. */
tb_shm_status tb_shm_validate(const tb_shm *seg, size_t len);
/* tb_shm_validate, then TB_SHM_EMISMATCH unless it was created with these parameters (nrates of them). */
tb_shm_status tb_shm_join(const tb_shm *seg, size_t len, uint32_t nrates, const tb_shm_params *params);
/* 0 if every invariant of a published segment holds, else the number of the broken one: 1 the header, 2 a
 * state word's generation against its change word, 3 a change word, 4 a live record (exact when quiet;
 * read again while changes race it). */
int tb_shm_check(const tb_shm *seg);

/* Reserves amount (> 0, at most every burst) at its first grant instant, written to r with what a cancel
 * needs: TB_SHM_OK, TB_SHM_ETOOLATE (nothing taken) if that is after deadline (TB_NEVER: none) or
 * TB_SHM_HORIZON ahead, TB_SHM_EINVAL, or TB_SHM_EFOREIGN for a corrupt segment. */
tb_shm_status tb_shm_reserve(tb_shm *seg, double amount, tb_ns now, tb_ns deadline, tb_shm_reservation *r);
/* Takes amount if it can be granted at now: TB_SHM_OK, TB_SHM_ETOOLATE (nothing taken), or as reserve. */
tb_shm_status tb_shm_take_now(tb_shm *seg, double amount, tb_ns now);
/* Cancels a reservation at now, giving back each rate no later reservation has built on (none once now is
 * at or past its instant); returns how many rates it gave back. */
uint32_t tb_shm_cancel(tb_shm *seg, const tb_shm_reservation *r, tb_ns now);
/* Settles a grant of taken (> 0, at most every burst) whose real cost was used (>= 0): each rate gets the
 * difference back (never fuller than full) or takes it now as debt (which a running limit loses too). TB_SHM_OK, TB_SHM_EINVAL (nothing changed:
 * bad amounts, or a debt past TB_SHM_HORIZON), or TB_SHM_EFOREIGN (corrupt, or fought over: the rates before the
 * one fought over are settled). */
tb_shm_status tb_shm_settle(tb_shm *seg, double taken, double used, tb_ns now);
/* Writes the tokens available at now (the fewest over the rates and a limit, 0 while paused): TB_SHM_OK, EINVAL,
 * EFOREIGN. */
tb_shm_status tb_shm_tokens(tb_shm *seg, tb_ns now, double *tokens);
/* Writes the first instant >= now at which amount would be granted, taking nothing (TB_NEVER for amount over
 * a burst): TB_SHM_OK, EINVAL, EFOREIGN. */
tb_shm_status tb_shm_fit_at(tb_shm *seg, double amount, tb_ns now, tb_ns *at);
/* No grant before until (a later call can only move it later): TB_SHM_OK, or EFOREIGN if fought over. */
tb_shm_status tb_shm_pause_until(tb_shm *seg, tb_ns until);
/* At most tokens (>= 0) more granted before until, for every process, as limits.h's tb_limits_limit_until with
 * slack (0 to TB_SHM_HORIZON): TB_SHM_OK (nothing to do for until <= now), TB_SHM_EINVAL (until more than
 * TB_SHM_HORIZON ahead, or out of range), or EFOREIGN if fought over. */
tb_shm_status tb_shm_limit_until(tb_shm *seg, double tokens, tb_ns until, tb_ns slack, tb_ns now);
/* Changes rate index to a new refill and capacity as of now for every process, keeping the tokens it holds (at
 * most the new burst, less a tick): TB_SHM_OK (also when those are the live ones: nothing to change),
 * TB_SHM_EINVAL, TB_SHM_EAGAIN (overtaken: nothing changed; try again), or TB_SHM_EFOREIGN. */
tb_shm_status tb_shm_set_rate(tb_shm *seg, uint32_t index, double ns_per_token, double burst, tb_ns now);
/* set_rate only while rate index's live refill and capacity are from's (its initial unread): as set_rate, or
 * TB_SHM_ESTALE (nothing changed) once they are not, checked where the change is claimed: a read, modify and
 * write of the rate that no other change can come between. */
tb_shm_status tb_shm_change_rate(tb_shm *seg, uint32_t index, const tb_shm_params *from, double ns_per_token,
                                 double burst, tb_ns now);
/* Writes rate index's live refill and capacity (initial: as created): TB_SHM_OK, EINVAL, EFOREIGN. */
tb_shm_status tb_shm_rate_params(const tb_shm *seg, uint32_t index, tb_shm_params *params);

#endif
