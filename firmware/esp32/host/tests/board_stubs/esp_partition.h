/* Stand-in for the Arduino-ESP32 3.x / ESP-IDF 5 header of this name, declaring only what
 * src/main.cpp uses, with the documented signatures: test_board_glue.py compiles main.cpp
 * against these for a syntax and type check on the host. Not the real header. */
#pragma once
#include <stddef.h>
#include <stdint.h>
typedef int esp_err_t;
#define ESP_OK 0
const char *esp_err_to_name(esp_err_t);
typedef enum { ESP_PARTITION_TYPE_APP = 0, ESP_PARTITION_TYPE_DATA = 1 } esp_partition_type_t;
typedef enum { ESP_PARTITION_SUBTYPE_ANY = 0xff } esp_partition_subtype_t;
typedef enum { ESP_PARTITION_MMAP_DATA, ESP_PARTITION_MMAP_INST } esp_partition_mmap_memory_t;
typedef uint32_t esp_partition_mmap_handle_t;
typedef struct { uint32_t address; uint32_t size; char label[17]; } esp_partition_t;
const esp_partition_t *esp_partition_find_first(esp_partition_type_t, esp_partition_subtype_t, const char *);
esp_err_t esp_partition_read(const esp_partition_t *, size_t, void *, size_t);
esp_err_t esp_partition_mmap(const esp_partition_t *, size_t, size_t, esp_partition_mmap_memory_t, const void **, esp_partition_mmap_handle_t *);
