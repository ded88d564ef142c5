/* A model check of the shared store's compare-and-swap protocol: the real code of src/_tokenbucket/shm.c and
 * shm_grant.c, built here with TB_SHM_STEP so that every access to the segment is a step, run by three
 * simulated processes that a deterministic scheduler interleaves step by step; one of them may crash (stop
 * forever) before any of its steps. Every schedule within two preemptions and one crash is tried, then random
 * ones. After each run: each rate's bound over the grants; with one rate, what was lost (at most what the
 * crashed process had in flight, the cancels, and a tick a change); the segment's invariants; and that it
 * serves a reservation and a set_rate alone. A process that takes too many steps is stuck: a failure.
 *
 *     cc -std=c11 -O2 -Isrc/_tokenbucket -Itests/c tests/c/test_shm_model.c src/_tokenbucket/limits.c src/_tokenbucket/window.c -lm
 *
 * A process is a coroutine (ucontext) that runs up to its next step and hands back; a crashed one is never
 * resumed. Runs replay exactly. */
#define _XOPEN_SOURCE 700  /* ucontext under -std=c11 */

#include <ucontext.h>

#define TB_SHM_STEP model_step
#include "shm.c"
#include "shm_grant.c"

#include "harness.h"
#include "shm_bound.h"

#define PROCS 3
#define STACK (256 * 1024)
#define OPS 4              /* operations a process's script does */
#define MAX_STEPS 400      /* more steps than this in one run: stuck */
#define MAX_POINTS (PROCS * (MAX_STEPS + 2))
#ifndef PREEMPTIONS          /* tests/test_c_core.py: 1 in the suite's runs, 2 in the long profile */
#define PREEMPTIONS 2      /* switches away from a process that could go on, per exhaustive run */
#endif
#define NOW (5 * MS)       /* every operation's clock: what a rate owes is then a plain sum */

/* What a simulated process did; a crashed one's operation in flight is at index done. */
typedef struct {
    int done;                       /* operations finished */
    int kind[OPS];                  /* 'r' reserve, 'c' cancel, 's' set_rate, 'm' change_rate, 't' tokens */
    double amount[OPS];             /* reserved, or 0 */
    tb_ns deadline[OPS];            /* of a reservation */
    bool cancelled[OPS];            /* a reservation cancelled (or being cancelled): no grant */
    tb_shm_status status[OPS];
    tb_shm_reservation r[OPS];
} outcome;

/* A simulated process. */
typedef struct {
    ucontext_t context;             /* where it stopped */
    bool finished, crashed;
    int steps;
    outcome out;
    char stack[STACK];
} process;

/* A scenario: the segment, each process's script, who may crash. */
typedef struct {
    const char *name;
    uint32_t nrates;
    tb_shm_params params[2];
    void (*script[PROCS])(outcome *);
    unsigned crashable;             /* bit p: process p may crash */
    uint32_t changed_rate;          /* the rate its set_rates change */
    tb_shm_params changes[3];       /* what they write */
    bool other_bursts;              /* bursts only: that rate keeps the largest burst's bound, no sum of losses */
    bool other_refills;             /* refills too: nothing to check of that rate's bound or losses */
    bool lone;                      /* one process reserves: nothing it takes is lost but by a crash or a cancel */
    double limit_tokens;            /* a limit of a server's quota set before the run: so many tokens ... */
    tb_ns limit_span;               /* ... until this long after NOW (0: no limit) */
} scenario;

/* A scheduling decision, as made in a run. */
typedef struct {
    unsigned runnable, tried;       /* processes that could go; alternatives tried at this point */
    int proc, last;
    bool crash;
} point;

static tb_shm segment;
static process procs[PROCS];
static const scenario *current;
static ucontext_t scheduler;        /* where a process hands control back */
static int self = -1;               /* the process running (-1: the checker, unscheduled) */
static long solo_steps;

void model_step(void)
{
    if (self < 0) {
        CHECK(++solo_steps < 100000);  /* alone, every operation ends */
        return;
    }
    procs[self].steps++;
    CHECK(swapcontext(&procs[self].context, &scheduler) == 0);
}

/* ---- scripts ---- */

