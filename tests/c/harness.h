/* The framework-free harness shared by the C unit tests: checks, test runs, a seeded generator.
 *
 * A failed CHECK prints its file and line and abandons the current test; main ends with
 * tests_summary(), which prints "N passed, M failed" and gives the exit status. */
#ifndef AIOTB_TESTS_HARNESS_H
#define AIOTB_TESTS_HARNESS_H

#include <math.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static jmp_buf test_escape;
static int tests_passed, tests_failed;

// Reports a failed check and abandons the current test (its buckets may leak; the run is failing anyway).
_Noreturn static void fail_at(const char *file, int line, const char *what)
{
    fprintf(stderr, "%s:%d: %s\n", file, line, what);
    longjmp(test_escape, 1);
}

#define CHECK(cond) ((cond) ? (void)0 : fail_at(__FILE__, __LINE__, "CHECK(" #cond ") failed"))

// Runs one test, counting it passed unless a check failed.
static void run_test(const char *name, void (*test)(void))
{
    if (setjmp(test_escape) == 0) {
        test();
        tests_passed++;
    } else {
        tests_failed++;
        fprintf(stderr, "FAILED %s\n", name);
    }
}

#define RUN(test) run_test(#test, test)

// Prints "N passed, M failed"; returns the exit status: non-zero if any test failed.
static int tests_summary(void)
{
    printf("%d passed, %d failed\n", tests_passed, tests_failed);
    return tests_failed ? 1 : 0;
}

#define MS ((tb_ns)1000000)
#define SECOND ((tb_ns)1000000000)

// Whether a and b agree to within rel of the larger (or within rel absolutely near zero).
static inline bool close_to(double a, double b, double rel)
{
    double scale = fmax(fmax(fabs(a), fabs(b)), 1.0);
    return fabs(a - b) <= rel * scale;
}

/* splitmix64: a fixed seed per test, so failures replay exactly. */
static uint64_t rng_state;
static inline void rng_seed(uint64_t seed) { rng_state = seed; }
static inline uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15u);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}
// Uniform in [0, n).
static inline uint64_t rng_below(uint64_t n) { return rng_next() % n; }

#endif
