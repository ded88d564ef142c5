/* A hostile neighbour of a shared limiter (tests/test_hostile_neighbour.py): a process of another user that
 * squats a segment's name, rewrites its words, truncates it or fights over it while a limiter uses it. It
 * drops to the user given before it touches anything, so that what it creates is that user's.
 *
 *     hostile_neighbour UID GID NAME squat MODE [NS_PER_TOKEN BURST INITIAL]
 *         creates /NAME (mode exactly MODE), sized; with rates, a well-formed segment publishing them
 *     hostile_neighbour UID GID NAME keep-full SECONDS
 *         writes every rate's state word full, every 10 us or so, for SECONDS
 *     hostile_neighbour UID GID NAME pause SECONDS
 *         sets the pause SECONDS ahead of now (or back to none, for 0)
 *     hostile_neighbour UID GID NAME truncate BYTES
 *         ftruncates the object to BYTES
 *     hostile_neighbour UID GID NAME fight SECONDS
 *         for SECONDS, compare-and-swaps every anchored state word one nanosecond later (never a token more)
 *         and flips the pause between two instants long past, as fast as it can
 *
 * Each prints "ready" once it has done its first write (or its whole deed), then a line of counts when it
 * ends; it exits 0, or 1 with the failing call on stderr. Built against the store's own headers, so the
 * words are where the limiter reads them. */
#define _DEFAULT_SOURCE  /* setgroups, ftruncate, fchmod and mmap under -std=c11 */

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "shm_rate.h"

// CLOCK_MONOTONIC in nanoseconds, as the limiter reads it.
static tb_ns now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (tb_ns)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

// Exits 1 naming what failed.
static void fail(const char *what)
{
    fprintf(stderr, "hostile_neighbour: %s: %s\n", what, strerror(errno));
    exit(1);
}

// Becomes uid/gid for good (nothing to do when it is this process's already).
static void become(uid_t uid, gid_t gid)
{
    if (getuid() == uid && geteuid() == uid)
        return;
    if (setgroups(0, NULL) != 0 || setgid(gid) != 0 || setuid(uid) != 0)
        fail("dropping to the neighbour's user");
}

// The existing object called name, mapped for writing.
static tb_shm *map_existing(const char *name)
{
    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0)
        fail("shm_open");
    void *mem = mmap(NULL, sizeof(tb_shm), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (mem == MAP_FAILED)
        fail("mmap");
    close(fd);
    return mem;
}

// The number of rates the header says, within the layout's bounds.
static uint32_t rates_of(const tb_shm *seg)
{
    uint32_t nrates = seg->nrates;
    return nrates >= 1 && nrates <= TB_MAX_RATES ? nrates : TB_MAX_RATES;
}

static int squat(const char *name, int argc, char **argv)
{
    if (argc != 1 && argc != 4) {
        fprintf(stderr, "squat MODE [NS_PER_TOKEN BURST INITIAL]\n");
        return 2;
    }
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0)
        fail("shm_open");
    if (fchmod(fd, (mode_t)strtol(argv[0], NULL, 8)) != 0 || ftruncate(fd, sizeof(tb_shm)) != 0)
        fail("sizing");
    void *mem = mmap(NULL, sizeof(tb_shm), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (mem == MAP_FAILED)
        fail("mmap");
    close(fd);
    if (argc == 4) {
        tb_shm_params rate = {strtod(argv[1], NULL), strtod(argv[2], NULL), strtod(argv[3], NULL)};
        if (tb_shm_create(mem, sizeof(tb_shm), 1, &rate) != TB_SHM_OK) {
            fprintf(stderr, "hostile_neighbour: tb_shm_create refused the rates\n");
            return 1;
        }
    }
    printf("ready\n");
    return 0;
}

static int keep_full(const char *name, double seconds)
{
    tb_shm *seg = map_existing(name);
    uint32_t nrates = rates_of(seg);
    tb_ns stop = now_ns() + (tb_ns)(seconds * 1e9);
    unsigned long writes = 0;
    do {
        for (uint32_t i = 0; i < nrates; i++) {
            uint64_t word = atomic_load(&seg->rates[i].state);
            /* full since a second ago, in the generation it holds: any burst is whole */
            atomic_store(&seg->rates[i].state, state_word(tb_at_tick(now_ns() - 1000000000), state_generation(word)));
        }
        if (writes++ == 0) {
            printf("ready\n");
            fflush(stdout);
        }
        nanosleep(&(struct timespec){.tv_nsec = 10000}, NULL);  /* full again every 10 us or so: plenty */
    } while (now_ns() < stop);
    printf("writes %lu\n", writes);
    return 0;
}

static int pause_ahead(const char *name, double seconds)
{
    tb_shm *seg = map_existing(name);
    atomic_store(&seg->paused_until, seconds > 0 ? now_ns() + (tb_ns)(seconds * 1e9) : INT64_MIN);
    printf("ready\n");
    return 0;
}

static int truncate_to(const char *name, long bytes)
{
    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0)
        fail("shm_open");
    if (ftruncate(fd, bytes) != 0)
        fail("ftruncate");
    close(fd);
    printf("ready\n");
    return 0;
}

static int fight(const char *name, double seconds)
{
    tb_shm *seg = map_existing(name);
    uint32_t nrates = rates_of(seg);
    tb_ns stop = now_ns() + (tb_ns)(seconds * 1e9);
    unsigned long swaps = 0, rounds = 0;
    const uint64_t one_ns = (uint64_t)TB_TICKS_PER_NS << 2;  /* F one nanosecond later: the rate holds less */
    printf("ready\n");
    fflush(stdout);
    do {
        for (int k = 0; k < 1000; k++) {
            for (uint32_t i = 0; i < nrates; i++) {
                uint64_t word = atomic_load(&seg->rates[i].state);
                if (state_anchored(word) && atomic_compare_exchange_strong(&seg->rates[i].state, &word, word + one_ns))
                    swaps++;
            }
            int64_t pause = atomic_load(&seg->paused_until);
            if (pause <= INT64_MIN + 1)
                atomic_compare_exchange_strong(&seg->paused_until, &pause, pause == INT64_MIN ? INT64_MIN + 1 : INT64_MIN);
        }
        rounds++;
    } while (now_ns() < stop);
    printf("swaps %lu rounds %lu\n", swaps, rounds);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: hostile_neighbour UID GID NAME squat|keep-full|pause|truncate|fight ...\n");
        return 2;
    }
    become((uid_t)strtoul(argv[1], NULL, 10), (gid_t)strtoul(argv[2], NULL, 10));
    const char *name = argv[3], *deed = argv[4];
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (strcmp(deed, "squat") == 0)
        return squat(name, argc - 5, argv + 5);
    if (argc != 6) {
        fprintf(stderr, "%s takes one argument\n", deed);
        return 2;
    }
    if (strcmp(deed, "keep-full") == 0)
        return keep_full(name, strtod(argv[5], NULL));
    if (strcmp(deed, "pause") == 0)
        return pause_ahead(name, strtod(argv[5], NULL));
    if (strcmp(deed, "truncate") == 0)
        return truncate_to(name, strtol(argv[5], NULL, 10));
    if (strcmp(deed, "fight") == 0)
        return fight(name, strtod(argv[5], NULL));
    fprintf(stderr, "unknown deed %s\n", deed);
    return 2;
}
