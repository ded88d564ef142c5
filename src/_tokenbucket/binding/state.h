/* The binding's data: module state, the Bucket object, and the few gates between Python versions.
 * Part of _tokenbucketmodule.c's translation unit (included once, in order: state, clock, params,
 * awaitables, then the type and the module in the .c file). */
#ifndef AIOTB_BINDING_STATE_H
#define AIOTB_BINDING_STATE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>

#include "../queue.h"
#include "compat.h"

/* The clock's gates (clock.h): on 3.11-3.13 GIL builds, trust the thread's context version while it is unchanged
 * (a CPython-internal field; AIOTB_PUBLIC_CLOCK=1 builds without it); on 3.11, also asyncio's running-loop
 * holder across versions. What they save on an uncontended `async with` against the AIOTB_PUBLIC_CLOCK=1
 * build (`benchmarks/run.py --only uncontended --competitors aiotb,c-bucket-bound`, medians of 5 alternating
 * runs each, asyncio / uvloop): 3.11 both gates 74.9 / 74.6 ns against 219.8 / 218.9 ns (66 %); 3.13 the
 * context version 95.9 / 98.0 ns against 108.1 / 106.5 ns (11 % / 8 %). On 3.14 and 3.15 the same field
 * saves under 5 % (`benchmarks/per_with.py`, three alternating runs of each build: 88.8-89.7 ns against
 * 92.0-93.4 ns on 3.14, 86.6-87.1 against 90.7-91.3 on 3.15), so they take the public path. */
#if PY_VERSION_HEX < 0x030E0000 && !defined(Py_GIL_DISABLED) && !defined(AIOTB_PUBLIC_CLOCK)
#define AIOTB_TRUST_CONTEXT_VERSION 1
#if PY_VERSION_HEX < 0x030C0000
#define AIOTB_TRUST_LOOP_HOLDER 1
#endif
#endif
/* On the public path of a GIL build, a reading first tries the proof that held last, whichever thread's
 * record it is in (clock.h), before it looks for its own thread's record (its thread state, a thread-local
 * and their checks: about 40 instructions). With the proof's class check cut to one compare and __aexit__'s
 * window path out of line, uncontended `async with` went from 1,629 to 1,579 instructions on 3.14 and from
 * 1,590 to 1,535 on 3.15 (callgrind, `benchmarks/per_with.py --count`, PYTHONHASHSEED=0), against 1,462 and
 * 1,421 for the bare C bucket bound once and 1,502 and 1,458 for that bucket asking asyncio for the running
 * loop (`--subject`). Without the GIL no thread may read another's record: a free-threaded build looks for its own. */
#if !defined(AIOTB_TRUST_CONTEXT_VERSION) && !defined(Py_GIL_DISABLED)
#define AIOTB_RECENT_PROOF 1
#endif
/* `async with` on 3.11-3.13 binds __aenter__ and __aexit__ at each entry, allocating two bound methods, unless
 * each bucket keeps them bound (bound.h). 3.14 calls a method descriptor without binding it (LOAD_SPECIAL), so
 * there keeping them bound costs instead: 1,579 instructions per uncontended `async with` with them kept, 1,416
 * with a plain method descriptor per class, on 3.14; 1,535 against 1,411 on 3.15 (callgrind, `benchmarks/per_with.py
 * --count`, PYTHONHASHSEED=0; the bare C bucket bound once: 1,462 and 1,421). */
#if PY_VERSION_HEX < 0x030E0000
#define AIOTB_BIND_ONCE 1
#endif

#if defined(__GNUC__)
#define COLD __attribute__((noinline, cold))  /* keeps the fast path's frame small */
#define NOINLINE __attribute__((noinline))     /* the same, for a path taken often enough not to be cold */
#define ALWAYS_INLINE __attribute__((always_inline))
#define FLATTEN __attribute__((flatten))  /* inlines the core's calls too (link-time optimization) */
#else
#define COLD
#define NOINLINE
#define ALWAYS_INLINE
#define FLATTEN
#endif

/* How late a woken waiter may be and still be granted as of its ready instant, in time of one
 * token: under one, so no interval of length t sees a whole token over burst + rate*t, with a quarter
 * of a token left for the varying delay between a grant and its task's resume. */
#define LATE_CREDIT_TOKENS 0.75

/* Proof that a loop's clock is CLOCK_MONOTONIC: valid while the loop is the running one and neither
 * its class (nor a base) nor its instance attributes changed since it was checked. */
typedef struct {
    PyObject *loop;            /* strong; NULL: no proof */
    PyTypeObject *loop_type;   /* strong: its class when checked */
    PyObject *loop_dict;       /* strong: its instance dict, or NULL; a `time` patched there changes its size */
    Py_ssize_t dict_size;
    uint64_t type_epoch;       /* the class's version when checked (see clock.h) */
} tb_proof;

