/* gs_mapfile.h: map a file read-only into memory (host only, POSIX mmap), as the ESP32 maps
 * the model partition from flash: the engine then reads the artifact in place. */
#ifndef GS_MAPFILE_H
#define GS_MAPFILE_H

#include <stddef.h>

typedef struct {
    const void *data; /* never NULL after a successful map, even for an empty file */
    size_t n_bytes;
    void *mapping;    /* what munmap needs; NULL for an empty file */
} gs_mapped_file;

/* 0 on success; -1 with errno set otherwise. */
int gs_map_file(const char *path, gs_mapped_file *file);
void gs_unmap_file(gs_mapped_file *file);

#endif /* GS_MAPFILE_H */