// Reserves amount (deadline: NOW + slack, or none for slack < 0), recording it.
static void reserve(outcome *o, double amount, tb_ns slack)
{
    int k = o->done;
    o->kind[k] = 'r';
    o->amount[k] = amount;
    o->deadline[k] = slack < 0 ? TB_NEVER : NOW + slack;
    o->status[k] = tb_shm_reserve(&segment, amount, NOW, o->deadline[k], &o->r[k]);
    o->done++;
}

// Cancels the reservation of operation target.
static void cancel(outcome *o, int target)
{
    int k = o->done;
    o->kind[k] = 'c';
    o->cancelled[target] = true;
    o->status[k] = tb_shm_cancel(&segment, &o->r[target], NOW) ? TB_SHM_OK : TB_SHM_ETOOLATE;
    o->done++;
}

// Sets the scenario's changed rate to its change which.
static void set_rate(outcome *o, int which)
{
    int k = o->done;
    o->kind[k] = 's';
    o->amount[k] = which;
    const tb_shm_params *p = &current->changes[which];
    o->status[k] = tb_shm_set_rate(&segment, current->changed_rate, p->ns_per_token, p->burst, NOW);
    o->done++;
}

// Changes the scenario's changed rate to its change which, only from the parameters it was created with.
static void change_rate(outcome *o, int which)
{
    int k = o->done;
    o->kind[k] = 'm';
    o->amount[k] = which;
    const tb_shm_params *p = &current->changes[which];
    o->status[k] = tb_shm_change_rate(&segment, current->changed_rate, &current->params[current->changed_rate],
                                      p->ns_per_token, p->burst, NOW);
    o->done++;
}

static void reserve_then_cancel(outcome *o) { reserve(o, 2, -1), cancel(o, 0); }
static void reserve_twice(outcome *o) { reserve(o, 1, -1), reserve(o, 2, 3000); }
static void reserve_one(outcome *o) { reserve(o, 2, -1); }
static void reserve_by_a_deadline(outcome *o) { reserve(o, 1.5, 1500); }
static void cancel_one(outcome *o) { reserve(o, 1, -1), cancel(o, 0); }
static void change_to_first(outcome *o) { set_rate(o, 0); }
static void change_to_second(outcome *o) { set_rate(o, 1); }
static void reserve_around_a_change(outcome *o) { reserve(o, 1, -1), reserve(o, 1, -1); }
static void reserve_all_then_cancel(outcome *o) { reserve(o, 3, -1), cancel(o, 0); }
static void reserve_twice_cancel_first(outcome *o) { reserve(o, 3, -1), reserve(o, 1, -1), cancel(o, 0); }
static void reserve_all(outcome *o) { reserve(o, 3, -1); }
static void change_twice(outcome *o) { set_rate(o, 1), set_rate(o, 2); }
static void change_from_created_to_first(outcome *o) { change_rate(o, 0); }
static void change_from_created_to_second(outcome *o) { change_rate(o, 1); }
static void reserve_one_by_one(outcome *o) { reserve(o, 1, -1), reserve(o, 1, -1); }
static void look(outcome *o) { o->kind[o->done] = 't', o->status[o->done++] = tb_shm_tokens(&segment, NOW, &(double){0}); }

