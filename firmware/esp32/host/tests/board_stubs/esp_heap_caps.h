/* Stand-in for the Arduino-ESP32 3.x / ESP-IDF 5 header of this name, declaring only what
 * src/main.cpp uses, with the documented signatures: test_board_glue.py compiles main.cpp
 * against these for a syntax and type check on the host. Not the real header. */
#pragma once
#include <stddef.h>
#include <stdint.h>
#define MALLOC_CAP_INTERNAL (1 << 11)
#define MALLOC_CAP_8BIT (1 << 2)
size_t heap_caps_get_largest_free_block(uint32_t caps);
size_t heap_caps_get_free_size(uint32_t caps);
void *heap_caps_aligned_alloc(size_t alignment, size_t size, uint32_t caps);
