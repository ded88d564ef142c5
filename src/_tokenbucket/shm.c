/* The segment of a shared limiter: its header, the words and records of its rates, reading a rate, and
 * set_rate's protocol; see shm.h. Grants are in shm_grant.c. */
#include "shm_rate.h"

#include <math.h>
#include <string.h>

#define PUBLISHED 0u  /* phases of a change: its generation is live (or was, and others followed) */
#define WRITING 1u    /* its writer is writing its record; the next writer overtakes it */
#define COMPLETE 2u   /* its record is written: anyone publishes it */
#define STRIKES 3     /* torn reads of a live record, its generation unchanged, before the segment counts as corrupt */

/* ---- words ---- */

// F of a state word, recovered from F mod 2^62 as the value nearest now, from 2^61 ticks behind to DEBT_LIMIT
// ahead; further ahead can only be a rate full for so long that it wrapped: full.
static tb_gcra state_f(uint64_t word, tb_ns now)
{
    const uint64_t mask = ((uint64_t)1 << 62) - 1;
    int64_t here = tb_at_tick(now);
    uint64_t ahead = ((word >> 2) - (uint64_t)here) & mask;
    int64_t d = ahead < ((uint64_t)1 << 61) ? (int64_t)ahead : (int64_t)ahead - ((int64_t)1 << 62);
    return here + (d <= DEBT_LIMIT ? d : -TB_TICKS_PER_NS);
}

// The parts of a change word.
static uint32_t change_ticket(uint64_t change) { return (uint32_t)(change >> 32); }
static unsigned change_target(uint64_t change) { return (unsigned)(change >> 2 & 3); }
static unsigned change_phase(uint64_t change) { return (unsigned)(change & 3); }

// The change word of ticket, target generation and phase.
static uint64_t change_word(uint32_t ticket, unsigned target, unsigned phase)
{
    return (uint64_t)ticket << 32 | target << 2 | phase;
}

// Whether a change word is well formed.
static bool change_ok(uint64_t change)
{
    return change_target(change) < GENERATIONS && change_phase(change) <= COMPLETE && (change >> 4 & 0xfffffff) == 0;
}

// Whether ticket a was handed out before ticket b (modulo 2^32).
static bool earlier(uint32_t a, uint32_t b) { return a - b >= 0x80000000u; }

/* ---- records: four words, the 32-bit halves of ns_per_token and burst, each under its writer's ticket ---- */

// Whether a rate of these parameters fits a segment.
static bool usable(double ns_per_token, double burst)
{
    return tb_rate_ok(ns_per_token, burst, 0) && burst * ns_per_token <= (double)TB_SHM_MAX_SPAN;
}

// Writes into words the record of ns_per_token and burst under ticket.
static void record_words(uint32_t ticket, double ns_per_token, double burst, uint64_t words[4])
{
    uint64_t bits[2];
    memcpy(&bits[0], &ns_per_token, sizeof bits[0]);
    memcpy(&bits[1], &burst, sizeof bits[1]);
    for (int k = 0; k < 4; k++)
        words[k] = (uint64_t)ticket << 32 | (k % 2 ? bits[k / 2] & 0xffffffffu : bits[k / 2] >> 32);
}

/* A record as read. */
typedef struct {
    uint32_t ticket;      /* its writer's */
    double ns_per_token, burst;
} record;

// Reads a record into *rec: true if its words are all of one ticket (one writer's, whole) and usable.
static bool record_read(const _Atomic uint64_t words[4], record *rec)
{
    uint64_t w[4];
    for (int k = 0; k < 4; k++)
        w[k] = shm_load(&words[k]);
    for (int k = 1; k < 4; k++)
        if (w[k] >> 32 != w[0] >> 32)
            return false;
    uint64_t bits[2] = {w[0] << 32 | (w[1] & 0xffffffffu), w[2] << 32 | (w[3] & 0xffffffffu)};
    rec->ticket = (uint32_t)(w[0] >> 32);
    memcpy(&rec->ns_per_token, &bits[0], sizeof bits[0]);
    memcpy(&rec->burst, &bits[1], sizeof bits[1]);
    return usable(rec->ns_per_token, rec->burst);
}

