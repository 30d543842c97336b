// main.cpp - gptstack on an ESP32-S3 DevKitC-1: the int8 GPT in the `model` flash partition,
// prompts from the serial monitor, tokens streamed to serial and to a 128x64 SSD1306 OLED.
//
// Boot: I2C + OLED, map the `model` partition in place (zero copy), gs_open it, allocate the
// engine's arena once in internal RAM. Loop: read a prompt line, generate, report tokens/s.
// Everything that can fail says so on the OLED and on serial. The C engine (lib/engine) and the
// OLED library (lib/oled) are portable C99; this file is the only board-specific code.
// Not compiled in this repository's CI (no ESP-IDF/Arduino toolchain there): see README.md.

#include <Arduino.h>
#include <Wire.h>
#include <freertos/FreeRTOS.h>
#include <freertos/task.h>
#include <esp_heap_caps.h>
#include <esp_idf_version.h>
#include <esp_partition.h>
#if ESP_IDF_VERSION >= ESP_IDF_VERSION_VAL(5, 0, 0)
#include <esp_random.h>  // esp_random() moved out of esp_system.h in ESP-IDF 5
#else
#include <esp_system.h>
#endif

#include "gs_engine.h"
#include "oled.h"

// ---- build-time settings (platformio.ini build_flags) -------------------------------------
#ifndef GS_OLED_SDA
#define GS_OLED_SDA 8  // ESP32-S3-DevKitC-1: Arduino's default SDA (variant esp32s3)
#endif
#ifndef GS_OLED_SCL
#define GS_OLED_SCL 9  // ... and SCL
#endif
#ifndef GS_OLED_ADDR
#define GS_OLED_ADDR OLED_I2C_ADDR  // 0x3C; 0x3D on modules with SA0 tied high
#endif
#ifndef GS_OLED_I2C_HZ
#define GS_OLED_I2C_HZ 400000  // SSD1306 fast mode: 2.5 us clock cycle (datasheet 13, I2C timing)
#endif
#ifdef GS_OLED_SH1106  // 1.3" modules: SH1106 controller (lib/oled/oled.h)
#define GS_OLED_CONTROLLER OLED_SH1106
#else
#define GS_OLED_CONTROLLER OLED_SSD1306
#endif
#ifndef GS_MAX_NEW_TOKENS
#define GS_MAX_NEW_TOKENS 200
#endif
// Sampling: gptstack.tools.defaults.SAMPLING's values (host/tests/test_platformio.py checks).
#ifndef GS_TEMPERATURE
#define GS_TEMPERATURE 0.8f
#endif
#ifndef GS_TOP_K
#define GS_TOP_K 40
#endif
#define GS_PARTITION_LABEL "model"   // partitions.csv
#define GS_PROMPT_BYTES 256          // longest prompt line accepted
#define GS_MAX_TOKEN_BYTES 512       // longest token the streaming decoder buffer takes

// ---- state: all static, sized at build time, plus the one arena allocation -----------------
static uint8_t g_fb[OLED_FB_BYTES];
static oled_console g_console;
static oled_device g_oled;
static bool g_oled_ok = false;

static gs_model g_model;
static bool g_model_ok = false;
static void *g_arena = NULL;
static gs_rng g_rng;

static uint8_t g_saved_page[OLED_WIDTH];  // the bottom text line, under the slide's progress bar

static char g_prompt[GS_PROMPT_BYTES + 1];
static size_t g_prompt_len = 0;
static uint32_t g_ids[GS_PROMPT_BYTES];                // gs_encode needs one slot per prompt byte
static uint8_t g_piece[3 + GS_MAX_TOKEN_BYTES];        // gs_decode: held bytes + one token

// ---- OLED over Arduino's Wire ----------------------------------------------------------------
// oled_transport.write: one I2C transaction (control byte + payload). 0 = ACK.
static int wire_write(void *ctx, uint8_t addr, const uint8_t *bytes, size_t n)
{
    TwoWire *wire = static_cast<TwoWire *>(ctx);
    wire->beginTransmission(addr);
    size_t written = wire->write(bytes, n);
    uint8_t status = wire->endTransmission();  // 0 ok, 2 address NACK, 3 data NACK, ...
    if (status != 0) {
        return status;
    }
    return written == n ? 0 : -1;
}