/* A shortcut to one thread's SeenObject (below), past the thread-state dict that owns it (clock.h). */
typedef struct {
    PyThreadState *ts;  /* the thread state it was found for */
    uint64_t ts_id;
    int64_t interp_id;
    uint64_t frees;     /* seen_frees (clock.h) when it was found */
    PyObject *seen;     /* borrowed: the SeenObject, or NULL */
} tb_seen_shortcut;

typedef struct {
    PyTypeObject *bucket_type;
    PyTypeObject *seen_type;
    PyTypeObject *ready_type;
    PyTypeObject *acquisition_type;
#ifdef AIOTB_BIND_ONCE
    PyTypeObject *bound_type;    /* Bound (bound.h) */
#endif
    PyObject *ready;             /* the one done awaitable */
    PyObject *get_running_loop;  /* asyncio.events._get_running_loop */
    PyCFunction running_loop_c;  /* its C function when it is one taking no arguments (_asyncio's), else NULL */
    PyObject *running_loop_self; /* the self that function is called with (borrowed: get_running_loop holds it) */
    PyObject *is_monotonic_loop; /* aiotb._clock.is_monotonic_loop */
    PyObject *real_type;         /* numbers.Real */
    PyTypeObject *future_type;   /* asyncio.Future */
    PyObject *latest_loop;       /* weak reference to the loop proven last, so a new bucket skips the proof */
    tb_proof latest;             /* that proof (its loop field unused: the reference above is weak) */
    PyObject *str_time;
    PyObject *str_wait;
    PyObject *str_wait_to_hold;
    PyObject *str_over_capacity;
    PyObject *str_throw;
    PyObject *str_close;
    PyObject *str_done;
    PyObject *str_drop_closed;
    PyObject *str_settle;
    PyObject *str_seen;          /* this module's key in each thread's state dict (see clock.h) */
#ifdef AIOTB_TRUST_LOOP_HOLDER
    PyObject *str_loop_holder;   /* asyncio's key for the running loop in that dict (see clock.h) */
#endif
    PyObject *segment_corrupt;   /* the exception SegmentCorrupt (segment.h), or NULL where there is no Segment */
    PyTypeObject *segment_type;  /* Segment (segment.h), or NULL where there is none */
    int type_watcher;            /* 3.12+: id of the watcher that counts class changes, or -1 */
#ifndef Py_GIL_DISABLED
    tb_seen_shortcut seen_shortcut; /* to the SeenObject of the thread that read the clock last (clock.h) */
#endif
#ifdef AIOTB_RECENT_PROOF
    PyObject *recent;            /* borrowed: the SeenObject whose proof held at the latest reading, any thread's,
                                    or NULL; a SeenObject clears it when freed (clock.h) */
#endif
} tb_state;

typedef struct {
    PyObject_HEAD
    tb_state *state;    /* borrowed: the type keeps its module alive */
    tb_bucket core;
    bool configured;    /* _configure ran: until then nothing is granted */
    bool has_last;      /* last_now holds a reading */
    tb_ns last_now;     /* the latest reading of the clock */
    PyObject *domain;   /* the loop whose own clock core times are on; NULL: CLOCK_MONOTONIC */
    PyObject *segment;  /* the Segment newcomers take from (shared.h), or NULL: the core's own limits */
    PyObject *shared_error; /* with a segment: the exception class for a corrupt one (aiotb.StoreCorrupt) */
    bool shared_busy;   /* with a segment: a waiter of this process is queued (the Python layer says) */
    int resuming;       /* loops holding grants whose tasks have not resumed yet: fair newcomers wait behind them */
#ifdef AIOTB_BIND_ONCE
    PyObject *entry;    /* __aenter__ bound to this bucket, kept from its first lookup (bound.h), or NULL */
    PyObject *exit;     /* __aexit__, the same way */
#endif
} BucketObject;

/* What one thread has proven (clock.h): a loop whose clock is CLOCK_MONOTONIC and, on 3.11-3.13, the
 * context version in which it was that thread's running loop. One per thread, in its thread-state
 * dict, freed with the thread: no other thread ever reads it. */
typedef struct {
    PyObject_HEAD
    tb_proof proof;
    uint64_t context_ver;  /* the thread's context version when proof.loop was found running... */
    bool running;          /* ...if true */
#ifdef AIOTB_TRUST_LOOP_HOLDER
    PyObject *loop_holder; /* strong: asyncio's running-loop holder then, or NULL (see clock.h) */
    uint64_t forks;        /* the process's count of forks then */
#endif
} SeenObject;

#endif
