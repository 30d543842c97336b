/* Stand-in for the Arduino-ESP32 3.x / ESP-IDF 5 header of this name, declaring only what
 * src/main.cpp uses, with the documented signatures: test_board_glue.py compiles main.cpp
 * against these for a syntax and type check on the host. Not the real header. */
#pragma once
#include <stdint.h>
#include <stddef.h>
struct TwoWire {
  bool begin(int sda, int scl, uint32_t freq);
  void beginTransmission(uint8_t addr);
  size_t write(const uint8_t *, size_t);
  uint8_t endTransmission();
};
extern TwoWire Wire;
