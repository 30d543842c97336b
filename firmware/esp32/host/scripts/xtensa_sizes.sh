#!/usr/bin/env bash
# xtensa_sizes.sh: compile the engine (and lib/oled when present) for an Xtensa core, freestanding,
# warnings as errors, and print each object's section sizes.
#
#   firmware/esp32/host/scripts/xtensa_sizes.sh [OUT_DIR]
#
# Proves the portable C builds with no C library headers at all (the Debian xtensa-lx106 GCC
# ships none; the engine needs only <stdint.h>/<stddef.h> and declares its two libm functions,
# sqrtf and rintf, when __STDC_HOSTED__ is 0) and that it has no writable static data: .data + .bss of the engine
# must stay 0 (everything lives in the caller's arena). The ESP32-S3 is an LX7 core; the LX106
# compiler is the Xtensa GCC Debian packages, close enough for sizes and a portability check.
# Output: `xtensa-lx106-elf-size` lines per object, then `total <lib> text=N data=N bss=N`.
# Exit status: 0, or the compiler's on a warning/error; 127 if the toolchain is missing.
set -euo pipefail

CC=${XTENSA_CC:-xtensa-lx106-elf-gcc}
SIZE=${XTENSA_SIZE:-xtensa-lx106-elf-size}
for tool in "$CC" "$SIZE"; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "xtensa_sizes.sh: $tool not found: apt-get install gcc-xtensa-lx106 binutils-xtensa-lx106" >&2
        exit 127
    fi
done

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LIB=$(cd "$HERE/../../lib" && pwd)
OUT=${1:-$(mktemp -d)}
mkdir -p "$OUT"
CFLAGS=(-std=c99 -ffreestanding -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Werror -Os
        -ffp-contract=off -c)

for lib in engine oled; do
    [ -d "$LIB/$lib" ] || continue
    shopt -s nullglob
    sources=("$LIB/$lib"/*.c)
    shopt -u nullglob
    [ ${#sources[@]} -gt 0 ] || continue
    objects=()
    for src in "${sources[@]}"; do
        obj="$OUT/${lib}_$(basename "${src%.c}").o"
        "$CC" "${CFLAGS[@]}" -I"$LIB/$lib" "$src" -o "$obj"  # both libraries: the same strict flags
        objects+=("$obj")
    done
    "$SIZE" "${objects[@]}" | awk -v lib="$lib" '{ print } NR > 1 { t += $1; d += $2; b += $3 }
        END { printf "total %s text=%d data=%d bss=%d\n", lib, t, d, b }'
done
