/* The segment of a shared limiter (shm.h) as a named POSIX shared-memory object mapped into this process.
 *
 * The first process to open a name creates the object, sizes it and must then fill it (tb_shm_create); the
 * others map it and join (tb_shm_join), asking again while it says TB_SHM_ENOTREADY or while the object is
 * still empty (EAGAIN here). Should the creator die before publishing, the name stays unusable until
 * someone unlinks it: telling a dead creator from a slow one is left to the caller (a bounded wait).
 *
 * The creator makes the object with mode 0600, gives it the mode asked for on its own descriptor (exactly: the
 * umask does not apply), then sizes it; a joiner of another user meets EACCES until then. Should any of that
 * fail, the creator removes the name again. The owner and mode of the object opened are reported as found,
 * for the caller to decide whether to trust an object it did not create. */
#ifndef AIOTB_SHM_POSIX_H
#define AIOTB_SHM_POSIX_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "shm.h"

/* A segment mapped into this process. */
typedef struct {
    tb_shm *seg;
    size_t len;       /* bytes mapped: at least sizeof(tb_shm), or the object is foreign */
    bool created;     /* this call created the object: fill it with tb_shm_create */
    uid_t owner;      /* the object's owner, as opened */
    mode_t mode;      /* and its permission bits */
} tb_shm_mapping;

/* Maps the object called name ("/name", as shm_open takes it), creating it with permission bits mode at
 * sizeof(tb_shm) if there is none; 0, EAGAIN while its creator has not sized it yet, or another errno value. */
int tb_shm_map(const char *name, mode_t mode, tb_shm_mapping *m);
/* Unmaps it (the object and its name stay). */
void tb_shm_unmap(tb_shm_mapping *m);
/* Removes the name, so that the next open creates a new object (mappings stay valid); 0 or an errno value. */
int tb_shm_unlink(const char *name);

#endif
