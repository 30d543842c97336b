/* Stand-in for the Arduino-ESP32 3.x / ESP-IDF 5 header of this name, declaring only what
 * src/main.cpp uses, with the documented signatures: test_board_glue.py compiles main.cpp
 * against these for a syntax and type check on the host. Not the real header. */
#pragma once
#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include <stdio.h>
struct HardwareSerial {
  void begin(unsigned long);
  size_t println(const char *);
  size_t print(const char *);
  size_t printf(const char *, ...) __attribute__((format(printf, 2, 3)));
  int available();
  int read();
  size_t write(const uint8_t *, size_t);
};
extern HardwareSerial Serial;
void delay(uint32_t);
uint32_t micros();
void yield();