/* ---- reading a rate, and publishing a change ---- */

// F for parameters to holding at now what parameters from hold with F f: the tokens, down to below 0 for
// tokens reserved ahead, at most to's burst; the debt at most DEBT_LIMIT. It is a tick off the exact value,
// a rate in debt owing a tick more and a full one going a tick further into the past (just as full), so that
// changes of bursts alone, which shift F back and forth by the same amounts, and changes of a full rate
// repeated at one instant, never bring a state word back to a value it had.
static tb_gcra converted(const tb_rate *from, const tb_rate *to, tb_gcra f, tb_ns now)
{
    double tokens = tb_rate_balance(from, f, now);
    int64_t debt = tb_ticks((to->burst - (tokens < to->burst ? tokens : to->burst)) * to->ns_per_token);
    tb_gcra full = tb_full_since(now);
    if (debt == 0)
        return (f < full ? f : full) - 1;
    return tb_at_tick(now) + (debt < DEBT_LIMIT ? debt + 1 : DEBT_LIMIT);
}

// Publishes the complete change of rate index: its parameters and F converted to them in one compare-and-swap
// of the state word (unless someone has), then marks it published. TB_SHM_OK, also once the change is found
// overtaken by later ones (nothing left to do), or TB_SHM_EFOREIGN if the words contradict each other or
// *tries runs out.
static tb_shm_status publish(tb_shm *seg, uint32_t index, uint64_t change, tb_ns now, int *tries)
{
    tb_shm_rate *rate = &seg->rates[index];
    unsigned target = change_target(change);
    for (;;) {
        if (!shm_retry(tries))
            return TB_SHM_EFOREIGN;
        uint64_t word = shm_load(&rate->state);
        unsigned live = state_generation(word);
        if (live == target)
            break;
        record from, to;
        bool whole = (live + 1) % GENERATIONS == target && record_read(rate->record[live], &from) &&
                     record_read(rate->record[target], &to) && to.ticket == change_ticket(change);
        /* Still the latest change, so the word was read while it was (its generation is the one before, not one
         * three changes later) and both records are as it left them; else later changes moved on. */
        if (shm_load(&rate->change) != change)
            return TB_SHM_OK;
        if (!whole)
            return TB_SHM_EFOREIGN;
        uint64_t next = word + 4;  /* not anchored yet: the generation counts on */
        if (state_anchored(word)) {
            tb_rate old = tb_rate_make(from.ns_per_token, from.burst, 0);
            tb_rate new = tb_rate_make(to.ns_per_token, to.burst, 0);
            next = state_word(converted(&old, &new, state_f(word, now), now), target);
        }
        if (shm_cas(&rate->state, &word, next))
            break;
    }
    shm_cas(&rate->change, &change, change_word(change_ticket(change), target, PUBLISHED));
    return TB_SHM_OK;
}

// Publishes the latest change of rate index if it is complete: TB_SHM_OK, or EFOREIGN.
static tb_shm_status settle(tb_shm *seg, uint32_t index, tb_ns now, int *tries)
{
    uint64_t change = shm_load(&seg->rates[index].change);
    if (!change_ok(change))
        return TB_SHM_EFOREIGN;
    return change_phase(change) == COMPLETE ? publish(seg, index, change, now, tries) : TB_SHM_OK;
}

// The initial tokens rate index was created with, read once: false if they cannot be right.
static bool created_initial(const tb_shm *seg, uint32_t index, double *initial)
{
    double value = seg->created[index].initial;
    *initial = value;
    return value >= 0 && isfinite(value);
}

