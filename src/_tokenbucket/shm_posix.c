/* A shared limiter's segment as a named POSIX shared-memory object; see shm_posix.h. */
#define _POSIX_C_SOURCE 200809L  /* shm_open, ftruncate, mmap under -std=c11 */

#include "shm_posix.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

// Gives the object just created on fd its mode and size; 0 or an errno value.
static int set_up(int fd, mode_t mode)
{
    if (fchmod(fd, mode) != 0 || ftruncate(fd, sizeof(tb_shm)) != 0)
        return errno;
    return 0;
}

int tb_shm_map(const char *name, mode_t mode, tb_shm_mapping *m)
{
    *m = (tb_shm_mapping){0};
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    bool created = fd >= 0;
    if (!created && errno == EEXIST)
        fd = shm_open(name, O_RDWR, 0);
    if (fd < 0)
        return errno;
    int error = created ? set_up(fd, mode) : 0;
    struct stat st;
    if (error == 0 && fstat(fd, &st) != 0)
        error = errno;
    else if (error == 0 && st.st_size == 0)
        error = EAGAIN;  /* its creator has not sized it yet */
    if (error == 0) {
        void *mem = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (mem == MAP_FAILED)
            error = errno;
        else
            *m = (tb_shm_mapping){.seg = mem, .len = (size_t)st.st_size, .created = created, .owner = st.st_uid,
                                  .mode = st.st_mode & 07777};
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