static void screen_flush()
{
    uint8_t dirty = oled_console_take_dirty(&g_console);
    if (g_oled_ok && dirty != 0 && oled_flush_pages(&g_oled, g_fb, dirty) != 0) {
        g_oled_ok = false;  // the panel went away: keep going on serial only
        Serial.println("[oled] I2C write failed; continuing on serial only");
    }
}

static void screen_write(const uint8_t *bytes, size_t n)
{
    oled_text_write(&g_console, bytes, n);
    screen_flush();
}

static void screen_print(const char *text)
{
    screen_write(reinterpret_cast<const uint8_t *>(text), strlen(text));
}

// A message for both outputs (serial gets a newline; the screen gets the text as is).
static void say(const char *text)
{
    Serial.println(text);
    screen_print(text);
    screen_print("\n");
}

static void oled_begin()
{
    Wire.begin(GS_OLED_SDA, GS_OLED_SCL, GS_OLED_I2C_HZ);
    g_oled.bus.ctx = &Wire;
    g_oled.bus.write = wire_write;
    g_oled.i2c_addr = GS_OLED_ADDR;
    g_oled.controller = GS_OLED_CONTROLLER;
    oled_console_init(&g_console, g_fb);
    g_oled_ok = oled_init(&g_oled) == 0 && oled_flush(&g_oled, g_fb) == 0;
    (void)oled_console_take_dirty(&g_console);
    if (!g_oled_ok) {
        Serial.printf("[oled] no %s answered at 0x%02X on SDA %d / SCL %d: check the wiring "
                      "(README.md); continuing on serial only\n",
                      GS_OLED_CONTROLLER == OLED_SH1106 ? "SH1106" : "SSD1306", GS_OLED_ADDR,
                      GS_OLED_SDA, GS_OLED_SCL);
    }
}

// ---- the model: map the partition, open, allocate the arena ------------------------------------
static bool fail(const char *what, const char *detail, const char *fix)
{
    char line[160];
    snprintf(line, sizeof(line), "%s: %s", what, detail);
    say(line);
    say(fix);
    return false;
}

// gs_on_slide: the window is re-encoding its kept half (under a second: PERFORMANCE.md). The
// bottom text line turns into a progress bar (inverted over done/total of its width), the idle
// task gets a tick between tiles, and the line comes back when the slide is done.
static void on_slide(void *, uint32_t done, uint32_t total)
{
    uint8_t *page = g_fb + (OLED_PAGES - 1) * OLED_WIDTH;
    if (done == 0) {
        memcpy(g_saved_page, page, OLED_WIDTH);
    }
    uint32_t lit = done < total ? OLED_WIDTH * done / total : 0;
    for (uint32_t x = 0; x < OLED_WIDTH; x++) {
        page[x] = x < lit ? (uint8_t)~g_saved_page[x] : g_saved_page[x];
    }
    if (g_oled_ok && oled_flush_pages(&g_oled, g_fb, (uint8_t)(1u << (OLED_PAGES - 1))) != 0) {
        g_oled_ok = false;
    }
    vTaskDelay(1);
}

