/* png_writer.c - a self-contained PNG writer for the 128x64 screen (no libpng, no zlib).
 *
 * PNG (W3C Recommendation, 2nd ed. 2003): signature, IHDR (8-bit grayscale, color type 0),
 * one IDAT, IEND; each chunk is length, type, data, CRC-32 of type + data (section 5.3).
 * The image data is a zlib stream (RFC 1950: header 78 01, Adler-32 trailer, big-endian) of
 * DEFLATE stored blocks (RFC 1951 section 3.2.4: BFINAL/BTYPE=00 byte, LEN, NLEN little-endian,
 * at most 65535 bytes each) over the scanlines, each prefixed with filter type 0 (none).
 * Nothing is compressed: at scale 4 the file is ~130 KB, which a README can afford.
 * The whole stream length is known up front, so rows are generated and written one at a time.
 */
#include "gs_sim.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STORED_BLOCK_MAX 65535u

uint32_t gs_sim_crc32(uint32_t crc, const uint8_t *bytes, size_t n)
{
    /* Reflected polynomial 0xEDB88320, init and final xor 0xFFFFFFFF (PNG spec Annex D). */
    static uint32_t table[256];
    static int table_ready = 0;
    uint32_t c;
    size_t i;
    int k;

    if (!table_ready) {
        for (i = 0; i < 256; i++) {
            c = (uint32_t)i;
            for (k = 0; k < 8; k++) {
                c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            }
            table[i] = c;
        }
        table_ready = 1;
    }
    crc ^= 0xFFFFFFFFu;
    for (i = 0; i < n; i++) {
        crc = table[(crc ^ bytes[i]) & 0xFFu] ^ (crc >> 8);
    }
    return crc ^ 0xFFFFFFFFu;
}

uint32_t gs_sim_adler32(uint32_t adler, const uint8_t *bytes, size_t n)
{
    /* RFC 1950 section 8.2: two sums modulo 65521, the largest prime below 2^16. */
    uint32_t a = adler & 0xFFFFu, b = adler >> 16;
    size_t i;

    for (i = 0; i < n; i++) {
        a = (a + bytes[i]) % 65521u;
        b = (b + a) % 65521u;
    }
    return (b << 16) | a;
}

typedef struct png_out {
    FILE *f;
    uint32_t crc;        /* of the current chunk, type included */
    uint32_t adler;      /* of the zlib payload */
    size_t raw_left;     /* uncompressed bytes still to write */
    size_t block_left;   /* bytes left in the current stored block */
    int failed;
} png_out;

static void put_be32(uint8_t out[4], uint32_t v)
{
    out[0] = (uint8_t)(v >> 24);
    out[1] = (uint8_t)(v >> 16);
    out[2] = (uint8_t)(v >> 8);
    out[3] = (uint8_t)v;
}

/* Write bytes to the file; the first failure sticks in o->failed. */
static void put(png_out *o, const uint8_t *bytes, size_t n)
{
    if (!o->failed && fwrite(bytes, 1, n, o->f) != n) {
        o->failed = 1;
    }
}

/* Write chunk bytes that the chunk's CRC covers (type and data). */
static void emit(png_out *o, const uint8_t *bytes, size_t n)
{
    put(o, bytes, n);
    o->crc = gs_sim_crc32(o->crc, bytes, n);
}

static void chunk_begin(png_out *o, const char type[4], uint32_t length)
{
    uint8_t len[4];

    put_be32(len, length);
    put(o, len, 4);
    o->crc = 0;
    emit(o, (const uint8_t *)type, 4);
}

static void chunk_end(png_out *o)
{
    uint8_t crc[4];

    put_be32(crc, o->crc);
    put(o, crc, 4);
}

