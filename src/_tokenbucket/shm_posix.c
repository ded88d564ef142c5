/* A shared limiter's segment as a named POSIX shared-memory object; see shm_posix.h. */
#define _POSIX_C_SOURCE 200809L  /* shm_open, ftruncate, mmap under -std=c11 */

#include "shm_posix.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int tb_shm_map(const char *name, tb_shm_mapping *m)
{
    *m = (tb_shm_mapping){0};
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    bool created = fd >= 0;
    if (!created && errno == EEXIST)
        fd = shm_open(name, O_RDWR, 0);
    if (fd < 0)
        return errno;
    int error = 0;
    struct stat st;
    if (created && ftruncate(fd, sizeof(tb_shm)) != 0)
        error = errno;
    else if (fstat(fd, &st) != 0)
        error = errno;
    else if (st.st_size == 0)
        error = EAGAIN;  /* its creator has not sized it yet */
    if (error == 0) {
        void *mem = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (mem == MAP_FAILED)
            error = errno;
        else
            *m = (tb_shm_mapping){.seg = mem, .len = (size_t)st.st_size, .created = created};
    }
    if (error != 0 && created)
        shm_unlink(name);  /* nothing was published under it */
    close(fd);
    return error;
}

void tb_shm_unmap(tb_shm_mapping *m)
{
    if (m->seg != NULL)
        munmap(m->seg, m->len);
    *m = (tb_shm_mapping){0};
}

int tb_shm_unlink(const char *name) { return shm_unlink(name) == 0 ? 0 : errno; }