static bool model_begin()
{
    const esp_partition_t *part = esp_partition_find_first(
        ESP_PARTITION_TYPE_DATA, ESP_PARTITION_SUBTYPE_ANY, GS_PARTITION_LABEL);
    if (part == NULL) {
        return fail("model", "no 'model' partition", "flash with partitions.csv: pio run -t upload");
    }

    // The header says how long the file is (gs_peek_header: FORMAT.md section 2); the engine
    // rejects trailing bytes, so map exactly that much. An erased partition reads 0xFF..:
    // GS_ERR_MAGIC, before anything is mapped.
    uint8_t header[GS_HEADER_BYTES];
    if (esp_partition_read(part, 0, header, sizeof(header)) != ESP_OK) {
        return fail("model", "partition read failed", "flash it: gptstack firmware flash-model");
    }
    uint32_t file_bytes = 0;
    gs_status status = gs_peek_header(header, sizeof(header), &file_bytes, NULL);
    if (status != GS_OK) {
        return fail("model", gs_status_name(status),
                    "no valid model: gptstack export --target esp32s3, then flash-model");
    }
    if (file_bytes > part->size) {
        char detail[96];
        snprintf(detail, sizeof(detail), "%u B > partition %u B", (unsigned)file_bytes,
                 (unsigned)part->size);
        return fail("model", detail, "export a smaller model (gptstack export prints the plan)");
    }
    size_t n_bytes = file_bytes;

    // Zero copy: the MMU maps the flash pages into the data address space; the engine reads
    // weights through the cache (PERFORMANCE.md). Never unmapped: the model lives until reset.
    const void *data = NULL;
#if ESP_IDF_VERSION >= ESP_IDF_VERSION_VAL(5, 0, 0)
    esp_partition_mmap_handle_t handle;
    esp_err_t err = esp_partition_mmap(part, 0, n_bytes, ESP_PARTITION_MMAP_DATA, &data, &handle);
#else
    spi_flash_mmap_handle_t handle;
    esp_err_t err = esp_partition_mmap(part, 0, n_bytes, SPI_FLASH_MMAP_DATA, &data, &handle);
#endif
    if (err != ESP_OK) {
        return fail("model", esp_err_to_name(err), "mmap of the model partition failed");
    }

    status = gs_open(&g_model, data, n_bytes);
    if (status != GS_OK) {
        return fail("model", gs_status_name(status),
                    "no valid model: gptstack export --target esp32s3, then flash-model");
    }

    // The arena: one block of internal RAM, 16-byte aligned (FORMAT.md section 11; the engine
    // returns GS_ERR_ARENA otherwise), allocated once and never freed.
    size_t arena_bytes = g_model.config.arena_bytes;  // section 11's formula (gs_open checked it)
    const uint32_t caps = MALLOC_CAP_INTERNAL | MALLOC_CAP_8BIT;
    size_t largest = heap_caps_get_largest_free_block(caps);
    g_arena = heap_caps_aligned_alloc(16, arena_bytes, caps);
    if (g_arena == NULL) {
        char detail[96];
        snprintf(detail, sizeof(detail), "arena %u B > largest free block %u B",
                 (unsigned)arena_bytes, (unsigned)largest);
        return fail("RAM", detail, "export a smaller model (block_size, n_layer, vocab)");
    }
    status = gs_attach_arena(&g_model, g_arena, arena_bytes);
    if (status != GS_OK) {
        return fail("arena", gs_status_name(status), "engine and firmware disagree: rebuild both");
    }
    gs_on_slide(&g_model, on_slide, NULL);

    // The streaming decoder's buffer must hold any one token.
    for (uint32_t id = 0; id < g_model.tokenizer.n_tokens; id++) {
        const uint8_t *bytes;
        size_t n;
        if (gs_token_bytes(&g_model, id, &bytes, &n) == GS_OK && n > GS_MAX_TOKEN_BYTES) {
            return fail("model", "a token longer than 512 bytes", "raise GS_MAX_TOKEN_BYTES");
        }
    }

    const gs_config *c = &g_model.config;
    Serial.printf("[model] %u bytes mapped at %p: V %u, T %u, L %u, C %u, nh %u\n",
                  (unsigned)n_bytes, data, (unsigned)c->vocab_size, (unsigned)c->block_size,
                  (unsigned)c->n_layer, (unsigned)c->n_embd, (unsigned)c->n_head);
    Serial.printf("[ram] arena %u B in internal RAM (largest free block was %u B, now %u B free)\n",
                  (unsigned)arena_bytes, (unsigned)largest,
                  (unsigned)heap_caps_get_free_size(caps));
    Serial.printf("[ram] window slides re-encode in tiles of %u positions\n",
                  (unsigned)gs_slide_tile_positions(c));
    char line[64];
    snprintf(line, sizeof(line), "model L%u C%u T%u V%u", (unsigned)c->n_layer,
             (unsigned)c->n_embd, (unsigned)c->block_size, (unsigned)c->vocab_size);
    screen_print(line);
    screen_print("\n");
    return true;
}

// ---- generation -----------------------------------------------------------------------------
static bool check(gs_status status, const char *step)
{
    if (status == GS_OK) {
        return true;
    }
    char line[96];
    snprintf(line, sizeof(line), "\n%s: %s", step, gs_status_name(status));
    say(line);
    return false;
}

static void emit(const uint8_t *bytes, size_t n)
{
    Serial.write(bytes, n);
    screen_write(bytes, n);
}