static const scenario SCENARIOS[] = {
    {.name = "first uses race, one crashes", .nrates = 1, .params = {{1000.0 / 3, 3, 1}},
     .script = {reserve_then_cancel, reserve_twice, reserve_one}, .crashable = 4},
    {.name = "two rates, refusals and cancels", .nrates = 2, .params = {{1000.0 / 3, 3, 3}, {700, 2, 0}},
     .script = {reserve_by_a_deadline, reserve_one, cancel_one}, .crashable = 7},
    {.name = "set_rates of bursts race reservations", .nrates = 1, .params = {{1000.0 / 3, 3, 2}},
     .script = {change_to_first, change_to_second, reserve_around_a_change}, .crashable = 3,
     .changes = {{1000.0 / 3, 4, 0}, {1000.0 / 3, 2, 0}}, .other_bursts = true},
    /* Two changes from the same parameters: at most one is made; the other finds them changed, or is overtaken. */
    {.name = "changes from the created rate race", .nrates = 1, .params = {{1000.0 / 3, 3, 2}},
     .script = {change_from_created_to_first, change_from_created_to_second, reserve_around_a_change},
     .crashable = 3, .changes = {{1000.0 / 3, 4, 0}, {1000.0 / 3, 2, 0}}, .other_bursts = true},
    {.name = "set_rates of refills race", .nrates = 1, .params = {{1000.0 / 3, 3, 2}},
     .script = {change_to_first, change_to_second, reserve_around_a_change}, .crashable = 3,
     .changes = {{500, 4, 0}, {250, 2, 0}}, .other_refills = true},
    /* A server's limit of 2 tokens for ~243 us (rounded up to 2^20 ns units): the grants before its end take at
     * most 2 in all, cancelled ones included (a cancel gives the rates back, not the limit). */
    {.name = "a limit shared by racing reservations", .nrates = 1, .params = {{1000.0 / 3, 3, 3}},
     .script = {reserve_then_cancel, reserve_twice, reserve_one}, .crashable = 7, .limit_tokens = 2,
     .limit_span = 2000},
    {.name = "a limit over two rates", .nrates = 2, .params = {{1000.0 / 3, 3, 3}, {700, 2, 2}},
     .script = {reserve_by_a_deadline, reserve_one, cancel_one}, .crashable = 7, .limit_tokens = 1.5,
     .limit_span = 2000},
    /* Bursts 3, 2, 4, 3: a rate owing more than its bursts shifts back to the very F it had, but for a tick a
     * change; a helper of the first change that stalls until the third is published must not publish it again. */
    {.name = "a helper stalled across three changes", .nrates = 1, .params = {{250, 3, 2}},  /* exact in binary */
     .script = {reserve_one_by_one, change_to_first, change_twice}, .crashable = 6,
     .changes = {{250, 2, 0}, {250, 4, 0}, {250, 3, 0}}, .other_bursts = true},
    {.name = "cancels out of order", .nrates = 1, .params = {{1000.0 / 3, 3, 0}},  /* test_shm.c's case against Go's rule */
     .script = {reserve_all_then_cancel, reserve_twice_cancel_first, reserve_all}, .crashable = 7},
    {.name = "a change slows a rate under a reservation of two", .nrates = 2, .params = {{1000.0 / 3, 3, 3}, {700, 2, 0}},
     .script = {reserve_by_a_deadline, change_to_first, look}, .crashable = 3, .changed_rate = 1,
     .changes = {{7000, 2, 0}}, .other_refills = true, .lone = true},
};

/* ---- runs ---- */

static void live(void)
{
    current->script[self](&procs[self].out);
    procs[self].finished = true;
}

// Makes a process ready to start its script on its first turn.
static void ready(process *p)
{
    p->finished = p->crashed = false;
    p->steps = 0;
    memset(&p->out, 0, sizeof p->out);
    CHECK(getcontext(&p->context) == 0);
    p->context.uc_stack = (stack_t){.ss_sp = p->stack, .ss_size = STACK};
    p->context.uc_link = &scheduler;
    makecontext(&p->context, live, 0);
}

// The decision at a point beyond the plan: the process that ran last if it can go on, else the first that can.
static int default_choice(unsigned runnable, int last)
{
    if (runnable >> last & 1)
        return last;
    int p = 0;
    while (!(runnable >> p & 1))
        p++;
    return p;
}

// Runs the scenario once, following plan for its first planned points and the default (or, with a
// generator seeded, random choices) after; records every point into trace; returns how many there were.
static int run(const point *plan, int planned, point *trace, bool random)
{
    memset(&segment, 0, sizeof segment);
    CHECK(tb_shm_create(&segment, sizeof segment, current->nrates, current->params) == TB_SHM_OK);
    CHECK(tb_shm_limit_until(&segment, current->limit_tokens, NOW + current->limit_span, 0, NOW) == TB_SHM_OK);
    int points = 0, last = 0;
    bool crashed = false;
    for (int p = 0; p < PROCS; p++)
        ready(&procs[p]);
    for (;;) {
        unsigned runnable = 0;
        for (int p = 0; p < PROCS; p++)
            runnable |= (unsigned)!procs[p].finished << p;
        if (runnable == 0)
            break;
        point pt = {.runnable = runnable, .last = last, .proc = default_choice(runnable, last)};
        if (points < planned) {
            pt = plan[points];
        } else if (random) {
            do
                pt.proc = (int)rng_below(PROCS);
            while (!(runnable >> pt.proc & 1));
            pt.crash = !crashed && (current->crashable >> pt.proc & 1) && rng_below(40) == 0;
        }
        pt.tried |= 1u << (pt.proc * 2 + pt.crash);
        trace[points++] = pt;
        process *p = &procs[pt.proc];
        CHECK(p->steps <= MAX_STEPS);  /* else it is stuck */
        last = pt.proc;
        if (pt.crash) {
            p->crashed = p->finished = crashed = true;
            continue;
        }
        self = pt.proc;
        CHECK(swapcontext(&scheduler, &p->context) == 0);
        self = -1;
    }
    return points;
}

