/* The bucket's operations (queue.h), each followed by tb_check: a broken invariant fails the
 * current test at the caller's line. Shared by test_queue.c and test_grant.c. */
#ifndef AIOTB_TESTS_CHECKED_BUCKET_H
#define AIOTB_TESTS_CHECKED_BUCKET_H

#include "queue.h"

#include "harness.h"

// Fails the current test if an invariant of b is broken.
static inline void holds(const char *file, int line, const tb_bucket *b)
{
    int broken = tb_check(b);
    if (broken) {
        char what[64];
        snprintf(what, sizeof what, "tb_check() returned %d", broken);
        fail_at(file, line, what);
    }
}

#define HOLDS(b) holds(__FILE__, __LINE__, (b))

/* Each wrapper performs one core operation, then checks every invariant. */

static inline tb_status init_at(const char *f, int l, tb_bucket *b, double ns_per_token, double burst,
                         double initial, bool fair, tb_order order)
{
    tb_status status = tb_init(b, ns_per_token, burst, initial, fair, order);
    if (status == TB_OK)
        holds(f, l, b);
    return status;
}
static inline double tokens_at(const char *f, int l, tb_bucket *b, tb_ns now)
{
    double tokens = tb_tokens(b, now);
    holds(f, l, b);
    return tokens;
}
static inline bool can_take_at(const char *f, int l, tb_bucket *b, double amount, tb_ns now)
{
    bool can = tb_can_take(b, amount, now);
    holds(f, l, b);
    return can;
}
static inline bool take_at(const char *f, int l, tb_bucket *b, double amount, tb_ns now)
{
    bool granted = tb_take(b, amount, now);
    holds(f, l, b);
    return granted;
}
static inline tb_status enqueue_at(const char *f, int l, const void *owner, tb_bucket *b, double amount,
                                   tb_ns now, tb_ns deadline, void *handle, tb_id *id)
{
    tb_status status = tb_enqueue(b, amount, now, deadline, handle, owner, id);
    holds(f, l, b);
    return status;
}
static inline void *withdraw_at(const char *f, int l, tb_bucket *b, tb_id id)
{
    void *handle = tb_withdraw(b, id);
    holds(f, l, b);
    return handle;
}
/* A scripted tb_decide: answers verdict about the first waiter it is asked about and TB_STOP
 * about any later one, remembering the first. */
typedef struct {
    tb_verdict verdict;
    int asked;
    void *handle;  /* the first waiter asked about */
} one_verdict;

static inline tb_verdict decide_once(void *ctx, void *handle, double amount)
{
    (void)amount;
    one_verdict *v = ctx;
    if (v->asked++)
        return TB_STOP;
    v->handle = handle;
    return v->verdict;
}

// The head's handle if it can be granted at now, else NULL: a tb_grant_due pass that stops at once.
static inline void *ready_head_at(const char *f, int l, tb_bucket *b, tb_ns now)
{
    one_verdict v = {TB_STOP, 0, NULL};
    tb_ns at = tb_grant_due(b, now, decide_once, &v);
    holds(f, l, b);
    if ((v.handle != NULL) != (at == now))
        fail_at(f, l, "tb_grant_due asked about a head that is not due, or not about one that is");
    return v.handle;
}
// Grants (or with !grant skips) the head, if it can be granted at now; returns its handle, else NULL.
static inline void *pop_head_at(const char *f, int l, tb_bucket *b, tb_ns now, bool grant)
{
    one_verdict v = {grant ? TB_GRANT : TB_SKIP, 0, NULL};
    tb_grant_due(b, now, decide_once, &v);
    holds(f, l, b);
    return v.handle;
}
// The first instant >= now at which the head can be granted, TB_NEVER if none waits.
static inline tb_ns head_ready_at_at(const char *f, int l, tb_bucket *b, tb_ns now)
{
    one_verdict v = {TB_STOP, 0, NULL};
    tb_ns at = tb_grant_due(b, now, decide_once, &v);
    holds(f, l, b);
    return at;
}
static inline tb_ns projected_at(const char *f, int l, tb_bucket *b, double amount, tb_ns now)
{
    tb_ns at = tb_projected_grant(b, amount, now);
    holds(f, l, b);
    return at;
}
static inline void refund_at(const char *f, int l, tb_bucket *b, double amount, tb_ns now)
{
    tb_refund(b, amount, now);
    holds(f, l, b);
}
static inline void rebase_at(const char *f, int l, tb_bucket *b, tb_ns then, tb_ns now)
{
    tb_rebase(b, then, now);
    holds(f, l, b);
}

#define INIT(...) init_at(__FILE__, __LINE__, __VA_ARGS__)
#define TOKENS(...) tokens_at(__FILE__, __LINE__, __VA_ARGS__)
#define CAN_TAKE(...) can_take_at(__FILE__, __LINE__, __VA_ARGS__)
#define TAKE(...) take_at(__FILE__, __LINE__, __VA_ARGS__)
#define ENQUEUE(...) enqueue_at(__FILE__, __LINE__, NULL, __VA_ARGS__)
#define ENQUEUE_OF(owner, ...) enqueue_at(__FILE__, __LINE__, (owner), __VA_ARGS__)
#define WITHDRAW(...) withdraw_at(__FILE__, __LINE__, __VA_ARGS__)
#define READY_HEAD(...) ready_head_at(__FILE__, __LINE__, __VA_ARGS__)
#define POP(...) pop_head_at(__FILE__, __LINE__, __VA_ARGS__)
#define READY_AT(...) head_ready_at_at(__FILE__, __LINE__, __VA_ARGS__)
#define PROJECTED(...) projected_at(__FILE__, __LINE__, __VA_ARGS__)
#define REFUND(...) refund_at(__FILE__, __LINE__, __VA_ARGS__)
#define REBASE(...) rebase_at(__FILE__, __LINE__, __VA_ARGS__)

#endif
