/* Stand-in for the Arduino-ESP32 3.x / ESP-IDF 5 header of this name, declaring only what
 * src/main.cpp uses, with the documented signatures: test_board_glue.py compiles main.cpp
 * against these for a syntax and type check on the host. Not the real header. */
#pragma once
#include <stdint.h>
typedef uint32_t TickType_t;
void vTaskDelay(TickType_t);
