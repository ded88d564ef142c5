/* The shared store against a hostile writer: the real code of src/_tokenbucket/shm.c and shm_grant.c, built
 * with TB_SHM_STEP so that a writer of the test's choosing changes the segment before every access to it, as
 * another process mapping it could. Each case runs in a child process, so that a crash or a hang (an alarm)
 * fails that case alone:
 *
 *     cc -std=c11 -O2 -Isrc/_tokenbucket -Itests/c tests/c/test_shm_hostile.c src/_tokenbucket/limits.c src/_tokenbucket/window.c -lm
 *
 * What must hold: every read of the header is bounded by the value checked (the segment ends at a page that
 * cannot be read, so a read past it crashes), and every retry loop gives up with TB_SHM_EFOREIGN, however the
 * writer fights it. */
#define _DEFAULT_SOURCE  /* MAP_ANONYMOUS under -std=c11 */

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define TB_SHM_STEP hostile_step
#include "shm.c"
#include "shm_grant.c"

#include "harness.h"

#define SECONDS 20  /* far beyond what the retry bound takes: a case still running then is a hang */

static tb_shm *seg;               /* the segment under attack, ending where an unreadable page begins */
static void (*writer)(void);      /* what the hostile writer does before each access, or NULL */
static uint64_t moves;            /* how many times it acted */

void hostile_step(void)
{
    if (writer != NULL) {
        moves++;
        writer();
    }
}

static const tb_shm_params FOUR[4] = {{1e6, 10, 10}, {2e6, 10, 10}, {3e6, 10, 10}, {4e6, 10, 10}};

// Maps two pages, the second unreadable, and publishes a segment of nrates rates ending at the second.
static void map_segment(uint32_t nrates)
{
    long page = sysconf(_SC_PAGESIZE);
    char *pages = mmap(NULL, 2 * (size_t)page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(pages != MAP_FAILED && sizeof(tb_shm) <= (size_t)page);
    CHECK(mprotect(pages + page, (size_t)page, PROT_NONE) == 0);
    seg = (tb_shm *)(pages + page - sizeof(tb_shm));
    CHECK(tb_shm_create(seg, sizeof *seg, nrates, FOUR) == TB_SHM_OK);
    tb_shm_reservation r;
    CHECK(tb_shm_reserve(seg, 1, MS, TB_NEVER, &r) == TB_SHM_OK);  /* every rate anchored */
    moves = 0;
}

// Runs attack in a child process: true if it exited 0 within SECONDS (not crashed, not hung).
static bool survives(void (*attack)(void))
{
    fflush(NULL);
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        alarm(SECONDS);
        attack();
        _exit(0);
    }
    int status;
    CHECK(waitpid(child, &status, 0) == child);
    if (WIFSIGNALED(status))
        fprintf(stderr, "the attack ended with signal %d\n", WTERMSIG(status));
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// In a child: exits 1 unless status is TB_SHM_EFOREIGN and the writer acted.
static void expect_refused(tb_shm_status status)
{
    if (status != TB_SHM_EFOREIGN || moves == 0) {
        fprintf(stderr, "status %d after %llu moves of the writer\n", (int)status, (unsigned long long)moves);
        _exit(1);
    }
}

/* ---- writers ---- */

// Raises the header's rate count far past the rates a segment has, once its rates are being read.
static void raise_nrates(void)
{
    if (moves > 2)
        seg->nrates = UINT32_MAX;
}

// Leaves rate 0 never anchored, its word always other than the last one read.
static void unanchor(void)
{
    atomic_store(&seg->rates[0].state, (uint64_t)(3 * moves) << 2 | UNANCHORED);
}

// Moves rate 0's F by a tick each time: every compare-and-swap on it fails.
static void move_state(void)
{
    atomic_fetch_add(&seg->rates[0].state, 4 * GENERATIONS * 4);
}

// Moves the pause back and forth below any asked for: pause_until's compare-and-swap fails each time.
static void shake_pause(void) { atomic_store(&seg->paused_until, (tb_ns)(moves % 1000)); }

// Hands rate 0's change to a new ticket each time, its phase and target unchanged.
static void move_change(void)
{
    uint64_t change = atomic_load(&seg->rates[0].change);
    atomic_store(&seg->rates[0].change, change + ((uint64_t)1 << 32));
}

// Keeps rate 0's live record torn while its change word moves on.
static void tear_while_changing(void)
{
    atomic_store(&seg->rates[0].record[0][0], moves << 32);
    move_change();
}

// Cycles rate 0's generation through the three slots, each slot's record torn.
static void cycle_generation(void)
{
    uint64_t word = atomic_load(&seg->rates[0].state);
    atomic_store(&seg->rates[0].state, (word & ~(uint64_t)3) | (moves % GENERATIONS));
    for (unsigned g = 0; g < GENERATIONS; g++)
        atomic_store(&seg->rates[0].record[g][0], moves << 32);
}

/* ---- attacks: each an operation under a writer ---- */

static void check_under_raised_nrates(void)
{
    writer = raise_nrates;
    (void)tb_shm_check(seg);
    (void)tb_shm_validate(seg, sizeof *seg);
    (void)tb_shm_join(seg, sizeof *seg, 4, FOUR);
}

static void tokens_unanchored(void)
{
    writer = unanchor;
    double tokens;
    expect_refused(tb_shm_tokens(seg, 2 * MS, &tokens));
}

static void reserve_moved(void)
{
    writer = move_state;
    tb_shm_reservation r;
    expect_refused(tb_shm_reserve(seg, 1, 2 * MS, TB_NEVER, &r));
}

static void pause_shaken(void)
{
    writer = shake_pause;
    expect_refused(tb_shm_pause_until(seg, 5 * SECOND));
}

static void set_rate_outrun(void)
{
    writer = move_change;
    expect_refused(tb_shm_set_rate(seg, 0, 5e5, 20, 2 * MS));
}

static void check_torn_and_moving(void)
{
    writer = tear_while_changing;
    if (tb_shm_check(seg) == 0)
        _exit(1);
}

static void params_cycling(void)
{
    writer = cycle_generation;
    tb_shm_params params;
    expect_refused(tb_shm_rate_params(seg, 0, &params));
}

static void test_header_read_once(void)
{
    map_segment(4);
    CHECK(survives(check_under_raised_nrates));
}

static void test_retry_loops_bounded(void)
{
    map_segment(1);
    CHECK(survives(tokens_unanchored));
    CHECK(survives(reserve_moved));
    CHECK(survives(pause_shaken));
    CHECK(survives(set_rate_outrun));
    CHECK(survives(check_torn_and_moving));
    CHECK(survives(params_cycling));
}

int main(void)
{
    RUN(test_header_read_once);
    RUN(test_retry_loops_bounded);
    return tests_summary();
}