/* Append uncompressed bytes to the zlib stream, opening stored blocks as needed. */
static void deflate_stored(png_out *o, const uint8_t *bytes, size_t n)
{
    uint8_t header[5];
    size_t len, take;

    while (n > 0) {
        if (o->block_left == 0) {
            len = o->raw_left < STORED_BLOCK_MAX ? o->raw_left : STORED_BLOCK_MAX;
            header[0] = (uint8_t)(len == o->raw_left ? 1 : 0); /* BFINAL, BTYPE = 00 */
            header[1] = (uint8_t)(len & 0xFF);
            header[2] = (uint8_t)(len >> 8);
            header[3] = (uint8_t)(~len & 0xFF);
            header[4] = (uint8_t)((~len >> 8) & 0xFF);
            emit(o, header, sizeof(header));
            o->block_left = len;
        }
        take = n < o->block_left ? n : o->block_left;
        emit(o, bytes, take);
        o->adler = gs_sim_adler32(o->adler, bytes, take);
        o->block_left -= take;
        o->raw_left -= take;
        bytes += take;
        n -= take;
    }
}

static void write_png_stream(png_out *o, const uint8_t fb[OLED_FB_BYTES], int scale)
{
    static const uint8_t signature[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
    static const uint8_t zlib_header[2] = {0x78, 0x01}; /* CM 8, CINFO 7, FCHECK: 0x7801 % 31 == 0 */
    uint8_t ihdr[13], trailer[4];
    uint8_t row[1 + OLED_WIDTH * GS_SIM_MAX_SCALE];
    size_t width = (size_t)OLED_WIDTH * (size_t)scale, height = (size_t)OLED_HEIGHT * (size_t)scale;
    size_t raw = height * (1 + width);
    size_t blocks = (raw + STORED_BLOCK_MAX - 1) / STORED_BLOCK_MAX;
    size_t x, y;

    put(o, signature, sizeof(signature));
    put_be32(ihdr, (uint32_t)width);
    put_be32(ihdr + 4, (uint32_t)height);
    ihdr[8] = 8;  /* bit depth */
    ihdr[9] = 0;  /* color type: grayscale */
    ihdr[10] = 0; /* compression: deflate */
    ihdr[11] = 0; /* filter method 0 */
    ihdr[12] = 0; /* no interlace */
    chunk_begin(o, "IHDR", sizeof(ihdr));
    emit(o, ihdr, sizeof(ihdr));
    chunk_end(o);

    chunk_begin(o, "IDAT", (uint32_t)(sizeof(zlib_header) + 5 * blocks + raw + 4));
    emit(o, zlib_header, sizeof(zlib_header));
    o->adler = 1;
    o->raw_left = raw;
    o->block_left = 0;
    for (y = 0; y < height; y++) {
        row[0] = 0; /* filter: none */
        for (x = 0; x < width; x++) {
            row[1 + x] = oled_get_pixel(fb, (int)(x / (size_t)scale), (int)(y / (size_t)scale)) ? 255 : 0;
        }
        deflate_stored(o, row, 1 + width);
    }
    put_be32(trailer, o->adler);
    emit(o, trailer, sizeof(trailer));
    chunk_end(o);

    chunk_begin(o, "IEND", 0);
    chunk_end(o);
}

int gs_sim_write_png(const uint8_t fb[OLED_FB_BYTES], const char *path, int scale)
{
    png_out o;
    char *tmp;
    size_t n;
    int closed;

    if (fb == NULL || path == NULL || scale < 1 || scale > GS_SIM_MAX_SCALE) {
        return GS_SIM_ERR_ARG;
    }
    n = strlen(path);
    tmp = (char *)malloc(n + 5);
    if (tmp == NULL) {
        return GS_SIM_ERR_IO;
    }
    memcpy(tmp, path, n);
    memcpy(tmp + n, ".tmp", 5);

    memset(&o, 0, sizeof(o));
    o.f = fopen(tmp, "wb");
    if (o.f == NULL) {
        free(tmp);
        return GS_SIM_ERR_IO;
    }
    write_png_stream(&o, fb, scale);
    closed = fclose(o.f);
    if (o.failed || closed != 0 || rename(tmp, path) != 0) {
        int saved = errno;
        remove(tmp);
        free(tmp);
        errno = saved;
        return GS_SIM_ERR_IO;
    }
    free(tmp);
    return GS_SIM_OK;
}