// Checks rate i after a run: its bound over the grants (of burst, the largest it had) and, where the grants sum
// up (one rate, or one process reserving, and only its refill and burst ever), that what it lost is what may be
// lost.
static void rate_kept(uint32_t i, double burst, bool sums)
{
    const tb_shm_params *created = &current->params[i];
    tb_rate rate = tb_rate_make(created->ns_per_token, burst, 0);
    logged_grant grants[PROCS * OPS];
    size_t n = 0;
    int64_t losable = 0;
    for (int p = 0; p < PROCS; p++) {
        const outcome *o = &procs[p].out;
        for (int k = 0; k < o->done; k++) {
            int64_t need = tb_ticks(o->amount[k] * rate.ns_per_token);
            bool cancelled = o->cancelled[k];
            if (o->kind[k] == 's')
                losable += 1;  /* a conversion rounds up by a tick at most */
            else if (o->kind[k] == 'r' && o->status[k] == TB_SHM_OK && !cancelled)
                grants[n++] = (logged_grant){o->r[k].at, need};
            else if (o->kind[k] == 'r' && cancelled)
                losable += need;  /* a cancel out of order */
        }
        if (procs[p].crashed && o->kind[o->done] == 'r') {  /* what it had in flight, taken as of its deadline at worst */
            losable += tb_ticks(o->amount[o->done] * rate.ns_per_token);
            if (current->nrates > 1 && o->deadline[o->done] != TB_NEVER)
                losable += (o->deadline[o->done] - NOW) * TB_TICKS_PER_NS;
        }
        losable += procs[p].crashed && o->kind[o->done] == 's';
    }
    CHECK(bound_excess(grants, n, rate.burst_ticks) <= 0);  /* sorts them by instant */
    uint64_t word = atomic_load(&segment.rates[i].state);
    if (!sums || (current->nrates > 1 && !current->lone))  /* grants reserved out of instant order need not sum up */
        return;
    if (!state_anchored(word)) {  /* no one got as far as its first use */
        CHECK(n == 0);
        return;
    }
    tb_gcra expected = tb_rate_holding(&rate, created->initial, NOW);  /* burst is the created one here */
    for (size_t k = 0; k < n; k++)
        expected = tb_gcra_take(expected, grants[k].need, grants[k].at);
    int64_t lost = state_f(word, NOW) - expected;  /* below 0 by the keep rule's slack at most (shm_bound.h) */
    CHECK(lost >= -GRANT_SLACK * (int64_t)n && lost <= losable);
}

// Checks that the grants before the end of the scenario's limit took at most its tokens in all.
static void limit_kept(void)
{
    tb_ns until = limit_until_of(limit_word(NOW + current->limit_span, current->limit_tokens));
    double taken = 0;
    for (int p = 0; p < PROCS; p++) {
        const outcome *o = &procs[p].out;
        for (int k = 0; k < o->done; k++)
            if (o->kind[k] == 'r' && o->status[k] == TB_SHM_OK && o->r[k].at < until)
                taken += o->amount[k];
    }
    CHECK(taken <= current->limit_tokens);
}