tb_shm_status tb_shm_view_rate(tb_shm *seg, uint32_t index, tb_ns now, tb_shm_view *view, int *tries)
{
    tb_shm_rate *rate = &seg->rates[index];
    for (int strikes = 0; strikes < STRIKES && shm_retry(tries);) {
        if (settle(seg, index, now, tries) != TB_SHM_OK)
            return TB_SHM_EFOREIGN;
        uint64_t word = shm_load(&rate->state);
        unsigned generation = state_generation(word);
        record rec;
        if (!record_read(rate->record[generation], &rec)) {  /* torn by changes since the word was read */
            strikes += state_generation(shm_load(&rate->state)) == generation;
            continue;
        }
        view->rate = tb_rate_make(rec.ns_per_token, rec.burst, 0);
        if (!state_anchored(word)) {  /* the first use: whoever swaps first anchors it for all */
            double initial;
            if (!created_initial(seg, index, &initial))
                return TB_SHM_EFOREIGN;
            tb_gcra f = tb_rate_holding(&view->rate, initial, now);
            shm_cas(&rate->state, &word, state_word(f, generation));
            continue;
        }
        view->word = word;
        view->f = state_f(word, now);
        view->generation = generation;
        return TB_SHM_OK;
    }
    return TB_SHM_EFOREIGN;
}

/* ---- set_rate ---- */

// Claims the next generation of rate index for a new ticket, overtaking a writer still writing and publishing
// a complete change first, while the live parameters are from's (NULL: whatever they are); writes the claim into
// *claim. TB_SHM_OK, ESTALE (they are not), or EFOREIGN (also once *tries runs out).
static tb_shm_status claim(tb_shm *seg, uint32_t index, const tb_shm_params *from, tb_ns now, uint64_t *claim,
                           int *tries)
{
    _Atomic uint64_t *change = &seg->rates[index].change;
    while (shm_retry(tries)) {
        uint64_t latest = shm_load(change);
        if (!change_ok(latest))
            return TB_SHM_EFOREIGN;
        if (change_phase(latest) == COMPLETE) {
            if (publish(seg, index, latest, now, tries) != TB_SHM_OK)
                return TB_SHM_EFOREIGN;
            continue;
        }
        unsigned target = change_target(latest);
        if (change_phase(latest) == PUBLISHED)
            target = (target + 1) % GENERATIONS;
        if (from != NULL) {  /* live: the generation before target, whose record stays while latest is the latest */
            record live;
            if (!record_read(seg->rates[index].record[(target + GENERATIONS - 1) % GENERATIONS], &live))
                continue;  /* torn by a change since latest was read, or corrupt: the tries tell */
            if (live.ns_per_token != from->ns_per_token || live.burst != from->burst) {
                if (shm_load(change) == latest)
                    return TB_SHM_ESTALE;
                continue;
            }
        }
        *claim = change_word(change_ticket(latest) + 1, target, WRITING);
        if (shm_cas(change, &latest, *claim))
            return TB_SHM_OK;
    }
    return TB_SHM_EFOREIGN;
}

tb_shm_status tb_shm_set_rate(tb_shm *seg, uint32_t index, double ns_per_token, double burst, tb_ns now)
{
    return tb_shm_change_rate(seg, index, NULL, ns_per_token, burst, now);
}

