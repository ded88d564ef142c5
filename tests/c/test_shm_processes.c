/* Processes sharing one limiter through a named POSIX shared-memory object (src/_tokenbucket/shm_posix.c):
 * children map it, join, and hammer it with takes, reservations, cancels and set_rates of the burst at a
 * shared simulated clock; one of them is killed with SIGKILL wherever it is. The others must finish, the
 * merged log of grants keep the bound, and the segment serve anyone afterwards.
 *
 *     cc -std=c11 -O2 -Isrc/_tokenbucket -Itests/c tests/c/test_shm_processes.c src/_tokenbucket/shm*.c \
 *        src/_tokenbucket/limits.c src/_tokenbucket/window.c -lm && ./a.out */
#define _DEFAULT_SOURCE  /* fork, kill, nanosleep, mmap and MAP_ANONYMOUS under -std=c11 */

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "shm.h"
#include "shm_posix.h"

#include "harness.h"
#include "shm_bound.h"

#define CHILDREN 4
#define OPS 30000       /* per child; the one to be killed goes on until it is, up to CAP */
#define CAP (4 * OPS)
#define ROUNDS 5        /* each with a child killed at another point */

/* A grant as a child logged it. */
typedef struct {
    tb_ns at;
    double amount;
    bool cancelled;     /* given up before its instant: never used, whatever the cancel gave back */
} entry;

/* What the children share besides the segment: the simulated clock and their logs. */
typedef struct {
    _Atomic tb_ns now;
    struct {
        _Atomic size_t count;   /* entries written (each before it counts) */
        _Atomic int ops;        /* operations done */
        entry log[CAP];
    } child[CHILDREN];
} board;

static const tb_shm_params RATE = {1000.0 / 3, 5, 5}, BURSTIER = {1000.0 / 3, 6, 0};
static char name[64];

// A child's work: join, then OPS operations (child 0: until killed, stopping at CAP); exits 0, or 1 if
// something went wrong.
static void child(board *b, int self)
{
    tb_shm_mapping m;
    int error;
    while ((error = tb_shm_map(name, 0600, &m)) == EAGAIN)
        ;
    if (error != 0 || tb_shm_join(m.seg, m.len, 1, &RATE) != TB_SHM_OK)
        _exit(1);
    rng_seed((uint64_t)self * 7919 + (uint64_t)getpid());
    tb_shm_reservation pending = {0};
    size_t pending_entry = 0;
    bool holding = false;
    for (int i = 0; i < (self ? OPS : CAP); i++) {
        tb_ns now = atomic_fetch_add(&b->now, (tb_ns)rng_below(200));
        double amount = (double)(1 + rng_below(8)) / 2;
        uint64_t choice = rng_below(100);
        tb_shm_reservation r;
        tb_shm_status status = TB_SHM_OK;
        if (choice < 45 || (choice < 85 && holding)) {
            status = tb_shm_take_now(m.seg, amount, now);
            r.at = now;
        } else if (choice < 85) {
            tb_ns deadline = rng_below(4) ? now + (tb_ns)rng_below(5000) : TB_NEVER;
            status = tb_shm_reserve(m.seg, amount, now, deadline, &r);
        } else if (choice < 98) {
            if (holding && now < pending.at) {  /* a waiter giving up: its grant never happens */
                /* Logged first: killed before the flag, it would count a grant the cancel gave back. */
                b->child[self].log[pending_entry].cancelled = true;
                tb_shm_cancel(m.seg, &pending, now);
            }
            holding = false;
            status = TB_SHM_ETOOLATE;
        } else {
            const tb_shm_params *p = rng_below(2) ? &RATE : &BURSTIER;
            tb_shm_status changed = tb_shm_set_rate(m.seg, 0, p->ns_per_token, p->burst, now);
            if (changed != TB_SHM_OK && changed != TB_SHM_EAGAIN)
                _exit(1);
            status = TB_SHM_ETOOLATE;
        }
        if (status != TB_SHM_OK && status != TB_SHM_ETOOLATE)
            _exit(1);
        if (status == TB_SHM_OK && choice < 98) {
            size_t k = atomic_load(&b->child[self].count);
            b->child[self].log[k] = (entry){r.at, amount, false};
            if (choice >= 45 && !holding) {
                pending = r;
                pending_entry = k;
                holding = true;
            }
            atomic_store(&b->child[self].count, k + 1);
        }
        atomic_store(&b->child[self].ops, i + 1);
    }
    while (self == 0)  /* killed before long */
        pause();
    _exit(0);
}

