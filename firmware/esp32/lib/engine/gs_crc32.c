/* gs_crc32.c: CRC-32 of FORMAT.md section 5 (IEEE polynomial 0xEDB88320 reflected, initial and
 * final xor 0xFFFFFFFF; equal to Python's zlib.crc32).
 *
 * Half-byte table: 16 words of flash instead of 256, two lookups per byte. gs_open checks the
 * CRC once per boot, over the whole file, so this is fast enough on the ESP32-S3 and costs no
 * RAM (the table is const: .rodata, mapped from flash). */
#include "gs_engine.h"

/* crc_nibble[i]: four reflected shift-and-xor steps of i with the polynomial 0xEDB88320, i.e.
 * the CRC update for one 4-bit value. */
static const uint32_t crc_nibble[16] = {
    0x00000000u, 0x1DB71064u, 0x3B6E20C8u, 0x26D930ACu, 0x76DC4190u, 0x6B6B51F4u,
    0x4DB26158u, 0x5005713Cu, 0xEDB88320u, 0xF00F9344u, 0xD6D6A3E8u, 0xCB61B38Cu,
    0x9B64C2B0u, 0x86D3D2D4u, 0xA00AE278u, 0xBDBDF21Cu,
};

uint32_t gs_crc32(const uint8_t *data, size_t n)
{
    uint32_t crc = 0xFFFFFFFFu;
    size_t i;
    for (i = 0; i < n; i++) {
        crc ^= data[i];
        crc = (crc >> 4) ^ crc_nibble[crc & 15u];
        crc = (crc >> 4) ^ crc_nibble[crc & 15u];
    }
    return crc ^ 0xFFFFFFFFu;
}