tb_shm_status tb_shm_change_rate(tb_shm *seg, uint32_t index, const tb_shm_params *from, double ns_per_token,
                                 double burst, tb_ns now)
{
    uint32_t nrates = shm_nrates(seg);
    if (nrates == 0)
        return TB_SHM_EFOREIGN;
    if (index >= nrates || !usable(ns_per_token, burst) || !shm_clock_ok(now))
        return TB_SHM_EINVAL;
    tb_shm_params live;
    if (tb_shm_rate_params(seg, index, &live) != TB_SHM_OK)
        return TB_SHM_EFOREIGN;
    if (from != NULL && (live.ns_per_token != from->ns_per_token || live.burst != from->burst))
        return TB_SHM_ESTALE;
    if (live.ns_per_token == ns_per_token && live.burst == burst)
        return TB_SHM_OK;  /* nothing to change: a change that changes nothing would only bring words back */
    uint64_t mine;
    int tries = TB_SHM_TRIES;
    tb_shm_status claimed = claim(seg, index, from, now, &mine, &tries);
    if (claimed != TB_SHM_OK)
        return claimed;
    uint32_t ticket = change_ticket(mine);
    unsigned target = change_target(mine);
    uint64_t words[4];
    record_words(ticket, ns_per_token, burst, words);
    for (int k = 0; k < 4; k++) {  /* each word over older tickets only: a later writer has overtaken this one */
        _Atomic uint64_t *word = &seg->rates[index].record[target][k];
        uint64_t seen = shm_load(word);
        do {
            if (!earlier((uint32_t)(seen >> 32), ticket))
                return TB_SHM_EAGAIN;
            if (!shm_retry(&tries))
                return TB_SHM_EFOREIGN;
        } while (!shm_cas(word, &seen, words[k]));
    }
    uint64_t complete = change_word(ticket, target, COMPLETE);
    if (!shm_cas(&seg->rates[index].change, &mine, complete))
        return TB_SHM_EAGAIN;  /* overtaken before it was complete */
    return publish(seg, index, complete, now, &tries);
}

/* ---- the segment ---- */

// Whether the header of a segment is one this code wrote: version, size, unit, and parameters; writes the
// number of rates it read (once) into *nrates.
static bool header_ok(const tb_shm *seg, uint32_t *nrates)
{
    *nrates = 0;
    if (shm_load(&seg->magic) != TB_SHM_MAGIC || seg->version != TB_SHM_VERSION || seg->size != sizeof(tb_shm) ||
        seg->ticks_per_ns != TB_TICKS_PER_NS)
        return false;
    *nrates = shm_nrates(seg);
    for (uint32_t i = 0; i < *nrates; i++) {
        tb_shm_params p = seg->created[i];
        if (!usable(p.ns_per_token, p.burst) || !tb_rate_ok(p.ns_per_token, p.burst, p.initial))
            return false;
    }
    return *nrates != 0;
}

// 0 if the words of a rate agree (read change, then state, then records), else 2, 3 or 4 as tb_shm_check.
static int rate_broken(const tb_shm_rate *rate, uint64_t change)
{
    uint64_t word = shm_load(&rate->state);
    unsigned live = state_generation(word), target = change_target(change), phase = change_phase(change);
    record rec;
    if (!change_ok(change))
        return 3;
    if ((phase == PUBLISHED && target != live) || (phase == WRITING && target != (live + 1) % GENERATIONS) ||
        (phase == COMPLETE && target != live && target != (live + 1) % GENERATIONS))
        return 2;
    if (phase == COMPLETE && (!record_read(rate->record[target], &rec) || rec.ticket != change_ticket(change)))
        return 3;
    if (!record_read(rate->record[live], &rec) || (phase == PUBLISHED && rec.ticket != change_ticket(change)))
        return 4;
    return 0;
}

int tb_shm_check(const tb_shm *seg)
{
    uint32_t nrates;
    if (!header_ok(seg, &nrates))
        return 1;
    int tries = TB_SHM_TRIES;
    for (uint32_t i = 0; i < nrates; i++) {
        const tb_shm_rate *rate = &seg->rates[i];
        for (;;) {  /* a broken rate counts only if no change moved on while it was read (TB_SHM_TRIES times) */
            uint64_t change = shm_load(&rate->change);
            int broken = rate_broken(rate, change);
            if (broken == 0)
                break;
            if (shm_load(&rate->change) == change || !shm_retry(&tries))
                return broken;
        }
    }
    return 0;
}