// Waits until child reaches ops operations.
static void wait_for(board *b, int child, int ops)
{
    while (atomic_load(&b->child[child].ops) < ops)
        nanosleep(&(struct timespec){0, 100000}, NULL);
}

static void test_a_child_killed_anywhere(void)
{
    board *b = mmap(NULL, sizeof *b, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(b != MAP_FAILED);
    logged_grant *grants = malloc(CHILDREN * CAP * sizeof *grants);
    CHECK(grants != NULL);
    for (int round = 0; round < ROUNDS; round++) {
        snprintf(name, sizeof name, "/aiotb-test-%ld-%d", (long)getpid(), round);
        tb_shm_unlink(name);  /* left by a failed run whose pid this one reuses */
        tb_shm_mapping m;
        CHECK(tb_shm_map(name, 0600, &m) == 0 && m.created && tb_shm_create(m.seg, m.len, 1, &RATE) == TB_SHM_OK);
        memset(b, 0, sizeof *b);
        pid_t pids[CHILDREN];
        for (int c = 0; c < CHILDREN; c++) {
            pids[c] = fork();
            CHECK(pids[c] >= 0);
            if (pids[c] == 0)
                child(b, c);
        }
        wait_for(b, 0, 2000 + round * 5000);
        CHECK(kill(pids[0], SIGKILL) == 0);
        for (int c = 0; c < CHILDREN; c++) {
            int status;
            CHECK(waitpid(pids[c], &status, 0) == pids[c]);
            CHECK(c == 0 ? WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL : WIFEXITED(status) && WEXITSTATUS(status) == 0);
        }
        size_t n = 0;
        for (int c = 0; c < CHILDREN; c++)
            for (size_t k = 0; k < atomic_load(&b->child[c].count); k++)
                if (!b->child[c].log[k].cancelled)
                    grants[n++] = (logged_grant){b->child[c].log[k].at, tb_ticks(b->child[c].log[k].amount * BURSTIER.ns_per_token)};
        CHECK(bound_excess(grants, n, tb_ticks(BURSTIER.burst * BURSTIER.ns_per_token)) <= 0);
        /* What the killed child left, the others and a newcomer get on with. */
        tb_shm_reservation r;
        tb_ns now = atomic_load(&b->now) + SECOND;
        tb_ns at;
        CHECK(tb_shm_check(m.seg) == 0 && tb_shm_reserve(m.seg, 1, now, TB_NEVER, &r) == TB_SHM_OK);
        CHECK(tb_shm_set_rate(m.seg, 0, 1e6, 3, now) == TB_SHM_OK && tb_shm_fit_at(m.seg, 3, now, &at) == TB_SHM_OK);
        CHECK(at < TB_NEVER && tb_shm_take_now(m.seg, 3, at) == TB_SHM_OK);
        printf("round %d: child killed after %d operations; %zu grants kept the bound\n", round,
               atomic_load(&b->child[0].ops), n);
        tb_shm_unmap(&m);
        CHECK(tb_shm_unlink(name) == 0);
    }
    free(grants);
    munmap(b, sizeof *b);
}

static void test_mapping_by_name(void)
{
    snprintf(name, sizeof name, "/aiotb-test-%ld-map", (long)getpid());
    tb_shm_unlink(name);
    tb_shm_mapping first, second;
    CHECK(tb_shm_map(name, 0600, &first) == 0 && first.created && first.len == sizeof(tb_shm));
    CHECK(tb_shm_map(name, 0600, &second) == 0 && !second.created && second.len == sizeof(tb_shm));
    CHECK(tb_shm_join(second.seg, second.len, 1, &RATE) == TB_SHM_ENOTREADY);
    CHECK(tb_shm_create(first.seg, first.len, 1, &RATE) == TB_SHM_OK);
    CHECK(tb_shm_join(second.seg, second.len, 1, &RATE) == TB_SHM_OK);
    CHECK(tb_shm_take_now(first.seg, 5, 0) == TB_SHM_OK && tb_shm_take_now(second.seg, 1, 0) == TB_SHM_ETOOLATE);
    tb_shm_unmap(&second);
    tb_shm_unmap(&first);
    CHECK(tb_shm_unlink(name) == 0 && tb_shm_unlink(name) == ENOENT);
}

int main(void)
{
    RUN(test_mapping_by_name);
    RUN(test_a_child_killed_anywhere);
    return tests_summary();
}