static void generate(const char *prompt, size_t prompt_len)
{
    size_t n_ids = 0;
    if (!check(gs_reset(&g_model), "reset")) {
        return;
    }
    if (prompt_len > 0) {
        if (!check(gs_encode(&g_model, reinterpret_cast<const uint8_t *>(prompt), prompt_len,
                             g_ids, GS_PROMPT_BYTES, &n_ids), "encode")) {
            return;
        }
    } else if (g_model.config.bos_token != GS_NO_TOKEN) {
        g_ids[n_ids++] = g_model.config.bos_token;  // FORMAT.md section 8: empty prompt
    } else {
        say("type a prompt (this model has no BOS token)");
        return;
    }

    oled_console_init(&g_console, g_fb);  // a fresh screen per prompt
    emit(reinterpret_cast<const uint8_t *>(prompt), prompt_len);

    const float *logits = NULL;
    uint32_t t0 = micros();
    for (size_t i = 0; i < n_ids; i++) {
        if (!check(gs_forward(&g_model, g_ids[i], &logits), "forward")) {
            return;
        }
        vTaskDelay(1);  // one tick for the idle task (yield() does not let priority 0 run)
    }
    uint32_t t1 = micros();

    gs_decoder decoder;
    gs_decoder_init(&decoder);
    uint32_t generated = 0;
    for (; generated < GS_MAX_NEW_TOKENS; generated++) {
        uint32_t token;
        size_t n_out;
        if (!check(gs_sample(&g_model, logits, GS_TEMPERATURE, GS_TOP_K, &g_rng, &token), "sample") ||
            !check(gs_decode(&decoder, &g_model, token, g_piece, sizeof(g_piece), &n_out), "decode")) {
            return;
        }
        emit(g_piece, n_out);
        if (!check(gs_forward(&g_model, token, &logits), "forward")) {
            return;
        }
        // One tick (1 ms at Arduino's 1000 Hz) for the idle task, which feeds the task watchdog:
        // yield() only switches to tasks of the loop task's own priority, never to idle's 0.
        vTaskDelay(1);
    }
    size_t n_out;
    if (gs_decode_flush(&decoder, g_piece, sizeof(g_piece), &n_out) == GS_OK) {
        emit(g_piece, n_out);
    }
    oled_text_finish(&g_console);
    uint32_t t2 = micros();

    // Generation rate includes sampling, decoding and the serial/OLED output, as a user sees it.
    double prompt_s = (t1 - t0) / 1e6, gen_s = (t2 - t1) / 1e6;
    Serial.printf("\n[%u prompt tokens in %.2f s, %u tokens in %.2f s: %.2f tokens/s]\n",
                  (unsigned)n_ids, prompt_s, (unsigned)generated, gen_s,
                  gen_s > 0 ? generated / gen_s : 0.0);
    char line[32];
    snprintf(line, sizeof(line), "\n[%.1f tok/s]", gen_s > 0 ? generated / gen_s : 0.0);
    screen_print(line);
}

// ---- Arduino entry points -------------------------------------------------------------------
void setup()
{
    Serial.begin(115200);
    delay(200);
    Serial.println("\ngptstack on ESP32-S3");
    oled_begin();
    screen_print("gptstack\n");
    g_model_ok = model_begin();
    // Seeded from the hardware RNG (ESP-IDF "Random Number Generation": truly random only while
    // an entropy source such as RF is on, which is enough to vary runs); printed so a run can
    // be repeated with the host engine (`gptstack firmware run --seed`).
    uint64_t seed = ((uint64_t)esp_random() << 32) | esp_random();
    gs_rng_seed(&g_rng, seed);
    Serial.printf("[rng] seed %llu\n", (unsigned long long)seed);
    if (g_model_ok) {
        say("type a prompt + Enter");
    }
}

void loop()
{
    if (!g_model_ok) {
        delay(1000);  // the reason is on the screen and was printed at boot
        return;
    }
    static bool after_cr = false;  // a line ends in CR, LF or CR LF (pio device monitor: CR LF)
    while (Serial.available() > 0) {
        int c = Serial.read();
        if (c == '\n' && after_cr) {
            after_cr = false;
            continue;
        }
        after_cr = c == '\r';
        if (c == '\r' || c == '\n') {
            g_prompt[g_prompt_len] = '\0';
            generate(g_prompt, g_prompt_len);  // an empty line generates from the BOS token
            g_prompt_len = 0;
            Serial.print("\n> ");
        } else if (g_prompt_len < GS_PROMPT_BYTES) {
            g_prompt[g_prompt_len++] = (char)c;
        }
    }
    delay(10);
}