tb_shm_status tb_shm_validate(const tb_shm *seg, size_t len)
{
    if (len < sizeof(tb_shm))
        return TB_SHM_EFOREIGN;
    uint64_t magic = shm_load(&seg->magic);
    if (magic == 0)
        return TB_SHM_ENOTREADY;
    return magic == TB_SHM_MAGIC && tb_shm_check(seg) == 0 ? TB_SHM_OK : TB_SHM_EFOREIGN;
}

tb_shm_status tb_shm_join(const tb_shm *seg, size_t len, uint32_t nrates, const tb_shm_params *params)
{
    tb_shm_status status = tb_shm_validate(seg, len);
    if (status != TB_SHM_OK)
        return status;
    if (nrates == 0 || nrates != shm_nrates(seg))
        return TB_SHM_EMISMATCH;
    for (uint32_t i = 0; i < nrates; i++) {
        tb_shm_params p = seg->created[i];
        if (p.ns_per_token != params[i].ns_per_token || p.burst != params[i].burst || p.initial != params[i].initial)
            return TB_SHM_EMISMATCH;
    }
    return TB_SHM_OK;
}

tb_shm_status tb_shm_create(tb_shm *seg, size_t len, uint32_t nrates, const tb_shm_params *params)
{
    if (len < sizeof(tb_shm) || nrates == 0 || nrates > TB_MAX_RATES)
        return TB_SHM_EINVAL;
    for (uint32_t i = 0; i < nrates; i++)
        if (!usable(params[i].ns_per_token, params[i].burst) ||
            !tb_rate_ok(params[i].ns_per_token, params[i].burst, params[i].initial))
            return TB_SHM_EINVAL;
    if (shm_load(&seg->magic) != 0)
        return TB_SHM_EFOREIGN;
    seg->version = TB_SHM_VERSION;
    seg->size = sizeof(tb_shm);
    seg->nrates = nrates;
    seg->ticks_per_ns = TB_TICKS_PER_NS;
    atomic_store(&seg->paused_until, INT64_MIN);
    atomic_store(&seg->limit, 0);
    for (uint32_t i = 0; i < TB_MAX_RATES; i++) {
        tb_shm_rate *rate = &seg->rates[i];
        seg->created[i] = i < nrates ? params[i] : (tb_shm_params){0};
        uint64_t words[4] = {0};
        if (i < nrates)
            record_words(0, params[i].ns_per_token, params[i].burst, words);
        atomic_store(&rate->state, (uint64_t)0 << 2 | UNANCHORED);
        atomic_store(&rate->change, change_word(0, 0, PUBLISHED));
        for (unsigned g = 0; g < GENERATIONS; g++)
            for (int k = 0; k < 4; k++)
                atomic_store(&rate->record[g][k], g == 0 ? words[k] : 0);
    }
    atomic_store(&seg->magic, TB_SHM_MAGIC);  /* publishes the rest */
    return TB_SHM_OK;
}

tb_shm_status tb_shm_rate_params(const tb_shm *seg, uint32_t index, tb_shm_params *params)
{
    uint32_t nrates = shm_nrates(seg);
    if (nrates == 0)
        return TB_SHM_EFOREIGN;
    if (index >= nrates)
        return TB_SHM_EINVAL;
    const tb_shm_rate *rate = &seg->rates[index];
    double initial;
    if (!created_initial(seg, index, &initial))
        return TB_SHM_EFOREIGN;
    int tries = TB_SHM_TRIES;
    for (int strikes = 0; strikes < STRIKES && shm_retry(&tries);) {
        uint64_t word = shm_load(&rate->state);
        record rec;
        if (record_read(rate->record[state_generation(word)], &rec)) {
            *params = (tb_shm_params){rec.ns_per_token, rec.burst, initial};
            return TB_SHM_OK;
        }
        strikes += state_generation(shm_load(&rate->state)) == state_generation(word);
    }
    return TB_SHM_EFOREIGN;
}
