/* gs_format.h: the constants of the .gsm artifact, packages/quant/FORMAT.md section 1, defined
 * once for C. Python defines the same names in gptstack/quant/format.py; the host test
 * firmware/esp32/host/tests/test_format_constants.py parses this file and checks that every
 * GS_<NAME> here equals gptstack.quant.format.<NAME> and that no name is missing on either side.
 * Keep one `#define GS_<NAME> value` per line: the test reads them with a regular expression. */
#ifndef GS_FORMAT_H
#define GS_FORMAT_H

#define GS_MAGIC "GSMF"              /* first four bytes: 47 53 4D 46 */
#define GS_VERSION 1u                /* the format version this engine reads */
#define GS_HEADER_BYTES 128u         /* header size (section 2) */
#define GS_ALIGN 16u                 /* section and tensor alignment */
#define GS_TENSOR_ENTRY_BYTES 96u    /* one tensor-table entry (section 4) */
#define GS_NAME_BYTES 48u            /* tensor name field, NUL-padded */
#define GS_DTYPE_F32 0u              /* tensor dtype: IEEE-754 binary32, little-endian */
#define GS_DTYPE_I8 1u               /* tensor dtype: int8 with one f32 scale per row */
#define GS_FLAG_BIAS 1u              /* bit 0 of `flags`: linears and LayerNorms have biases */
#define GS_NO_TOKEN 0xFFFFFFFFu      /* "no token" (bos_token, byte_to_token of a char tokenizer) */
#define GS_TOK_KIND_CHAR 0u          /* tokenizer kind: one token per UTF-8 code point */
#define GS_TOK_KIND_BPE 1u           /* tokenizer kind: byte-level BPE */
#define GS_PATTERN_NONE 0u           /* pre-tokenization: none (char) */
#define GS_PATTERN_GPT2 1u           /* pre-tokenization: GPT-2's pattern (section 10) */
#define GS_PATTERN_GPT4 2u           /* pre-tokenization: GPT-4's pattern (not encoded on device) */
#define GS_MAX_NDIM 4u               /* shape entries per tensor-table entry */

#endif /* GS_FORMAT_H */
