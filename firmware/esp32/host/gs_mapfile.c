/* gs_mapfile.c: read-only mmap of a whole file (see gs_mapfile.h). */
#include "gs_mapfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int gs_map_file(const char *path, gs_mapped_file *file)
{
    static const unsigned char empty[1] = {0};
    struct stat st;
    int fd = open(path, O_RDONLY);
    file->data = NULL;
    file->n_bytes = 0;
    file->mapping = NULL;
    if (fd < 0) return -1;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    if (!S_ISREG(st.st_mode) || (uintmax_t)st.st_size > SIZE_MAX) {
        close(fd);
        errno = S_ISDIR(st.st_mode) ? EISDIR : (S_ISREG(st.st_mode) ? EFBIG : EINVAL);
        return -1;
    }
    if (st.st_size == 0) { /* mmap refuses length 0: hand the engine an empty, valid pointer */
        close(fd);
        file->data = empty;
        return 0;
    }
    file->mapping = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (file->mapping == MAP_FAILED) {
        file->mapping = NULL;
        return -1;
    }
    file->data = file->mapping;
    file->n_bytes = (size_t)st.st_size;
    return 0;
}

void gs_unmap_file(gs_mapped_file *file)
{
    if (file->mapping != NULL) munmap(file->mapping, file->n_bytes);
    file->mapping = NULL;
    file->data = NULL;
    file->n_bytes = 0;
}