// Checks a run's outcome, then that the segment serves a reservation and a change alone.
static void outcome_kept(void)
{
    CHECK(tb_shm_check(&segment) == 0);
    if (current->limit_span > 0)
        limit_kept();
    bool changed[3] = {false, false, false};
    int made = 0;  /* change_rates that returned OK: all from the created parameters, so at most one */
    for (int p = 0; p < PROCS; p++) {
        const outcome *o = &procs[p].out;
        for (int k = 0; k < o->done; k++) {
            tb_shm_status s = o->status[k];
            bool change = o->kind[k] == 's' || o->kind[k] == 'm';
            CHECK(s == TB_SHM_OK || s == TB_SHM_ETOOLATE || (change && s == TB_SHM_EAGAIN) ||
                  (o->kind[k] == 'm' && s == TB_SHM_ESTALE));
            if (change)
                changed[(int)o->amount[k]] |= s == TB_SHM_OK;
            made += o->kind[k] == 'm' && s == TB_SHM_OK;
        }
        /* a change in flight when its process crashed may be complete: anyone may publish it */
        if (procs[p].crashed && (o->kind[o->done] == 's' || o->kind[o->done] == 'm'))
            changed[(int)o->amount[o->done]] = true;
        CHECK(procs[p].crashed || o->done > 0);
    }
    CHECK(made <= 1);
    tb_shm_params now_live;
    const tb_shm_params *created = &current->params[current->changed_rate];
    CHECK(tb_shm_rate_params(&segment, current->changed_rate, &now_live) == TB_SHM_OK);
    bool known = now_live.ns_per_token == created->ns_per_token && now_live.burst == created->burst;
    for (int c = 0; c < 3; c++)
        known |= changed[c] && now_live.ns_per_token == current->changes[c].ns_per_token &&
                 now_live.burst == current->changes[c].burst;
    CHECK(known);
    for (uint32_t i = 0; i < current->nrates; i++) {
        bool changed = i == current->changed_rate && (current->other_bursts || current->other_refills);
        double burst = current->params[i].burst;
        for (int c = 0; c < 3 && changed; c++)
            burst = fmax(burst, current->changes[c].burst);
        if (!changed || !current->other_refills)
            rate_kept(i, burst, !changed);
    }
    solo_steps = 0;
    tb_shm_reservation r;
    CHECK(tb_shm_reserve(&segment, 1, NOW, TB_NEVER, &r) == TB_SHM_OK);
    CHECK(tb_shm_set_rate(&segment, 0, 1e6, 5, NOW) == TB_SHM_OK && tb_shm_check(&segment) == 0);
}

// Tries every schedule within PREEMPTIONS preemptions and one crash; returns how many runs it took.
static long exhaustive(void)
{
    static point plan[MAX_POINTS], trace[MAX_POINTS];
    int planned = 0;
    long runs = 0;
    for (;;) {
        int points = run(plan, planned, trace, false);
        runs++;
        outcome_kept();
        int i = points - 1;
        for (; i >= 0; i--) {  /* the deepest point with an alternative left within the bounds */
            int preempted = 0, crashes = 0;
            for (int j = 0; j < i; j++) {
                preempted += trace[j].proc != trace[j].last && (trace[j].runnable >> trace[j].last & 1);
                crashes += trace[j].crash;
            }
            point *pt = &trace[i];
            int alt = 0;
            for (; alt < 2 * PROCS; alt++) {
                int p = alt / 2;
                bool crash = alt % 2, switches = p != pt->last && (pt->runnable >> pt->last & 1);
                if (!(pt->tried >> alt & 1) && (pt->runnable >> p & 1) && preempted + switches <= PREEMPTIONS &&
                    (!crash || (crashes == 0 && (current->crashable >> p & 1))))
                    break;
            }
            if (alt < 2 * PROCS) {
                memcpy(plan, trace, (size_t)i * sizeof *plan);
                plan[i] = *pt;
                plan[i].proc = alt / 2;
                plan[i].crash = alt % 2;
                planned = i + 1;
                break;
            }
        }
        if (i < 0)
            return runs;
    }
}

static void test_protocol(void)
{
    for (size_t s = 0; s < sizeof SCENARIOS / sizeof SCENARIOS[0]; s++) {
        current = &SCENARIOS[s];
        long runs = exhaustive();
        static point trace[MAX_POINTS];
        rng_seed(s + 1);
        for (int seed = 0; seed < 2000; seed++) {
            run(NULL, 0, trace, true);
            outcome_kept();
        }
        printf("%s: %ld schedules within %d preemptions and a crash, and 2000 random ones\n", current->name,
               runs, PREEMPTIONS);
    }
}

int main(void)
{
    RUN(test_protocol);
    return tests_summary();
}
